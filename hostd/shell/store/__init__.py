"""The store: SQLite through apsw. `store` is its public surface (`st.X`); behind it the
database file (`database`, the one run-time apsw importer), the schema (`migrations`), the
trio writer task (`writer`), its operations and records (`ops`) and column codecs (`rows`).
Only this package imports apsw."""

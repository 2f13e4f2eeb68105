"""The store: SQLite through apsw (`store`), its operations and records (`ops`) and column
codecs (`rows`). Only this package imports apsw."""

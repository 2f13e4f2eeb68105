"""`hostd app`: the reference page in native windows (pywebview, Qt WebEngine backend).

An edge process like `hostd web`, but with no network listener at all: each window loads the
page from package data (a file URL) and its frames go through pywebview's JS-to-Python bridge
to its own connection on the daemon's Unix socket (`bridge.py`). docs/app.md says more.
"""

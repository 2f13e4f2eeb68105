"""`hostd web`: a loopback gateway that serves the reference page and bridges each browser
WebSocket to its own daemon connection (JSON frames, one WebSocket message per frame body).

It is an edge process, a client of the daemon like the CLI: the daemon itself opens no network
listener. Importing this package is cheap; the server stack is imported by the command only.
"""

from pathlib import Path

#: The built page (package data; scripts/build-page writes it): `hostd web` serves it,
#: `hostd app` loads it from the file.
STATIC_DIR = Path(__file__).with_name("static")

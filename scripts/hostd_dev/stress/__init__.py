"""The reliability suite's harness: attacks on a real hostd daemon (see docs/reliability.md).

- `hostd_dev.stress.process`: a `hostd serve` subprocess (start, kill -9, stop, RSS/fd samples).
- `hostd_dev.stress.crash`: kill -9 campaigns with restart checks (DESIGN.md invariant 8).
- `hostd_dev.stress.fuzz`: socket fuzzing (random and mutated frames, connection storms).
- `hostd_dev.stress.soak`: many topics and windows for minutes, memory and descriptors sampled.
- `hostd_dev.stress.dbcheck`: reads the database with stdlib sqlite3, independently of hostd.

`python -m hostd_dev.stress --help` (or `scripts/stress`) runs the long versions; the bounded
versions run in `tests/reliability`.
"""

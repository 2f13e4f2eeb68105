"""The reliability suite's harness: attacks on a real hostd daemon (see docs/reliability.md).

- `hostd.stress.process`: a `hostd serve` subprocess (start, kill -9, stop, RSS/fd samples).
- `hostd.stress.crash`: kill -9 campaigns with restart checks (DESIGN.md invariant 8).
- `hostd.stress.fuzz`: socket fuzzing (random and mutated frames, connection storms).
- `hostd.stress.soak`: many topics and windows for minutes, memory and descriptors sampled.
- `hostd.stress.dbcheck`: reads the database with stdlib sqlite3, independently of hostd.

`python -m hostd.stress --help` (or `scripts/stress`) runs the long versions; the bounded
versions run in `tests/reliability`.
"""

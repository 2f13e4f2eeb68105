"""Driver subprocesses: the registry (entry points), sessions (one process each), the warm
pool and the supervisor that owns them."""

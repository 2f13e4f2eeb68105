"""The trio shell: the daemon, request handling, topic hosts (effect executors), connections,
the socket server; `drivers/` (supervisor, driver sessions, warm pool, registry) and `store/`
(the apsw writer, its operations and row codecs). It feeds `hostd.core` and executes its
effects.
"""

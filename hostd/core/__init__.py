"""The sans-IO core: the topic runtime, the turn, rows, the transcript reducer, history
overlap, connector resolution, assistant configuration parsing, effects.

Nothing here imports trio, apsw or sockets, or touches files: time comes in as arguments and
effects go out as values (tests/core/test_core_is_sans_io.py enforces it). The shell
(`hostd.shell`) executes the effects.
"""

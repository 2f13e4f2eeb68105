"""The `hostd.drivers` entry point of the scripted driver (imports nothing heavy)."""

from __future__ import annotations

from hostd_protocol.common import DriverMode
from hostd_protocol.driver_spec import DriverSpec
from hostd_scripted import __version__

#: Its options (README.md, "Options"): the daemon refuses any other name for a topic.
OPTIONS_HELP: tuple[tuple[str, str], ...] = (
    ("scenario", "scenario name or script (default: default)"),
    ("chunk_rate", "text chunks per second (default 40; 0: as fast as possible)"),
    ("tool_pause", "seconds a /tool runs (default 1.5)"),
    ("connect_delay", "seconds of simulated vendor connect, paid once per process"),
    ("start_delay", "seconds before answering init (a slow start)"),
    ("close_delay", "seconds before exiting after close"),
    ("exit_delay", "seconds the process lingers after closing its output (slow teardown)"),
    ("hang_at_handshake", "never answer init"),
    ("crash_at_handshake", "exit 4 during init"),
    ("garbage_at_handshake", "write garbage before ready"),
    ("fatal", "refuse init with this message"),
    ("fatal_env", "refuse init quoting this environment variable's value (redaction tests)"),
    ("require_env", "refuse init unless this environment variable is set"),
    ("stderr_lines", "lines printed on stderr at init"),
    ("fork_session", "start a vendor copy when the host offers one"),
    ("inject_steering", "announce steering injection (default true)"),
    ("approvals", "announce approvals (default true)"),
    ("compaction", "announce compaction (default true)"),
    ("resume", "announce resume (default true)"),
    ("warm", "announce prewarming (default true)"),
    ("bench_chunks", "bench mode: chunks per turn (default 1000)"),
    ("bench_chunk_size", "bench mode: bytes per chunk (default 64)"),
    ("bench_rate", "bench mode: chunks per second (default 0: as fast as possible)"),
)

SPEC = DriverSpec(
    name="scripted",
    module="hostd_scripted",
    description="Deterministic scripted driver for demos, tests and benchmarks (no network)",
    version=__version__,
    # Only so tests can show that a variable a spec names reaches its driver (and no other).
    env=("HOSTD_SCRIPTED_TOKEN",),
    options_help=OPTIONS_HELP,
    # Its scenarios, per message (`Send.options["scenario"]`): so modes are tested end to end.
    modes=(
        DriverMode(id="default", name="Default"),
        DriverMode(id="echo", name="Echo", description="says the message back"),
        DriverMode(id="think", name="Think", description="thinks before answering"),
    ),
    mode_option="scenario",
    # It says what it got ("(images: dot.png image/png 68 bytes)"), so windows can test them.
    images=True,
)

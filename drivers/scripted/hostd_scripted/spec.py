"""The `hostd.drivers` entry point of the scripted driver (imports nothing heavy)."""

from __future__ import annotations

from hostd_protocol.driver_spec import DriverSpec
from hostd_scripted import __version__

SPEC = DriverSpec(
    name="scripted",
    module="hostd_scripted",
    description="Deterministic scripted driver for demos, tests and benchmarks (no network)",
    version=__version__,
    # Only so tests can show that a variable a spec names reaches its driver (and no other).
    env=("HOSTD_SCRIPTED_TOKEN",),
)

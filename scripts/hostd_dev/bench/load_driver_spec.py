"""The `hostd.drivers` entry point of the bench's load driver (`load_driver`), declared by
hostd-dev only: the developer tools' environment has it, a user's install never does."""

from __future__ import annotations

from hostd_protocol.driver_spec import DriverSpec

SPEC = DriverSpec(
    name="bench-load",
    module="hostd_dev.bench.load_driver",
    description="Benchmark load driver: paced /bench chunks at a few us each (dev tools only)",
    version="0.1.0",
)

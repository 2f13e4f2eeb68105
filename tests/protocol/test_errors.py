"""The error tree: stable unique codes that map back to classes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from hostd_protocol import errors

# Imports every module of hostd, the protocol and each installed driver distribution, then
# prints each code that more than one error class carries (a subclass without its own `code`
# inherits its parent's).
_ALL_CODES = """
import importlib, importlib.metadata, json, pkgutil
from hostd_protocol import errors
tops = {"hostd", "hostd_protocol"} | {
    ep.value.split(":")[0].split(".")[0]
    for ep in importlib.metadata.entry_points(group="hostd.drivers")
}
for top in sorted(tops):
    for mod in pkgutil.walk_packages(importlib.import_module(top).__path__, top + "."):
        if not mod.name.endswith(".__main__"):
            importlib.import_module(mod.name)
by_code = {}
for cls in errors._all_subclasses(errors.HostdError):
    by_code.setdefault(cls.code, []).append(f"{cls.__module__}.{cls.__qualname__}")
print(json.dumps({"codes": sorted(by_code),
                  "shared": {c: n for c, n in by_code.items() if len(n) > 1}}))
"""


def test_codes_are_unique() -> None:
    """In a fresh interpreter that imports every module: here, which classes exist depends on
    what earlier tests imported (a second `driver_crashed` class in the daemon's driver session
    showed only when tests/reliability had run first)."""
    out = subprocess.run(
        [sys.executable, "-c", _ALL_CODES], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout.splitlines()[-1])
    assert found["shared"] == {}
    # The walk reached the errors defined outside the protocol (the daemon's, the client's).
    assert {"daemon_running", "daemon_not_running"} <= set(found["codes"])


@pytest.mark.parametrize("cls", list(errors.error_classes().values()), ids=lambda c: c.code)
def test_every_code_maps_back(cls: type[errors.HostdError]) -> None:
    rebuilt = errors.error_from_code(cls.code, "boom", {"k": 1})
    assert type(rebuilt) is cls
    assert rebuilt.message == "boom"
    assert cls.__doc__, f"{cls.__name__} must say when it is raised"


def test_driver_error_carries_exit_code_and_stderr() -> None:
    err = errors.error_from_code(
        "driver_crashed",
        "driver scripted exited",
        {"driver": "scripted", "exit_code": 3, "stderr_tail": "Traceback: boom"},
    )
    assert isinstance(err, errors.DriverCrashed)
    assert (err.driver, err.exit_code, err.stderr_tail) == ("scripted", 3, "Traceback: boom")
    assert str(err) == (
        "driver scripted exited (exit code 3)\n--- driver stderr (tail) ---\nTraceback: boom"
    )


def test_unknown_code_keeps_the_code() -> None:
    err = errors.error_from_code("from_the_future", "new failure")
    assert type(err) is errors.HostdError
    assert err.details["code"] == "from_the_future"

"""The error tree: stable unique codes that map back to classes."""

from __future__ import annotations

import pytest

from hostd_protocol import errors


def test_codes_are_unique() -> None:
    classes = errors._all_subclasses(errors.HostdError)
    codes = [c.code for c in classes]
    assert len(codes) == len(set(codes))


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

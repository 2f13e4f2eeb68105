"""The turn boundary's exception map (`turn_failure`): one place, a defined outcome for
anything a turn's set-up or driving raises."""

from __future__ import annotations

from hostd.shell.turns import turn_failure
from hostd_protocol.errors import ConfigError, InternalError


def test_a_hostd_error_is_the_turns_error_as_it_is() -> None:
    err = ConfigError("working directory '/x' cannot be used: File exists")
    assert turn_failure(err, "tp1") is err


def test_anything_else_is_an_internal_error_naming_it() -> None:
    mapped = turn_failure(NotADirectoryError(20, "Not a directory"), "tp1")
    assert isinstance(mapped, InternalError)
    assert mapped.code == "internal_error"
    assert mapped.message == (
        "the turn failed: NotADirectoryError: [Errno 20] Not a directory (details in the daemon log)"
    )

"""Decisions taken for what outside acceptance found (session 9, notes/decisions.md), as a
user meets them on the command line: real `hostd` commands against a real daemon."""

from __future__ import annotations

import json

import pytest

from tests.e2e.test_cli_everyday import Hostd, hostd, one_line_error

pytestmark = pytest.mark.e2e

__all__ = ["hostd"]  # the fixture


def test_a_working_dir_that_does_not_exist_is_refused_not_created(hostd: Hostd) -> None:
    hostd.ok("serve", "--detach")
    typo = hostd.project.parent / "projetc"
    err = one_line_error(hostd("new", "--driver", "scripted", "--working-dir", str(typo)))
    assert err == (
        f"hostd: working directory {str(typo)!r} does not exist; create it, or choose an "
        "existing directory [invalid_argument]"
    )
    assert not typo.exists()
    assert not json.loads(hostd.ok("topics", "--json"))  # nothing was created
    # An existing one is used as it is; none at all is the current directory.
    tid = hostd.ok("new", "--driver", "scripted", "--working-dir", str(hostd.project)).strip()
    assert "hi" in hostd.ok("send", tid, "/text hi", "--follow")


def test_a_message_over_the_send_limit_names_that_limit_whatever_its_size(hostd: Hostd) -> None:
    """Over 8 MiB the frame could not even be encoded: the user was told about a "maximum
    frame size" instead of the 1 MiB message limit they hit (as under 8 MiB)."""
    hostd.ok("serve", "--detach")
    tid = hostd.ok("new", "--driver", "scripted").strip()
    for size in (2_000_000, 9_000_000):
        big = hostd.root / f"big{size}.txt"
        big.write_text("x" * size)
        err = one_line_error(hostd("send", tid, "--file", str(big)))
        assert err == (
            f"hostd: the message is {size} bytes; the limit is 1048576 bytes [payload_too_large]"
        ), err
    assert json.loads(hostd.ok("history", tid, "--json"))["rows"] == []


def test_a_driver_that_needs_a_model_is_refused_at_new_without_one(hostd: Hostd) -> None:
    """`hostd new --driver openai` without a model was stored; its first message then failed
    with the driver's multi-line start-up error."""
    hostd.ok("serve", "--detach")
    err = one_line_error(hostd("new", "--driver", "openai"))
    assert err == (
        "hostd: driver 'openai' needs a model, and neither the topic nor its assistant or role "
        "names one: give the topic a model (or an assistant with one) [invalid_argument]"
    )
    assert not json.loads(hostd.ok("topics", "--json"))
    # An assistant that names the model is enough; so is the topic's own.
    assistants = hostd.home / "config" / "assistants"
    assistants.mkdir(parents=True)
    (assistants / "local.toml").write_text('driver = "openai"\nmodel = "llama3"\n')
    local = hostd.ok("new", "--assistant", "local").strip()
    (listed,) = [r for r in hostd.ok("topics").splitlines() if r.startswith(local)]
    assert listed.split()[1] == "@local"  # the assistant picks the driver: said so
    assert "driver `@local`" in hostd.ok("export", local, "--format", "md")  # not `default`
    hostd.ok("new", "--driver", "openai", "--model", "llama3")
    # An extra answer by such a driver is refused the same way, nothing sent.
    tid = hostd.ok("new", "--driver", "scripted").strip()
    err = one_line_error(hostd("send", tid, "compare", "--also", "openai"))
    assert err.startswith("hostd: extra answer 1 (openai): driver 'openai' needs a model"), err
    assert json.loads(hostd.ok("history", tid, "--json"))["rows"] == []

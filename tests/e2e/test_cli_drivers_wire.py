"""Issue 36, "Drivers and wire", as a user meets them on the command line: driver options a
driver does not take, `hostd drivers` for the ACP driver without agents, a negative
`--every`, and `--also` naming a driver that does not exist. Real `hostd` commands, real
daemon (scripted driver). The wire items are in tests/shell/test_bad_input.py and
tests/reliability/test_old_clients.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.e2e.test_cli_everyday import Hostd, hostd, one_line_error

pytestmark = pytest.mark.e2e

__all__ = ["hostd"]  # the fixture


def test_an_option_the_driver_does_not_take_is_refused(hostd: Hostd) -> None:
    hostd.ok("serve", "--detach")
    err = one_line_error(hostd("new", "--driver", "scripted", "--option", "chunk_rat=5"))
    assert err.startswith(
        "hostd: unknown option 'chunk_rat' for driver 'scripted' (did you mean 'chunk_rate'?)"
    ), err
    assert not json.loads(hostd.ok("topics", "--json"))  # nothing was created
    tid = hostd.ok("new", "--driver", "scripted", "--option", "chunk_rate=0").strip()
    assert "hi" in hostd.ok("send", tid, "/text hi", "--follow")


def _agent_on(folder: Path) -> None:
    """An executable named like the built-in `claude` agent's command (never run here)."""
    folder.mkdir()
    agent = folder / "claude-agent-acp"
    agent.write_text("#!/bin/sh\nexit 1\n")
    agent.chmod(0o755)


def test_drivers_says_acp_is_not_ready_without_an_agent(hostd: Hostd) -> None:
    hostd.env["PATH"] = "/usr/bin:/bin"  # no ACP agent's command on it
    listed = hostd.ok("drivers")
    row = next(line for line in listed.splitlines() if line.split()[:1] == ["acp"])
    assert row.split()[1] == "no", row
    assert "NONE: no ACP agent found on PATH: claude (claude-agent-acp), gemini" in row, row
    assert "acp: fix: install one, e.g. npm install -g @agentclientprotocol/claude-agent-acp" \
        in listed, listed
    info = next(d for d in json.loads(hostd.ok("drivers", "--json"))["drivers"]
                if d["name"] == "acp")
    assert info["credential_ok"] is False
    # A topic on it is refused now, not at its first message.
    hostd.ok("serve", "--detach")
    err = one_line_error(hostd("new", "--driver", "acp"))
    assert "no ACP agent found on PATH" in err and "[auth_required]" in err, err
    hostd.ok("stop")

    bin_dir = hostd.root / "bin"
    _agent_on(bin_dir)
    hostd.env["PATH"] = f"{bin_dir}{os.pathsep}/usr/bin:/bin"
    row = next(line for line in hostd.ok("drivers").splitlines() if line.startswith("acp "))
    assert row.split()[1] == "yes" and "agents found: claude" in row, row


def test_a_negative_interval_is_one_clear_line(hostd: Hostd) -> None:
    for args in (("tp1", "--every", "-1d", "hi"), ("tp1", "hi", "--every", "-5m")):
        bad = hostd("schedule", "add", *args)
        value = args[args.index("--every") + 1]
        assert one_line_error(bad, code=2) == (
            f"hostd: argument --every: invalid interval {value!r}: it must be longer than 0 s; "
            "see `hostd schedule add --help`"
        )


def test_also_naming_no_driver_refuses_the_message_and_says_so(hostd: Hostd) -> None:
    hostd.ok("serve", "--detach")
    tid = hostd.ok("new", "--driver", "scripted").strip()
    err = one_line_error(hostd("send", tid, "compare", "--also", "nosuchdriver"))
    assert err.startswith(
        "hostd: extra answer 1 (nosuchdriver): no driver named 'nosuchdriver' is installed"
    ), err
    assert err.endswith("; nothing was sent [driver_unavailable]"), err
    err = one_line_error(hostd("send", tid, "compare", "--also", "scripted", "--also", "@nobody"))
    assert err.startswith("hostd: extra answer 2 (@nobody): no assistant named 'nobody'"), err
    assert json.loads(hostd.ok("history", tid, "--json"))["rows"] == []  # nothing stored


def test_drivers_say_which_need_a_model_here_and_from_the_daemon(hostd: Hostd) -> None:
    needs = "openai: needs a model (it has no default): hostd new --driver openai --model NAME"
    assert needs in hostd.ok("drivers")  # checked here: no daemon
    assert "needs a model" in hostd.ok("drivers", "openai")
    hostd.ok("serve", "--detach")
    listed = json.loads(hostd.ok("drivers", "--json"))
    assert "daemon's environment" in listed["checked_in"]
    flags = {d["name"]: d["needs_model"] for d in listed["drivers"]}
    assert flags["openai"] is True and flags["scripted"] is False, flags
    assert needs in hostd.ok("drivers")
    hostd.ok("stop")

"""`hostd send --also`, `hostd choose` and how `history` shows several answers, against a
real daemon with scripted drivers (one answer failing)."""

from __future__ import annotations

import json

import pytest

from tests.e2e.test_cli_everyday import Hostd, hostd, one_line_error

__all__ = ["hostd"]  # the fixture, shared with the everyday CLI tests

pytestmark = pytest.mark.e2e

SCRIPT = "/model m0\n/text zero\n/model m1\n/text one\n/model bad\n/error bad model"


def answers(h: Hostd, tid: str) -> list[tuple[int, str, bool]]:
    rows = json.loads(h.ok("history", tid, "--json"))["rows"]
    return [
        (r.get("lane", 0), r["status"], r.get("alternative", False))
        for r in rows
        if r["role"] == "assistant"
    ]


def test_send_also_choose_and_history(hostd: Hostd) -> None:
    hostd.ok("serve", "--detach")
    tid = hostd.ok("new", "--driver", "scripted", "--model", "m0", "--title", "lanes").strip()
    out = hostd.ok("send", tid, SCRIPT, "--also", "scripted/m1", "--also", "/bad", "--follow")
    # Each answer is labelled where its text starts; the failing one says so.
    assert "[answer 1: scripted/m1] one" in out
    assert "error (answer 2: topic driver/bad)" in out
    assert answers(hostd, tid) == [
        (0, "success", False),
        (1, "success", True),
        (2, "error", True),
    ]
    history = hostd.ok("history", tid, "--ids")
    assert "(answer 1: scripted/m1, alternative)" in history
    rows = json.loads(hostd.ok("history", tid, "--json"))["rows"]
    one = rows[2]["id"]
    assert f"continues from answer {one}" in hostd.ok("choose", tid, one)
    assert answers(hostd, tid) == [
        (0, "success", True),
        (1, "success", False),
        (2, "error", True),
    ]
    # The next turn is fed the chosen answer only.
    out = hostd.ok("send", tid, "/history", "--follow")
    assert out.rstrip().endswith("assistant: one")

    # Mistakes: one line, non-zero.
    usage = hostd("send", tid, "x", "--also", "/")  # argparse's usage error
    assert usage.returncode == 2 and "argument --also: '/' names nobody" in usage.stderr
    assert "nosuch" in one_line_error(hostd("send", tid, "x", "--also", "nosuch/m"))
    assert "nobody" in one_line_error(hostd("send", tid, "x", "--also", "@nobody"))
    err = one_line_error(hostd("choose", tid, str(rows[0]["id"])))
    assert "not an answer of a multi-answer turn" in err
    hostd.ok("stop")


def test_stop_one_answer_with_row(hostd: Hostd) -> None:
    hostd.ok("serve", "--detach")
    tid = hostd.ok("new", "--driver", "scripted", "--model", "m0", "--title", "stop").strip()
    hostd.ok("send", tid, "/model m0\n/text zero\n/wait\n/model m1\n/text one\n/wait",
             "--also", "scripted/m1")
    rows = json.loads(hostd.ok("history", tid, "--json"))["rows"]
    user, zero, one = (r["id"] for r in rows)
    out = hostd.ok("stop", tid, "--row", one)
    assert out.startswith(f"stopped answer {one} of {tid}")
    assert "not an answer of the running turn" in one_line_error(hostd("stop", tid, "--row", user))
    assert "not_found" in one_line_error(hostd("stop", tid, "--row", "bogus"))
    assert "--row needs a topic" in one_line_error(hostd("stop", "--row", one))
    assert json.loads(hostd.ok("stop", tid, "--row", zero, "--json")) == {
        "topic": tid, "stopped": True, "row": zero,
    }
    # Every answer stopped alone: the turn ended stopped and the next message runs.
    assert hostd("send", tid, "/text again", "--follow").returncode == 0
    assert answers(hostd, tid)[:2] == [(0, "stopped", False), (1, "stopped", True)]

"""`hostd rewind / regenerate / resend / fork` and `history --all --ids` against a real daemon."""

from __future__ import annotations

import json

import pytest

from tests.e2e.test_cli_everyday import Hostd, hostd, one_line_error

__all__ = ["hostd"]  # the fixture, shared with the everyday CLI tests

pytestmark = pytest.mark.e2e


def rows_of(h: Hostd, tid: str, *extra: str) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = json.loads(h.ok("history", tid, "--json", *extra))["rows"]
    return rows


def texts(rows: list[dict[str, object]]) -> list[str]:
    return ["".join(p["text"] for p in r["parts"]) for r in rows]  # type: ignore[attr-defined]


def test_topic_operation_verbs(hostd: Hostd) -> None:
    hostd.ok("serve", "--detach")
    tid = hostd.ok("new", "--driver", "scripted", "--title", "cli ops").strip()
    hostd.ok("send", tid, "/text one", "--follow")
    hostd.ok("send", tid, "/text two", "--follow")
    u1, a1, u2, a2 = (r["id"] for r in rows_of(hostd, tid))
    assert f"[{a1}]" in hostd.ok("history", tid, "--ids")

    out = json.loads(hostd.ok("rewind", tid, str(a1), "--json"))
    assert out["row_ids"] == [u2, a2]
    assert texts(rows_of(hostd, tid)) == ["/text one", "one"]
    everything = hostd.ok("history", tid, "--all")
    assert everything.count("(superseded)") == 2 and f"[{u2}]" in everything

    assert "one" in hostd.ok("regenerate", tid, "--follow")
    assert texts(rows_of(hostd, tid)) == ["/text one", "one"]
    u1b = rows_of(hostd, tid)[0]["id"]
    assert u1b != u1

    assert "edited" in hostd.ok("resend", tid, str(u1b), "/text edited", "--follow")
    assert texts(rows_of(hostd, tid)) == ["/text edited", "edited"]
    a = rows_of(hostd, tid)[1]["id"]

    fork = json.loads(hostd.ok("fork", tid, str(a), "--json", "--title", "branch"))
    assert fork["title"] == "branch" and fork["id"] != tid
    assert texts(rows_of(hostd, fork["id"])) == ["/text edited", "edited"]

    assert "not_found" in one_line_error(hostd("rewind", tid, "r-nope"))

"""What `hostd chat` says when an approval closes without its own answer (the state method
alone: the terminal end-to-end path is tests/cli/test_chat_e2e.py)."""

from __future__ import annotations

import pytest

from hostd.cli.chat_app import ChatApp
from hostd_protocol.client_messages import ApprovalInfo, ApprovalResolved


@pytest.mark.parametrize(
    ("reason", "said"),
    [
        ("the agent withdrew its permission request",
         "approval for Bash closed: the agent withdrew its permission request"),
        ("the turn was stopped", "approval for Bash closed: the turn was stopped"),
        ("", "approval for Bash closed: its turn ended"),
    ],
)
def test_an_approval_closed_unanswered_says_why(reason: str, said: str) -> None:
    app = object.__new__(ChatApp)  # only the state this handler reads
    app._approvals_seen = {"a1": ApprovalInfo(id="a1", topic_id="t", turn_id="u", tool="Bash")}
    app._answered_here = set()
    app.notes = []
    app._on_approval_resolved(
        ApprovalResolved(topic_id="t", seq=3, approval_id="a1", status="cancelled", reason=reason)
    )
    assert [str(n) for n in app.notes] == [said]

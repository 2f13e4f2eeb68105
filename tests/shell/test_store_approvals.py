"""Approvals in the store (a real SQLite file): what the driver offered beyond allow / deny
(`options`), the option chosen and the answer (lane) it belongs to are kept, so whatever
reads a stored approval back (a topic loaded again, a daemon restarted) sees the approval
the windows saw; and a file written before they were stored (schema 8) opens and reads."""

from __future__ import annotations

from pathlib import Path

import apsw
import msgspec

from hostd.shell.store import store as st
from hostd_protocol.client_messages import ApprovalInfo, TopicInfo
from hostd_protocol.common import ApprovalOption

OPTIONS = [
    ApprovalOption(id="once", label="Allow once", kind="allow_once"),
    ApprovalOption(id="always", label="Always allow Bash", kind="allow_always"),
    ApprovalOption(id="no", label="Reject", kind="reject_once"),
]
ASKED = ApprovalInfo(
    id="ap1~1",
    topic_id="tp1",
    turn_id="t1",
    tool="Bash",
    input={"command": "ls"},
    description="run ls",
    created_at=1000.0,
    options=OPTIONS,
    lane=1,
)


def test_options_choice_and_lane_survive_a_reopen(tmp_path: Path) -> None:
    path = tmp_path / "db"
    answered = msgspec.structs.replace(
        ASKED, status="allowed", answered_by="w2", option_id="always"
    )
    with st.Store(path) as s:
        s.apply([st.PutTopic(TopicInfo(id="tp1", created_at=1.0, updated_at=1.0))])
        s.apply([st.PutApproval(ASKED)])
        assert s.load_approvals("tp1") == [ASKED]  # open: as a topic loads it
        s.apply([st.PutApproval(answered)])
    with st.Store(path) as s:  # the next daemon
        assert s.load_approvals("tp1", open_only=False) == [answered]


def test_a_schema_8_file_with_approvals_opens_and_reads(tmp_path: Path) -> None:
    path = tmp_path / "db"
    plain = msgspec.structs.replace(ASKED, id="ap0", options=[], lane=0)
    with st.Store(path) as s:
        s.apply([st.PutTopic(TopicInfo(id="tp1", created_at=1.0, updated_at=1.0))])
        s.apply([st.PutApproval(plain)])
    db = apsw.Connection(str(path))  # back to what the previous hostd wrote
    for column in ("options", "option_id", "lane"):
        db.execute(f"ALTER TABLE approvals DROP COLUMN {column}")
    db.pragma("user_version", 8)
    db.close()
    with st.Store(path) as s:
        assert s.schema_version == len(st.MIGRATIONS) == 9
        assert s.load_approvals("tp1") == [plain]
        s.apply([st.PutApproval(ASKED)])
        assert s.load_approvals("tp1") == [plain, ASKED]

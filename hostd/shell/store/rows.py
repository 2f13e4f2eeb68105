"""How rows, topics and approvals map to SQLite columns and back (pure msgspec codecs), and
many rows to one statement (`many_rows`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from hostd_protocol.client_messages import ApprovalInfo, MessageRow, ScheduleInfo, TopicInfo
from hostd_protocol.common import AnswerTarget, ApprovalOption, Chunk, CompactionAnchor, Usage

# Parts and anchors are JSON text (readable with sqlite3 / json_extract); databases from
# before schema 4 held msgpack blobs, which migration 4 rewrites (bytes are still read).
_parts_decoder = msgspec.json.Decoder(list[Chunk])
_anchor_decoder = msgspec.json.Decoder(CompactionAnchor)
_target_decoder = msgspec.json.Decoder(AnswerTarget)
_usage_decoder = msgspec.json.Decoder(Usage)
_old_parts_decoder = msgspec.msgpack.Decoder(list[Chunk])
_old_anchor_decoder = msgspec.msgpack.Decoder(CompactionAnchor)
json_encoder = msgspec.json.Encoder()
dict_decoder = msgspec.json.Decoder(dict[str, Any])


ROW_COLUMNS = (
    "id, topic_id, role, status, position, turn_id, parts, error, error_code, anchor, empty, "
    "created_at, updated_at, meta, superseded, lane, alternative, target, usage"
)
ROW_PLACEHOLDERS = ", ".join("?" * (ROW_COLUMNS.count(",") + 1))


def row_values(row: MessageRow) -> tuple[Any, ...]:
    return (
        row.id,
        row.topic_id,
        row.role,
        row.status,
        row.position,
        row.turn_id,
        json_encoder.encode(row.parts).decode(),
        row.error,
        row.error_code,
        json_encoder.encode(row.anchor).decode() if row.anchor is not None else None,
        int(row.empty),
        row.created_at,
        row.updated_at,
        json_encoder.encode(row.meta).decode(),
        int(row.superseded),
        row.lane,
        int(row.alternative),
        json_encoder.encode(row.target).decode() if row.target is not None else None,
        json_encoder.encode(row.usage).decode() if row.usage is not None else None,
    )


def row_from(values: Sequence[Any]) -> MessageRow:
    (
        rid,
        topic_id,
        role,
        status,
        position,
        turn_id,
        parts,
        error,
        error_code,
        anchor,
        empty,
        created_at,
        updated_at,
        meta,
        superseded,
        lane,
        alternative,
        target,
        usage,
    ) = values
    return MessageRow(
        id=rid,
        topic_id=topic_id,
        role=role,
        status=status,
        position=position,
        turn_id=turn_id,
        parts=(_old_parts_decoder if isinstance(parts, bytes) else _parts_decoder).decode(parts),
        error=error,
        error_code=error_code,
        anchor=(
            None
            if anchor is None
            else (_old_anchor_decoder if isinstance(anchor, bytes) else _anchor_decoder).decode(
                anchor
            )
        ),
        empty=bool(empty),
        created_at=created_at,
        updated_at=updated_at,
        meta=dict_decoder.decode(meta),
        superseded=bool(superseded),
        lane=lane,
        alternative=bool(alternative),
        target=None if target is None else _target_decoder.decode(target),
        usage=None if usage is None else _usage_decoder.decode(usage),
    )


def topic_from(values: Sequence[Any]) -> TopicInfo:
    tid, title, assistant, driver, model, working_dir, options, created_at, updated_at, seq = values
    return TopicInfo(
        id=tid,
        title=title,
        assistant=assistant,
        driver=driver,
        model=model,
        working_dir=working_dir,
        options=dict_decoder.decode(options),
        created_at=created_at,
        updated_at=updated_at,
        seq=seq,
    )


TOPIC_COLUMNS = (
    "t.id, t.title, t.assistant, t.driver, t.model, t.working_dir, t.options, t.created_at, "
    "t.updated_at, t.last_seq"
)


#: The approvals columns `approval_from` reads, in its order.
APPROVAL_COLUMNS = (
    "id, topic_id, turn_id, tool, input, description, status, answered_by, reason, "
    "created_at, options, option_id, lane"
)
approval_options_decoder = msgspec.json.Decoder(list[ApprovalOption])


def approval_values(a: ApprovalInfo) -> tuple[Any, ...]:
    """An approval as the values of `APPROVAL_COLUMNS`."""
    return (
        a.id,
        a.topic_id,
        a.turn_id,
        a.tool,
        json_encoder.encode(a.input).decode(),
        a.description,
        a.status,
        a.answered_by,
        a.reason,
        a.created_at,
        json_encoder.encode(a.options).decode(),
        a.option_id,
        a.lane,
    )


def approval_from(values: Sequence[Any]) -> ApprovalInfo:
    aid, topic_id, turn_id, tool, inp, desc, status, by, reason, created_at = values[:10]
    options, option_id, lane = values[10:]
    return ApprovalInfo(
        options=approval_options_decoder.decode(options),
        option_id=option_id,
        lane=lane,
        id=aid,
        topic_id=topic_id,
        turn_id=turn_id,
        tool=tool,
        input=dict_decoder.decode(inp),
        description=desc,
        status=status,
        answered_by=by,
        reason=reason,
        created_at=created_at,
    )


SCHEDULE_COLUMNS = (
    "id, topic_id, text, cron, every_s, tz, busy, missed, enabled, created_at, active_since, "
    "last_due, last_run_at, last_status, last_error, last_row_id, runs, failures, skipped, "
    "assistant, last_topic_id"
)


def schedule_values(s: ScheduleInfo) -> tuple[Any, ...]:
    """A schedule's columns (`next_due` is not stored: it is computed from the others). A
    schedule without a topic (one per run) stores NULL, which its foreign key allows."""
    return (
        s.id,
        s.topic_id or None,
        s.text,
        s.cron,
        s.every_s,
        s.tz,
        s.busy,
        s.missed,
        int(s.enabled),
        s.created_at,
        s.active_since,
        s.last_due,
        s.last_run_at,
        s.last_status,
        s.last_error,
        s.last_row_id,
        s.runs,
        s.failures,
        s.skipped,
        s.assistant,
        s.last_topic_id,
    )


def schedule_from(values: Sequence[Any]) -> ScheduleInfo:
    (
        sid, topic_id, text, cron, every_s, tz, busy, missed, enabled, created_at, active_since,
        last_due, last_run_at, last_status, last_error, last_row_id, runs, failures, skipped,
        assistant, last_topic_id,
    ) = values
    return ScheduleInfo(
        id=sid,
        topic_id=topic_id or "",
        assistant=assistant,
        last_topic_id=last_topic_id,
        text=text,
        cron=cron,
        every_s=every_s,
        tz=tz,
        busy=busy,
        missed=missed,
        enabled=bool(enabled),
        created_at=created_at,
        active_since=active_since,
        last_due=last_due,
        last_run_at=last_run_at,
        last_status=last_status,
        last_error=last_error,
        last_row_id=last_row_id,
        runs=runs,
        failures=failures,
        skipped=skipped,
    )


#: Rows per multi-row statement (`many_rows`), far below SQLite's 32,766 parameters.
MANY_ROWS = 256


def many_rows(
    sql: str, rows: list[tuple[Any, ...]]
) -> list[tuple[str, list[tuple[Any, ...]]]]:
    """`sql` (with `{rows}` where the `(?, ...)` of each row go) as few statements as can take
    `rows`, each run once: one step of SQLite per statement, not one per row (the writer's
    worker thread gives the GIL up and takes it back at each step, in turns with the loop)."""
    out: list[tuple[str, list[tuple[Any, ...]]]] = []
    for start in range(0, len(rows), MANY_ROWS):
        part = rows[start : start + MANY_ROWS]
        marks = "(" + ", ".join("?" * len(part[0])) + ")"
        flat = tuple(v for row in part for v in row)
        out.append((sql.format(rows=", ".join([marks] * len(part))), [flat]))
    return out

"""Sizes made explicit, sans-IO: bounding what drivers say, and fitting rows into replies.

The limits themselves are protocol constants (`hostd_protocol.limits`, docs/protocol.md).
This module applies them:

- `bound_driver_events`: at the driver boundary (`DriverSession`), every event is brought
  within its limit: text and thinking deltas are split into several chunk events, tool output,
  tool input and messages are cut with a visible mark. Nothing a driver sends can make one
  event (or one window frame) too big, however the host later batches or forwards it.
- `fit_rows`: a snapshot or history page takes rows from the newest back until its byte
  budget; the newest row is always included, cut to its newest content when it alone is too
  big (marked in `meta["truncated"]`), so a topic can always be attached and paging always
  moves.
- `row_piece`: one bounded piece of a row's parts for `read-row`, always at least one
  character or part, so reading a row piece by piece always ends.

Sizes are measured with a `size` function the caller passes (the encoded size in the
window's encoding: JSON can be larger than msgpack for the same text).
"""

from __future__ import annotations

import binascii
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import msgspec

from hostd_protocol.client_messages import MessageRow, RowContent, TopicInfo
from hostd_protocol.common import (
    Attachment,
    Chunk,
    CommandInfo,
    CompactionAnchor,
    HistoryMessage,
    PlanChunk,
    PlanEntry,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    ToolResult,
    image_type_of,
)
from hostd_protocol.driver_messages import (
    ApprovalRequest,
    ChunkEvent,
    CommandsEvent,
    CompactionComplete,
    CompactionError,
    DriverEvent,
    DriverFatal,
    Log,
    Notice,
    TurnEnd,
)
from hostd_protocol.errors import InvalidArgument, PayloadTooLarge
from hostd_protocol.limits import (
    MAX_ATTACHMENT_BYTES,
    MAX_CHUNK_CHARS,
    MAX_COMMANDS,
    MAX_DEPTH,
    MAX_FIELD_CHARS,
    MAX_MESSAGE_CHARS,
    MAX_OPTIONS_BYTES,
    MAX_SEND_BYTES,
    MAX_SEND_HISTORY_BYTES,
    MAX_TOOL_INPUT_BYTES,
    MAX_TOOL_OUTPUT_CHARS,
    TRUNCATED_MARK,
    TRUNCATED_META,
)

__all__ = [
    "Size",
    "bound_driver_events",
    "bound_topic",
    "check_request",
    "check_send",
    "check_text",
    "cut",
    "fit_rows",
    "fit_topics",
    "images_refused",
    "row_piece",
]

Size = Callable[[Any], int]

_json = msgspec.json.Encoder()
_msgpack = msgspec.msgpack.Encoder()


def cut(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, the cut marked (the same object when it fits)."""
    if len(text) <= limit:
        return text
    return text[: max(0, limit - len(TRUNCATED_MARK))] + TRUNCATED_MARK


def _bound_input(value: dict[str, Any]) -> dict[str, Any]:
    if not value:
        return value
    try:
        size = len(_msgpack.encode(value))
    except (TypeError, msgspec.EncodeError):
        size = MAX_TOOL_INPUT_BYTES + 1
    if size <= MAX_TOOL_INPUT_BYTES:
        return value
    try:
        as_json = _json.encode(value).decode()
    except (TypeError, msgspec.EncodeError):
        as_json = repr(value)
    return {"truncated": cut(as_json, MAX_TOOL_INPUT_BYTES // 4)}


def _bound_chunk(chunk: Chunk) -> list[Chunk]:
    if isinstance(chunk, TextDelta | ThinkingDelta):
        text = chunk.text
        if len(text) <= MAX_CHUNK_CHARS:
            return [chunk]
        cls = type(chunk)
        return [cls(text=text[i : i + MAX_CHUNK_CHARS]) for i in range(0, len(text), MAX_CHUNK_CHARS)]
    if isinstance(chunk, ToolResult):
        output = cut(chunk.output, MAX_TOOL_OUTPUT_CHARS)
        return [chunk if output is chunk.output else msgspec.structs.replace(chunk, output=output)]
    if isinstance(chunk, ToolCall):
        inp = _bound_input(chunk.input)
        name = cut(chunk.name, MAX_MESSAGE_CHARS)
        if inp is chunk.input and name is chunk.name:
            return [chunk]
        return [msgspec.structs.replace(chunk, input=inp, name=name)]
    if isinstance(chunk, PlanChunk):
        kept = chunk.entries[:MAX_COMMANDS]
        entries = [_bound_entry(e) for e in kept]
        if len(kept) == len(chunk.entries) and all(
            a is b for a, b in zip(entries, kept, strict=True)
        ):
            return [chunk]
        return [PlanChunk(entries=entries)]
    return [chunk]


def _bound_entry(entry: PlanEntry) -> PlanEntry:
    content, priority = cut(entry.content, MAX_FIELD_CHARS), cut(entry.priority, 64)
    if content is entry.content and priority is entry.priority:
        return entry
    return msgspec.structs.replace(entry, content=content, priority=priority)


def _bound_command(command: CommandInfo) -> CommandInfo:
    name = cut(command.name, MAX_FIELD_CHARS)
    desc = cut(command.description, MAX_FIELD_CHARS)
    hint = cut(command.input_hint, MAX_FIELD_CHARS)
    if name is command.name and desc is command.description and hint is command.input_hint:
        return command
    return CommandInfo(name=name, description=desc, input_hint=hint)


def _bound_anchor(anchor: CompactionAnchor | None) -> CompactionAnchor | None:
    if anchor is None or len(anchor.summary) <= MAX_TOOL_OUTPUT_CHARS:
        return anchor
    return msgspec.structs.replace(anchor, summary=cut(anchor.summary, MAX_TOOL_OUTPUT_CHARS))


def _bound_event(ev: DriverEvent) -> list[DriverEvent]:
    if isinstance(ev, ChunkEvent):
        pieces = _bound_chunk(ev.chunk)
        if len(pieces) == 1 and pieces[0] is ev.chunk:
            return [ev]
        return [ChunkEvent(turn_id=ev.turn_id, chunk=p) for p in pieces]
    if isinstance(ev, TurnEnd):
        error = cut(ev.error, MAX_MESSAGE_CHARS)
        return [ev if error is ev.error else msgspec.structs.replace(ev, error=error)]
    if isinstance(ev, Notice | Log | CompactionError | DriverFatal):
        message = cut(ev.message, MAX_MESSAGE_CHARS)
        return [ev if message is ev.message else msgspec.structs.replace(ev, message=message)]
    if isinstance(ev, ApprovalRequest):
        inp = _bound_input(ev.input)
        desc = cut(ev.description, MAX_MESSAGE_CHARS)
        tool = cut(ev.tool, MAX_MESSAGE_CHARS)
        if inp is ev.input and desc is ev.description and tool is ev.tool:
            return [ev]
        return [msgspec.structs.replace(ev, input=inp, description=desc, tool=tool)]
    if isinstance(ev, CommandsEvent):
        commands = [_bound_command(c) for c in ev.commands[:MAX_COMMANDS]]
        return [CommandsEvent(commands=commands)]
    if isinstance(ev, CompactionComplete):
        anchor = _bound_anchor(ev.anchor)
        return [ev if anchor is ev.anchor else msgspec.structs.replace(ev, anchor=anchor)]
    return [ev]


def bound_driver_events(events: Iterable[DriverEvent]) -> list[DriverEvent]:
    """Every event within its limit (`hostd_protocol.limits`), order kept; a text or thinking
    delta over `MAX_CHUNK_CHARS` becomes several chunk events."""
    out: list[DriverEvent] = []
    for ev in events:
        out.extend(_bound_event(ev))
    return out


# --- rows in replies ------------------------------------------------------------------------


def _text_of(part: Chunk) -> str | None:
    if isinstance(part, TextDelta | ThinkingDelta):
        return part.text
    if isinstance(part, ToolResult):
        return part.output
    return None


def _with_text(part: Chunk, text: str) -> Chunk:
    if isinstance(part, ToolResult):
        return msgspec.structs.replace(part, output=text)
    return msgspec.structs.replace(part, text=text)


def _fit_chars(part: Chunk, text: str, avail: int, size: Size, *, tail: bool) -> int:
    """How many characters of `text` (from its start, or its end when `tail`) fit in `avail`
    bytes as `part`; at least 1, so callers always make progress."""
    def fits(n: int) -> bool:
        piece = text[len(text) - n :] if tail else text[:n]
        return size(_with_text(part, piece)) <= avail

    n = min(len(text), max(1, avail))  # one byte per character: plain ASCII
    if fits(n):
        return n
    n = max(1, min(len(text), avail // 6))  # the worst case of JSON escapes
    while n > 1 and not fits(n):
        n //= 2
    return n


def _truncate_row(row: MessageRow, budget: int, size: Size) -> MessageRow:
    """`row` with its oldest content left out so it fits `budget` (newest content kept)."""
    base = size(msgspec.structs.replace(row, parts=[], meta={**row.meta, TRUNCATED_META: {
        "omitted_parts": len(row.parts), "omitted_chars": 1 << 40}}))
    avail = budget - base
    kept: list[Chunk] = []
    first = len(row.parts)
    omitted_chars = 0
    for i in range(len(row.parts) - 1, -1, -1):
        part = row.parts[i]
        part_size = size(part)
        if part_size <= avail or (not kept and _text_of(part) is None):
            kept.append(part)
            avail -= part_size
            first = i
            continue
        text = _text_of(part)
        if text is not None and avail > 0:
            n = _fit_chars(part, text, avail, size, tail=True)
            kept.append(_with_text(part, text[len(text) - n :]))
            first = i
            omitted_chars = len(text) - n
        break
    kept.reverse()
    meta = {**row.meta, TRUNCATED_META: {"omitted_parts": first, "omitted_chars": omitted_chars}}
    return msgspec.structs.replace(row, parts=kept, meta=meta)


def fit_rows(
    rows: list[MessageRow], budget: int, size: Size
) -> tuple[list[MessageRow], bool]:
    """The newest of `rows` (oldest first) that fit in `budget` bytes, and whether any were
    left out. The newest row is always there, cut (`meta["truncated"]`) if it alone is too
    big."""
    kept: list[MessageRow] = []
    used = 0
    for row in reversed(rows):
        row_size = size(row)
        if used + row_size > budget:
            if not kept:
                kept.append(_truncate_row(row, budget, size))
            break
        kept.append(row)
        used += row_size
    kept.reverse()
    return kept, len(kept) < len(rows)


def row_piece(row: MessageRow, part: int, offset: int, budget: int, size: Size) -> RowContent:
    """The parts of `row` from (`part`, `offset`) on that fit in `budget` bytes; never empty
    while content remains."""
    out: list[Chunk] = []
    avail = budget
    i, off = max(0, part), max(0, offset)
    while i < len(row.parts):
        p = row.parts[i]
        text = _text_of(p)
        if text is not None and off:
            p = _with_text(p, text[off:])
            text = text[off:]
        p_size = size(p)
        if p_size <= avail or (not out and text is None):
            out.append(p)
            avail -= p_size
            i, off = i + 1, 0
            continue
        if text is not None and (avail > 64 or not out):
            n = _fit_chars(p, text, avail, size, tail=False)
            out.append(_with_text(p, text[:n]))
            off += n
        break
    return RowContent(
        row_id=row.id,
        parts=out,
        part=part,
        offset=offset,
        next_part=i,
        next_offset=off,
        done=i >= len(row.parts),
    )


# --- requests ---------------------------------------------------------------------------------


def check_text(what: str, text: str, limit: int) -> None:
    """Refuse `text` over `limit` UTF-8 bytes with `PayloadTooLarge`, naming `what`."""
    # len(text) is a lower bound of its UTF-8 size; encode only when it could be over.
    if len(text) * 4 <= limit:
        return
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > limit:
        raise PayloadTooLarge(
            f"{what} is {size} bytes; the limit is {limit} bytes", details={"size": size, "max": limit}
        )


#: Images of one message, at most.
MAX_ATTACHMENTS = 8


def check_attachments(attachments: Sequence[Attachment]) -> None:
    """A send's images: at most `MAX_ATTACHMENTS`, `MAX_ATTACHMENT_BYTES` together, each
    valid base64 of an image of its declared type, by its signature (a broken or mislabelled
    one would fail at the vendor, mid-turn)."""
    if len(attachments) > MAX_ATTACHMENTS:
        raise InvalidArgument(
            f"{len(attachments)} attachments; at most {MAX_ATTACHMENTS} go with one message",
            details={"count": len(attachments), "max": MAX_ATTACHMENTS},
        )
    total = sum(len(a.data) for a in attachments)
    if total > MAX_ATTACHMENT_BYTES:
        raise PayloadTooLarge(
            f"the attachments are {total} bytes (base64); the limit is {MAX_ATTACHMENT_BYTES}",
            details={"size": total, "max": MAX_ATTACHMENT_BYTES},
        )
    for a in attachments:
        if len(a.name) > MAX_FIELD_CHARS:
            raise PayloadTooLarge(f"an attachment's name is {len(a.name)} characters; the limit is {MAX_FIELD_CHARS}")
        try:
            head = binascii.a2b_base64(a.data[:64], strict_mode=True)
            binascii.a2b_base64(a.data, strict_mode=True)
        except binascii.Error:
            raise InvalidArgument(f"attachment {a.name or a.media_type!r} is not valid base64") from None
        found = image_type_of(head)
        if found != a.media_type:
            what = found or "not a PNG, JPEG, GIF or WebP image"
            raise InvalidArgument(
                f"attachment {a.name or a.media_type!r} is sent as {a.media_type} but its "
                f"bytes are {what}", details={"media_type": a.media_type, "found": found or ""},
            )


def images_refused(driver: str, *, lane: bool = False) -> InvalidArgument:
    """The refusal of a message with images to a driver that takes none (`DriverSpec.images`
    false): its model would never see them. `lane`: the driver of an extra answer (the
    caller says which, and that nothing was sent)."""
    if lane:
        return InvalidArgument(f"the {driver} driver takes no images (its model would never "
                               "see them)", details={"driver": driver})
    return InvalidArgument(f"the {driver} driver of this topic takes no images (its model "
                           "would never see them); send the text alone",
                           details={"driver": driver})


def check_send(text: str, history: Iterable[HistoryMessage], attachments: Sequence[Attachment] = ()) -> None:
    """The limits of a `send`, checked before anything is stored."""
    check_text("the message", text, MAX_SEND_BYTES)
    check_attachments(attachments)
    total = sum(
        len(m.text.encode("utf-8", "surrogatepass"))
        + (len(_msgpack.encode(m.parts)) if m.parts else 0)
        + sum(len(a.data) for a in m.attachments)
        for m in history
    )
    if total > MAX_SEND_HISTORY_BYTES:
        raise PayloadTooLarge(
            f"the history sent along is {total} bytes; the limit is {MAX_SEND_HISTORY_BYTES} "
            "bytes", details={"size": total, "max": MAX_SEND_HISTORY_BYTES},
        )


#: A topic's info in a listing, snapshot or reply: at most this (encoded); bigger ones were
#: stored before the limits existed and are shown cut (`bound_topic`).
MAX_TOPIC_BYTES = 128 * 1024


def nesting_depth(value: Any, limit: int = MAX_DEPTH) -> int:
    """How deep containers nest in `value` (a str or number is 0), counting only up to
    `limit + 1`: iterative, so no nesting can exhaust the stack."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, msgspec.Struct):
            children: Iterable[Any] = (getattr(item, f) for f in item.__struct_fields__)
            level = depth  # a struct is the request's own shape, not user nesting
        elif isinstance(item, dict):
            children = item.values()
            level = depth + 1
        elif isinstance(item, list | tuple):
            children = item
            level = depth + 1
        else:
            continue
        deepest = max(deepest, level)
        if deepest > limit:
            return deepest
        stack.extend((child, level) for child in children)
    return deepest


def check_request(msg: msgspec.Struct) -> None:
    """The generic bounds of a client request, checked before it is served: no container
    nested deeper than `MAX_DEPTH`, `options` within `MAX_OPTIONS_BYTES`, a `text` within
    `MAX_SEND_BYTES`, every other string field within `MAX_FIELD_CHARS`."""
    if nesting_depth(msg) > MAX_DEPTH:
        raise InvalidArgument(
            f"the request nests maps or arrays deeper than {MAX_DEPTH} levels",
            details={"max_depth": MAX_DEPTH},
        )
    for name in msg.__struct_fields__:
        value = getattr(msg, name)
        if name == "options" and value:
            size = len(_msgpack.encode(value))
            if size > MAX_OPTIONS_BYTES:
                raise PayloadTooLarge(
                    f"options are {size} bytes encoded; the limit is {MAX_OPTIONS_BYTES}",
                    details={"size": size, "max": MAX_OPTIONS_BYTES},
                )
        elif isinstance(value, str) and name == "text":
            check_text("the message", value, MAX_SEND_BYTES)
        elif isinstance(value, str) and len(value) > MAX_FIELD_CHARS:
            raise PayloadTooLarge(
                f"{name} is {len(value)} characters; the limit is {MAX_FIELD_CHARS}",
                details={"field": name, "size": len(value), "max": MAX_FIELD_CHARS},
            )


def bound_topic(info: TopicInfo) -> TopicInfo:
    """`info` within `MAX_TOPIC_BYTES`: a topic stored before the limits existed is shown
    with its texts cut and its options replaced by `{"truncated": true}` (the same object
    when it fits). One stored row never breaks a listing, a snapshot or a reply."""
    deep = nesting_depth(info.options) > MAX_DEPTH
    size = len(_json.encode(info))
    if size <= MAX_TOPIC_BYTES and not deep:
        return info
    options_size = MAX_TOPIC_BYTES if deep else len(_json.encode(info.options))
    return msgspec.structs.replace(
        info,
        title=cut(info.title, MAX_MESSAGE_CHARS),
        assistant=cut(info.assistant, MAX_MESSAGE_CHARS),
        driver=cut(info.driver, MAX_MESSAGE_CHARS),
        model=cut(info.model, MAX_MESSAGE_CHARS),
        working_dir=cut(info.working_dir, MAX_MESSAGE_CHARS),
        options={"truncated": True} if options_size > MAX_TOPIC_BYTES // 2 else info.options,
    )


def fit_topics(
    topics: list[TopicInfo], budget: int, size: Size
) -> tuple[list[TopicInfo], bool]:
    """The first of `topics` that fit in `budget` bytes (at least one), and whether any were
    left out."""
    out: list[TopicInfo] = []
    used = 0
    for info in topics:
        info = bound_topic(info)
        info_size = size(info)
        if out and used + info_size > budget:
            return out, True
        out.append(info)
        used += info_size
    return out, False

"""`RowSnapshot.delta_since`: what the store appends at a flush instead of the whole row.

The model is the whole row: appending the delta to the content of the earlier snapshot (the
way a store reader merges it, `PartsBuilder(old + delta)`) must give exactly the later
snapshot's parts, however chunks, joins (`build`), snapshots and replaced parts interleave.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as hs

from hostd.core.rows import LiveRow, PartsBuilder, RowSnapshot
from hostd_protocol.client_messages import MessageRow
from hostd_protocol.common import Chunk, TextDelta, ThinkingDelta, ToolCall, ToolResult


def _row(parts: list[Chunk] | None = None) -> MessageRow:
    return MessageRow(
        id="r1",
        topic_id="t1",
        role="assistant",
        status="pending",
        position=1,
        parts=parts or [],
        created_at=1.0,
        updated_at=1.0,
    )


_texts = hs.text(alphabet="ab\u00e9\U0001f600", max_size=4)
_chunks = hs.one_of(
    hs.builds(TextDelta, text=_texts),
    hs.builds(ThinkingDelta, text=_texts),
    hs.builds(ToolCall, call_id=hs.just("c1"), name=hs.just("Read"), input=hs.just({})),
    hs.builds(ToolResult, call_id=hs.just("c1"), output=_texts),
)
#: One step of a live row: a chunk, a join of its run (`freeze`, as a window's attach does),
#: a flush (the store takes a snapshot), or its parts replaced (`set_parts`).
_steps = hs.lists(
    hs.one_of(
        hs.tuples(hs.just("chunk"), _chunks),
        hs.tuples(hs.just("freeze"), hs.none()),
        hs.tuples(hs.just("flush"), hs.none()),
        hs.tuples(hs.just("replace"), hs.lists(_chunks, max_size=3)),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(start=hs.lists(_chunks, max_size=3), steps=_steps)
def test_content_plus_delta_is_the_newer_snapshot(start: list[Chunk], steps: list) -> None:
    live = LiveRow(_row(PartsBuilder(start).build()))  # stored rows are built rows
    stored: list[Chunk] = live.freeze().parts  # the row written whole
    cursor: tuple[RowSnapshot, int] | None = None
    for kind, arg in [*steps, ("flush", None)]:
        if kind == "chunk":
            live.append(arg)
        elif kind == "freeze":
            live.freeze()
        elif kind == "replace":
            live.set_parts(arg)
        else:
            snap = live.snapshot()
            delta = None if cursor is None else snap.delta_since(*cursor)
            if delta is None:
                stored = snap.freeze().parts  # no cursor, or not an extension: whole
                cursor = (snap, snap.run_chars())
            else:
                builder = PartsBuilder(stored)
                for chunk in delta.chunks:
                    builder.append(chunk)
                stored = builder.build()
                assert delta.run_chars == snap.run_chars()
                cursor = (snap, delta.run_chars)
            assert stored == snap.freeze().parts == live.freeze().parts


def test_a_snapshot_of_replaced_parts_is_not_an_extension() -> None:
    live = LiveRow(_row())
    live.append(TextDelta(text="one"))
    old = live.snapshot()
    live.set_parts([TextDelta(text="two")])
    assert live.snapshot().delta_since(old, old.run_chars()) is None


def test_delta_of_a_growing_run_is_only_the_new_text() -> None:
    live = LiveRow(_row())
    live.append(TextDelta(text="Hello"))
    old = live.snapshot()
    live.append(TextDelta(text=", "))
    live.freeze()  # joins the run into a new list
    live.append(TextDelta(text="world"))
    delta = live.snapshot().delta_since(old, old.run_chars())
    assert delta is not None
    assert delta.chunks == [TextDelta(text=", world")]
    assert delta.run_chars == len("Hello, world")


def test_delta_after_a_closed_run_finishes_it_then_adds_the_rest() -> None:
    live = LiveRow(_row())
    live.append(ThinkingDelta(text="hm"))
    old = live.snapshot()
    live.append(ThinkingDelta(text="m"))
    live.append(ToolCall(call_id="c", name="Read", input={}))
    live.append(TextDelta(text="ok"))
    delta = live.snapshot().delta_since(old, old.run_chars())
    assert delta is not None
    assert delta.chunks == [
        ThinkingDelta(text="m"),
        ToolCall(call_id="c", name="Read", input={}),
        TextDelta(text="ok"),
    ]

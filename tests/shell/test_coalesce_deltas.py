"""`coalesce_deltas`: a pump that reads many chunks at once merges consecutive text deltas of
one turn; the text is exactly the concatenation and nothing else moves."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from hostd.core.transcript import PartsBuilder
from hostd.shell.topic_driver import coalesce_deltas
from hostd_protocol.common import TextDelta, ThinkingDelta, ToolCall
from hostd_protocol.driver_messages import ChunkEvent, SteerBoundary, TurnEnd


def text(t: str, turn: str = "t1") -> ChunkEvent:
    return ChunkEvent(turn_id=turn, chunk=TextDelta(text=t))


def test_consecutive_text_of_one_turn_is_one_chunk() -> None:
    assert coalesce_deltas([text("a"), text("b"), text("c")]) == [text("abc")]


def test_boundaries_are_kept() -> None:
    think = ChunkEvent(turn_id="t1", chunk=ThinkingDelta(text="hm"))
    tool = ChunkEvent(turn_id="t1", chunk=ToolCall(call_id="c", name="Read"))
    boundary = SteerBoundary(turn_id="t1", steer_ids=["s1"])
    end = TurnEnd(turn_id="t1", status="success")
    events = [text("a"), think, think, text("b"), text("c"), tool, text("d"), boundary,
              text("e"), text("f"), text("x", "t2"), end]
    assert coalesce_deltas(events) == [
        text("a"),
        ChunkEvent(turn_id="t1", chunk=ThinkingDelta(text="hmhm")),
        text("bc"),
        tool,
        text("d"),
        boundary,
        text("ef"),
        text("x", "t2"),
        end,
    ]


def test_one_event_is_returned_as_is() -> None:
    events = [text("a")]
    assert coalesce_deltas(events) is events


_chunks = st.lists(
    st.one_of(
        st.builds(lambda t, turn: text(t, turn), st.text(max_size=3), st.sampled_from(["t1", "t2"])),
        st.builds(lambda t: ChunkEvent(turn_id="t1", chunk=ThinkingDelta(text=t)), st.text(max_size=3)),
        st.just(ChunkEvent(turn_id="t1", chunk=ToolCall(call_id="c", name="Read"))),
    ),
    max_size=12,
)


@given(_chunks)
def test_rows_read_the_same(events: list[ChunkEvent]) -> None:
    def parts(evs: list[ChunkEvent]) -> dict[str, list[object]]:
        rows: dict[str, PartsBuilder] = {}
        for ev in evs:
            rows.setdefault(ev.turn_id, PartsBuilder()).append(ev.chunk)
        return {k: b.build() for k, b in rows.items()}

    merged = coalesce_deltas(list(events))
    assert all(isinstance(e, ChunkEvent) for e in merged)
    assert parts(merged) == parts(events)  # type: ignore[arg-type]

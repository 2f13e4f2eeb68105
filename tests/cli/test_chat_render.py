"""Snapshots of what `hostd chat` draws, through a capture console (no colours, fixed width):
a streaming markdown answer frame by frame (Live, auto_refresh=False), a tool panel, a steer
roll, an approval prompt, the compacting status, and the human failure panels."""

# ruff: noqa: RUF001  (the prompt mark U+276F is part of the snapshots)

from __future__ import annotations

import io
import re

import msgspec
from rich.console import Console, RenderableType
from rich.live import Live
from rich.text import Text

from hostd.cli.chat_app import render_turn_error
from hostd.cli.chat_render import (
    ChatView,
    Tail,
    close_open_markdown,
    render_chat_live,
    render_row,
    render_rows,
    render_status_line,
    render_tool,
    roll_labels,
)
from hostd_protocol.client_messages import ApprovalInfo, MessageRow, TopicInfo
from hostd_protocol.common import (
    Chunk,
    CompactionAnchor,
    PlanChunk,
    PlanEntry,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    ToolResult,
    Usage,
)

WIDTH = 64
TOPIC = TopicInfo(id="t1", driver="scripted", model="m-1")
CALL = ToolCall(call_id="c1", name="Read", input={"file_path": "README.md"})
RESULT = ToolResult(call_id="c1", output="# project\nline 2\nline 3\nline 4\nline 5\nline 6\n")


def capture_console(*, terminal: bool = False) -> Console:
    return Console(
        record=True,
        color_system=None,
        width=WIDTH,
        height=30,
        file=io.StringIO(),
        force_terminal=terminal,
        legacy_windows=False,
    )


def clean(text: str) -> str:
    """Trailing spaces off every line (markdown pads to the width), trailing blank lines off."""
    return "\n".join(line.rstrip() for line in text.splitlines()).strip("\n")


def screen(renderable: RenderableType) -> str:
    console = capture_console()
    console.print(renderable)
    return clean(console.export_text())


def row(
    row_id: str,
    role: str,
    parts: list[Chunk],
    status: str = "success",
    position: int = 1,
    turn_id: str = "t1",
) -> MessageRow:
    return MessageRow(
        id=row_id,
        topic_id="t1",
        role=role,
        status=status,
        position=position,
        turn_id=turn_id,
        parts=parts,
    )


def test_streaming_markdown_frames() -> None:
    console = capture_console(terminal=True)
    frames: list[str] = []
    steps: list[list[Chunk]] = [
        [ThinkingDelta(text="Let me think about the")],
        [ThinkingDelta(text="Let me think about the daemon."), TextDelta(text="hostd is **a dae")],
        [
            ThinkingDelta(text="Let me think about the daemon."),
            TextDelta(text="hostd is **a daemon**:\n\n- owns streams\n- stores rows"),
        ],
    ]
    with Live(console=console, auto_refresh=False, transient=False) as live:
        for parts in steps:
            answer = row("a1", "assistant", parts, status="pending", position=2)
            view = ChatView(
                topic=TOPIC,
                state="answering",
                live_rows=[answer],
                labels={"a1": "A1"},
                input_text="steer th",
            )
            live.update(render_chat_live(view), refresh=True)
            frames.append(clean(console.export_text(clear=True)))
    assert frames[0] == clean("""
A1  assistant  answering…
  ▸ thinking (5 words)  … Let me think about the

────────────────────────────────────────────────────────────────
scripted · m-1 · ● answering
❯ steer th▏""")
    # Half-streamed bold is closed while live, so it is drawn formatted, not as raw `**`.
    assert frames[1] == clean("""
A1  assistant  answering…
  ▸ thinking (6 words)
  hostd is a dae

────────────────────────────────────────────────────────────────
scripted · m-1 · ● answering
❯ steer th▏""")
    assert frames[2] == clean("""
A1  assistant  answering…
  ▸ thinking (6 words)
  hostd is a daemon:

   • owns streams
   • stores rows

────────────────────────────────────────────────────────────────
scripted · m-1 · ● answering
❯ steer th▏""")


def test_close_open_markdown() -> None:
    assert close_open_markdown("a **b") == "a **b**"
    assert close_open_markdown("run `ls") == "run `ls`"
    assert close_open_markdown("```py\nx = 1") == "```py\nx = 1\n```"
    assert close_open_markdown("done **b** and `c`") == "done **b** and `c`"


def test_tool_panel_running_done_and_failed() -> None:
    assert screen(render_tool(CALL, None)) == clean("""
╭─ ⚙ Read  README.md ──────────────────────────────────────────╮
│ running…                                                     │
╰──────────────────────────────────────────────────────────────╯""")
    assert screen(render_tool(CALL, RESULT)) == clean("""
╭─ ⚙ Read  README.md ──────────────────────────────────────────╮
│ # project                                                    │
│ line 2                                                       │
│ line 3                                                       │
│ line 4                                                       │
│ … 2 more lines                                               │
╰───────────────────────────────────────────────────── ✓ done ─╯""")
    failed = render_tool(
        ToolCall(call_id="c2", name="Bash", input={"command": "rm -rf /tmp/x"}),
        ToolResult(call_id="c2", output="permission denied", is_error=True),
    )
    assert screen(failed) == clean("""
╭─ ⚙ Bash  rm -rf /tmp/x ──────────────────────────────────────╮
│ permission denied                                            │
╰──────────────────────────────────────────────────── ✗ error ─╯""")


def test_a_tool_of_a_stopped_answer_is_not_running() -> None:
    """A stopped turn's tool card says it stopped (also when the topic is reopened: the
    card is drawn from the stored row's status, not from the live stream)."""
    assert screen(render_tool(CALL, None, row_status="stopped")) == clean("""
╭─ ⚙ Read  README.md ──────────────────────────────────────────╮
│ stopped before it finished                                   │
╰────────────────────────────────────────────────── ■ stopped ─╯""")
    assert "did not finish" in screen(render_tool(CALL, None, row_status="error"))
    stopped = row("a1", "assistant", [TextDelta(text="Reading."), CALL], "stopped")
    assert "running…" not in screen(render_row(stopped))


def test_roll_is_labelled_a1a_u2_a2() -> None:
    rows = [
        row("u1", "user", [TextDelta(text="What is hostd?")], position=1),
        row("a1", "assistant", [TextDelta(text="Reading first."), CALL, RESULT], position=2),
        row("u2", "user", [TextDelta(text="Mention steering")], position=3),
        row("a2", "assistant", [TextDelta(text="You said: Mention steering.")], position=4),
        row("q1", "user", [TextDelta(text="and tests?")], "queued", 2**40, ""),
    ]
    assert roll_labels(rows) == {"u1": "U1", "a1": "A1a", "u2": "U2", "a2": "A2"}
    assert screen(render_rows(rows[:4])) == clean("""
U1  you ❯ What is hostd?

A1a assistant
  Reading first.
  ╭─ ⚙ Read  README.md ────────────────────────────────────────╮
  │ # project                                                  │
  │ line 2                                                     │
  │ line 3                                                     │
  │ line 4                                                     │
  │ … 2 more lines                                             │
  ╰─────────────────────────────────────────────────── ✓ done ─╯

U2  you ❯ Mention steering

A2  assistant
  You said: Mention steering.""")


def test_a_steer_that_became_the_next_turn_is_not_a_roll() -> None:
    rows = [
        row("u1", "user", [TextDelta(text="q")], position=1, turn_id="t1"),
        row("a1", "assistant", [TextDelta(text="a")], position=2, turn_id="t1"),
        row("u2", "user", [TextDelta(text="q2")], position=3, turn_id="t2"),
        row("a2", "assistant", [TextDelta(text="a2")], position=4, turn_id="t2"),
    ]
    assert list(roll_labels(rows).values()) == ["U1", "A1", "U2", "A2"]


def test_approval_prompt_and_queue() -> None:
    approval = ApprovalInfo(
        id="ap1",
        topic_id="t1",
        turn_id="t1",
        tool="Bash",
        input={"command": "ls"},
        description="run Bash: ls",
    )
    queued = row("q1", "user", [TextDelta(text="and tests?")], "queued", 2**40, "")
    draft = row("q2", "user", [TextDelta(text="shorter")], "draft", 2**40 + 1, "")
    view = ChatView(
        topic=TOPIC,
        state="answering",
        unsent=[queued, draft],
        unsent_kinds={"q1": "steer"},
        approvals=[approval],
        input_text="",
    )
    assert screen(render_chat_live(view)) == clean("""
 1. [steer] and tests?
 2. [draft] shorter
 /send N · /edit N · /discard N
╭─ approve Bash ───────────────────────────────────────────────╮
│ run Bash: ls                                                 │
│ {"command": "ls"}                                            │
│ y allow once   n deny                                        │
╰──────────────────────────────────────────────────────────────╯
────────────────────────────────────────────────────────────────
scripted · m-1 · ● awaiting approval
❯ ▏""")


def test_compacting_status_and_marker() -> None:
    usage = Usage(input_tokens=120_000, output_tokens=900, cost_usd=0.0123)
    line = render_status_line(TOPIC, "compacting", usage=usage)
    assert screen(line) == "scripted · m-1 · ● compacting · 120.0k in / 900 out · $0.0123"
    # A topic whose assistant picks the driver says so; one with neither runs the default.
    by_assistant = TopicInfo(id="t2", assistant="reviewer")
    assert screen(render_status_line(by_assistant, "idle")) == "@reviewer · ● idle"
    assert screen(render_status_line(TopicInfo(id="t3"), "idle")) == "default driver · ● idle"
    marker = MessageRow(
        id="m1",
        topic_id="t1",
        role="marker",
        status="success",
        position=5,
        anchor=CompactionAnchor(tokens_before=120_000, tokens_after=8_000),
    )
    assert screen(render_row(marker)) == (
        "────────── context compacted: 120,000 → 8,000 tokens ───────────"
    )


def test_stopped_and_failed_rows() -> None:
    stopped = row("a1", "assistant", [TextDelta(text="Partial")], "stopped", 2)
    assert screen(render_row(stopped, label="A1")) == clean("""
A1  assistant  (stopped: partial answer kept)
  Partial""")
    failed = MessageRow(
        id="a2",
        topic_id="t1",
        role="assistant",
        status="error",
        position=3,
        parts=[TextDelta(text="Start")],
        error="scripted failure",
    )
    assert screen(render_row(failed, label="A2")) == clean("""
A2  assistant  (failed)
  Start
✗ scripted failure""")


def test_driver_failures_are_said_for_humans() -> None:
    crashed = screen(
        render_turn_error("driver_crashed", "scripted exited with code 3; stderr: boom", "scripted")
    )
    assert crashed == clean("""
╭─ driver failed ──────────────────────────────────────────────╮
│ scripted crashed                                             │
│ scripted exited with code 3; stderr: boom                    │
│ The next message restarts it and resumes the session.        │
╰──────────────────────────────────────────────────────────────╯""")
    panel = render_turn_error("driver_unavailable", "claude CLI not found", "claude_code")
    assert panel is not None
    unavailable = screen(panel)
    assert unavailable == clean("""
╭─ driver unavailable ─────────────────────────────────────────╮
│ claude_code is unavailable                                   │
│ claude CLI not found                                         │
│ Fix what it says (install the driver or the CLI it needs,    │
│ set its API key), or pick another driver: `hostd drivers`    │
│ lists them.                                                  │
╰──────────────────────────────────────────────────────────────╯""")
    assert render_turn_error("driver_turn_error", "vendor said no", "scripted") is None
    assert "hostd drivers" in unavailable


def test_tail_keeps_the_last_lines_of_a_long_answer() -> None:
    body = Text("\n".join(f"line {i}" for i in range(10)))
    assert screen(Tail(body, 4)) == clean("""
… 7 lines above
line 7
line 8
line 9""")
    assert screen(Tail(body, 20)).splitlines()[0] == "line 0"


def test_failed_row_shows_the_first_line_of_a_long_error() -> None:
    failed = MessageRow(
        id="a2",
        topic_id="t1",
        role="assistant",
        status="error",
        position=3,
        error="driver 'x' exited with code 3\n--- driver stderr (tail) ---\nboom",
    )
    assert screen(render_row(failed, label="A2")) == clean("""
A2  assistant  (failed)
✗ driver 'x' exited with code 3""")


def test_allow_always_is_offered_only_when_the_driver_has_it() -> None:
    from hostd.cli.chat_app import parse_command
    from hostd.cli.chat_render import allow_always_option, render_approval
    from hostd_protocol.client_messages import ApprovalInfo
    from hostd_protocol.common import ApprovalOption

    plain = ApprovalInfo(id="ap1", topic_id="tp", turn_id="t", tool="Bash")
    offered = ApprovalInfo(
        id="ap2",
        topic_id="tp",
        turn_id="t",
        tool="Bash",
        options=[
            ApprovalOption(id="o1", label="Allow once", kind="allow_once"),
            ApprovalOption(id="o2", label="Always allow Bash", kind="allow_always"),
        ],
    )
    assert allow_always_option(plain) is None
    assert allow_always_option(offered) == offered.options[1]
    assert " a " not in screen(render_approval(plain))
    assert "a Always allow Bash" in screen(render_approval(offered))
    assert parse_command("a", approval_open=True).name == "always"
    assert parse_command("a", approval_open=False).name == ""  # just a message


def test_several_answers_are_labelled_and_alternatives_dim() -> None:
    from hostd_protocol.common import AnswerTarget

    rows = [
        row("u1", "user", [TextDelta(text="Compare")], position=1),
        msgspec.structs.replace(
            row("a0", "assistant", [TextDelta(text="Zero.")], position=2),
            target=AnswerTarget(driver="scripted", model="m-1"),
        ),
        msgspec.structs.replace(
            row("a1", "assistant", [TextDelta(text="One.")], "error", position=3),
            lane=1,
            alternative=True,
            target=AnswerTarget(assistant="reviewer"),
            error="it broke",
        ),
    ]
    # Lanes are A<n>.<lane>, never mistaken for a steer roll (A1a).
    assert roll_labels(rows) == {"u1": "U1", "a0": "A1.0", "a1": "A1.1"}
    assert screen(render_rows(rows)) == clean("""
U1  you ❯ Compare

A1.0 assistant  [answer 0: scripted/m-1]
  Zero.

A1.1 assistant  [answer 1: @reviewer, alternative]  (failed)
  One.
✗ it broke""")
    console = Console(color_system="standard", force_terminal=True, width=WIDTH, file=io.StringIO())
    console.print(render_row(rows[2]))
    assert "\x1b[2m" in console.file.getvalue()  # type: ignore[attr-defined]  # dim


def test_chat_answer_commands() -> None:
    from hostd.cli.chat_answers import also_note, choose_row, parse_also
    from hostd_protocol.common import AnswerTarget

    assert parse_also("scripted/m1 @rev /m2") == [
        AnswerTarget(driver="scripted", model="m1"),
        AnswerTarget(assistant="rev"),
        AnswerTarget(model="m2"),
    ]
    assert parse_also("@") == "@ needs an assistant name, e.g. @reviewer"
    assert also_note([]) == "messages are answered by the topic's driver only"
    plain = [row("u1", "user", [TextDelta(text="q")])]
    assert choose_row(plain, "1").startswith("no message has several answers")  # type: ignore[union-attr]
    lanes = [
        msgspec.structs.replace(
            row(f"a{n}", "assistant", [], position=2 + n), lane=n, target=AnswerTarget(model="x")
        )
        for n in (0, 1)
    ]
    assert choose_row(lanes, "1") == lanes[1]
    assert choose_row(lanes, "x") == "which answer? give its number (0, 1)"


#: What a model echoing a hostile file could put in any field: OSC 0 (retitle the terminal),
#: OSC 52 (set the clipboard), CSI 2J (clear the screen), a C1 CSI.
HOSTILE = "x\x1b]0;pwned\x07\x1b]52;c;ZXZpbA==\x07\x1b[2J\x9b1mz"


def raw_output(renderable: RenderableType) -> str:
    """What the terminal would receive (no styles: any ESC in it came from the content)."""
    out = io.StringIO()
    Console(color_system=None, width=WIDTH, file=out, force_terminal=False).print(renderable)
    return out.getvalue()


def test_chat_never_sends_content_control_sequences_to_the_terminal() -> None:
    """hostd chat draws titles, answers, thinking, tool calls and results, errors, approvals
    and the queue: each with a hostile escape sequence shows it as visible characters."""
    call = ToolCall(call_id="c1", name=f"Read{HOSTILE}", input={"file_path": HOSTILE})
    answer = MessageRow(
        id="a1",
        topic_id="t1",
        role="assistant",
        status="error",
        position=2,
        turn_id="t1",
        parts=[
            ThinkingDelta(text=f"think {HOSTILE}"),
            TextDelta(text=f"answer {HOSTILE}"),
            call,
            ToolResult(call_id="c1", output=f"out {HOSTILE}"),
        ],
        error=f"failed {HOSTILE}",
    )
    user = row("u1", "user", [TextDelta(text=f"ask {HOSTILE}")], status="queued", position=3)
    approval = ApprovalInfo(
        id="p1",
        topic_id="t1",
        turn_id="t1",
        tool=f"Bash{HOSTILE}",
        description=f"run {HOSTILE}",
        input={"command": HOSTILE},
    )
    topic = TopicInfo(id="t1", title=f"title {HOSTILE}", driver=f"d{HOSTILE}", model=HOSTILE)
    view = ChatView(
        topic=topic,
        state="answering",
        live_rows=[answer],
        labels={"a1": "A1"},
        unsent=[user],
        approvals=[approval],
    )
    shown = [
        raw_output(render_chat_live(view)),
        raw_output(render_row(user)),
        raw_output(render_status_line(topic, "idle")),
        raw_output(render_turn_error("driver_crashed", f"boom {HOSTILE}", f"d{HOSTILE}")),
    ]
    for text in shown:
        assert "\x1b" not in text and "\x9b" not in text and "\x07" not in text
    assert "\u241b]0;pwned" in shown[0]  # ESC shown as its control picture, the rest as is


def test_a_scheduled_run_is_labelled_with_its_schedule_not_you() -> None:
    typed = MessageRow(id="u1", topic_id="t1", role="user", status="success", position=1,
                       parts=[TextDelta("hello")])
    ran = msgspec.structs.replace(
        typed, id="u2", position=3, parts=[TextDelta("daily report")],
        meta={"client_msg_id": "schedule:sc4:1800000000.0"},
    )
    console = capture_console()
    console.print(render_row(typed, label="U1"))
    console.print(render_row(ran, label="U2"))
    assert clean(console.export_text()) == "U1  you ❯ hello\nU2  schedule sc4 ❯ daily report"


def test_a_plan_is_a_checklist_and_only_the_newest_is_shown() -> None:
    old = PlanChunk(entries=[PlanEntry(content="read the config", status="in_progress")])
    new = PlanChunk(
        entries=[
            PlanEntry(content="read the config", status="completed"),
            PlanEntry(content="write the parser", status="in_progress"),
            PlanEntry(content="add tests"),
        ]
    )
    out = screen(render_row(row("a1", "assistant", [old, TextDelta(text="Reading."), new])))
    assert out.count("plan") == 1  # the older plan is not drawn again
    assert "[x] read the config" in out
    assert "[~] write the parser" in out
    assert "[ ] add tests" in out
    assert "1/3 done" in out
    assert out.index("Reading.") < out.index("[x] read the config")


def test_the_chat_help_shows_every_word_and_lines_its_descriptions_up() -> None:
    """`/help` as the terminal shows it: rich markup took "[reason]" for a tag and dropped
    it, and /image's description started one column left of the others."""
    from hostd.cli.chat_commands import HELP

    shown = Text.from_markup(HELP).plain  # what rich shows, before wrapping to a width
    assert "(also /allow, /deny [reason])" in shown
    commands = [ln for ln in shown.splitlines() if ln.startswith("  /")]
    starts = {re.match(r"  \S.*?\s{2,}(\S)", ln).start(1) for ln in commands}  # type: ignore[union-attr]
    assert len(starts) == 1, commands

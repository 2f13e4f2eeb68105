"""hostd rows and events as ACP updates (sans-IO), and the editor's MCP servers as driver
options."""

from __future__ import annotations

from hostd.acp.inputs import mcp_option as _mcp_option
from hostd.acp.inputs import prompt_text as _prompt_text
from hostd.acp.updates import commands_update, mode_state, updates_for_chunk, updates_for_row
from hostd_protocol.client_messages import DriverInfo, MessageRow
from hostd_protocol.common import (
    CommandInfo,
    DriverMode,
    PlanChunk,
    PlanEntry,
    TextDelta,
    ToolCall,
    ToolResult,
)


def test_an_edit_is_a_diff_at_its_location_and_a_result_completes_it() -> None:
    edit = ToolCall(
        call_id="c1", name="Edit",
        input={"file_path": "/p/a.py", "old_string": "x = 1", "new_string": "x = 2"},
    )
    (call,) = updates_for_chunk(edit)
    assert call["kind"] == "edit" and call["title"] == "Edit /p/a.py"
    assert call["locations"] == [{"path": "/p/a.py"}]
    assert call["content"] == [
        {"type": "diff", "path": "/p/a.py", "oldText": "x = 1", "newText": "x = 2"}
    ]
    (done,) = updates_for_chunk(ToolResult(call_id="c1", output="ok", is_error=True))
    assert done["status"] == "failed" and done["content"][0]["content"]["text"] == "ok"
    (mcp,) = updates_for_chunk(ToolCall(call_id="c2", name="time__now", input={}))
    assert mcp["kind"] == "other" and "locations" not in mcp


def test_plans_commands_rows_and_modes() -> None:
    (plan,) = updates_for_chunk(PlanChunk(entries=[PlanEntry(content="a", status="completed")]))
    assert plan == {
        "sessionUpdate": "plan",
        "entries": [{"content": "a", "status": "completed", "priority": "medium"}],
    }
    update = commands_update([CommandInfo(name="x"), CommandInfo(name="y", input_hint="h")])
    assert update["availableCommands"] == [
        {"name": "x", "description": "x"},
        {"name": "y", "description": "y", "input": {"hint": "h"}},
    ]
    user = MessageRow(id="u", topic_id="t", role="user", status="success", position=1,
                      parts=[TextDelta(text="hi")])
    assert updates_for_row(user) == [
        {"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": "hi"}}
    ]
    queued = MessageRow(id="q", topic_id="t", role="user", status="queued", position=2,
                        parts=[TextDelta(text="later")])
    assert updates_for_row(queued) == []
    claude = [DriverMode(id="default", name="Ask"), DriverMode(id="plan", name="Plan")]
    modes = mode_state(claude, "plan")
    assert modes is not None and modes["currentModeId"] == "plan"
    assert mode_state(claude, "nope")["currentModeId"] == "default"  # type: ignore[index]
    assert mode_state([], "") is None


def test_mcp_servers_take_each_drivers_shape_and_prompts_inline_context() -> None:
    servers = [
        {"name": "my files", "command": "mcp-files", "args": ["-r"],
         "env": [{"name": "K", "value": "v"}]},
        {"type": "http", "name": "web", "url": "http://127.0.0.1:9/mcp",
         "headers": [{"name": "Authorization", "value": "Bearer t"}]},
    ]
    openai = DriverInfo(name="openai", available=True, mcp_option="mcp_servers",
                        mcp_format="mcp.json")
    acp = DriverInfo(name="acp", available=True, mcp_option="mcp_servers", mcp_format="acp")
    scripted = DriverInfo(name="scripted", available=True)
    assert _mcp_option(openai, servers) == {"mcp_servers": {
        "my_files": {"command": "mcp-files", "args": ["-r"], "env": {"K": "v"}},
        "web": {"url": "http://127.0.0.1:9/mcp", "headers": {"Authorization": "Bearer t"}},
    }}
    assert _mcp_option(acp, servers) == {"mcp_servers": servers}
    assert _mcp_option(scripted, servers) == {}
    assert _mcp_option(None, servers) == {}
    text = _prompt_text([
        {"type": "text", "text": "explain "},
        {"type": "resource", "resource": {"uri": "file:///p/a.py", "text": "x = 2"}},
    ])
    assert text == "explain \n<context uri='file:///p/a.py'>\nx = 2\n</context>\n"


def test_a_scheduled_runs_user_row_is_labelled_with_its_schedule() -> None:
    run = MessageRow(id="u", topic_id="t", role="user", status="success", position=1,
                     parts=[TextDelta(text="news")],
                     meta={"client_msg_id": "schedule:sc7:1700000000.0"})
    meta = {"hostd": {"scheduledBy": "sc7"}}
    assert updates_for_row(run) == [
        {"sessionUpdate": "user_message_chunk",
         "content": {"type": "text", "text": "schedule sc7: "}, "_meta": meta},
        {"sessionUpdate": "user_message_chunk",
         "content": {"type": "text", "text": "news"}, "_meta": meta},
    ]
    typed = MessageRow(id="v", topic_id="t", role="user", status="success", position=2,
                       parts=[TextDelta(text="hi")], meta={"client_msg_id": "k1"})
    assert "_meta" not in updates_for_row(typed)[0]

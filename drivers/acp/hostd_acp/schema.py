"""The part of the Agent Client Protocol (ACP, schema v1) this driver reads and writes.

msgspec structs, decoded leniently: unknown fields are ignored (agents add `_meta` and newer
fields freely) and every field the driver does not strictly need has a default, so an agent
on a newer schema still talks to us. Field names are camelCase on the wire (`rename="camel"`).

Only what the driver uses is modelled; anything else travels as plain JSON values
(`Any`) and is rendered to text where the user should see it.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

#: The ACP major version this client speaks (`initialize.protocolVersion`).
ACP_PROTOCOL_VERSION = 1


class _In(msgspec.Struct, rename="camel", kw_only=True):
    """Base for messages we decode: lenient, camelCase."""


class _Out(msgspec.Struct, rename="camel", kw_only=True, omit_defaults=True):
    """Base for messages we encode."""


# --- initialize ---------------------------------------------------------------------------------


class FsCapabilities(_Out):
    read_text_file: bool = False
    write_text_file: bool = False


class ClientCapabilities(_Out):
    fs: FsCapabilities = msgspec.field(default_factory=FsCapabilities)
    terminal: bool = False


class Implementation(_In):
    name: str = ""
    title: str | None = None
    version: str = ""


class InitializeParams(_Out):
    protocol_version: int
    client_capabilities: ClientCapabilities
    client_info: dict[str, str] = {}


class PromptCapabilities(_In):
    image: bool = False
    audio: bool = False
    embedded_context: bool = False


class AgentCapabilities(_In):
    load_session: bool = False
    prompt_capabilities: PromptCapabilities = msgspec.field(default_factory=PromptCapabilities)
    #: Unstable session methods the agent offers (`resume`, `close`, `fork`, `list`): keys.
    session_capabilities: dict[str, Any] = {}


class InitializeResult(_In):
    protocol_version: int
    agent_capabilities: AgentCapabilities = msgspec.field(default_factory=AgentCapabilities)
    agent_info: Implementation | None = None
    auth_methods: list[Any] = []


# --- sessions -----------------------------------------------------------------------------------


class NewSessionParams(_Out):
    cwd: str
    #: Required on the wire (agents refuse a request without it), so no default.
    mcp_servers: list[Any]
    #: Agent-specific extras (claude-agent-acp reads `systemPrompt` here).
    _meta: dict[str, Any] | None = msgspec.field(default=None, name="_meta")


class LoadSessionParams(_Out):
    session_id: str
    cwd: str
    mcp_servers: list[Any]


class ModelInfo(_In):
    model_id: str
    name: str = ""


class SessionModels(_In):
    """Model selection a session offers (ACP unstable `models`, claude-agent-acp has it)."""

    available_models: list[ModelInfo] = []
    current_model_id: str = ""


class ModeInfo(_In):
    id: str
    name: str = ""


class SessionModes(_In):
    """The session modes an agent offers (ACP `modes`; claude-agent-acp: permission modes)."""

    available_modes: list[ModeInfo] = []
    current_mode_id: str = ""


class NewSessionResult(_In):
    session_id: str
    models: SessionModels | None = None
    modes: SessionModes | None = None


class ResumeSessionResult(_In):
    """`session/resume` / `session/load` results (may be null or `{}`)."""

    models: SessionModels | None = None
    modes: SessionModes | None = None


class SetModeParams(_Out):
    session_id: str
    mode_id: str


class SetModelParams(_Out):
    session_id: str
    model_id: str


class TextBlock(_Out, tag="text", tag_field="type"):
    text: str


class ImageBlock(_Out, tag="image", tag_field="type"):
    """An image in a prompt (only to an agent whose `promptCapabilities.image` is true)."""

    mime_type: str
    data: str
    uri: str | None = None


class PromptParams(_Out):
    session_id: str
    prompt: list[TextBlock | ImageBlock]


class TokenUsage(_In):
    input_tokens: int = 0
    output_tokens: int = 0
    cached_read_tokens: int | None = None
    cached_write_tokens: int | None = None
    thought_tokens: int | None = None
    total_tokens: int = 0


StopReason = Literal["end_turn", "max_tokens", "max_turn_requests", "refusal", "cancelled"]


class PromptResult(_In):
    #: Kept as str: an agent on a newer schema may add reasons.
    stop_reason: str
    usage: TokenUsage | None = None


class SessionIdParams(_Out):
    session_id: str


# --- session/update -----------------------------------------------------------------------------


class SessionNotification(_In):
    session_id: str
    update: msgspec.Raw


class UpdateKind(_In):
    session_update: str


class ContentChunk(_In):
    """`agent_message_chunk`, `agent_thought_chunk`, `user_message_chunk`."""

    session_update: str
    content: dict[str, Any] = {}


class ToolCallFields(_In):
    """`tool_call` and `tool_call_update` (every field but the id optional in updates)."""

    tool_call_id: str
    session_update: str = "tool_call"
    title: str | None = None
    kind: str | None = None
    status: str | None = None
    content: list[dict[str, Any]] | None = None
    locations: list[Any] | None = None
    raw_input: Any = None
    raw_output: Any = None
    _meta: dict[str, Any] | None = msgspec.field(default=None, name="_meta")


class PlanEntry(_In):
    content: str = ""
    priority: str = ""
    status: str = ""


class PlanUpdate(_In):
    entries: list[PlanEntry] = []


class CommandInput(_In):
    hint: str = ""


class AvailableCommand(_In):
    name: str
    description: str = ""
    input: CommandInput | None = None


class CommandsUpdate(_In):
    """`available_commands_update`: the agent's whole command list."""

    available_commands: list[AvailableCommand] = []


class ModeUpdate(_In):
    current_mode_id: str = ""


class Cost(_In):
    amount: float = 0.0
    currency: str = "USD"


class UsageUpdate(_In):
    used: int = 0
    size: int = 0
    cost: Cost | None = None


# --- requests from the agent ------------------------------------------------------------------


class PermissionOption(_In):
    option_id: str
    name: str = ""
    kind: str = ""


class RequestPermissionParams(_In):
    session_id: str
    tool_call: ToolCallFields
    options: list[PermissionOption]


class ReadTextFileParams(_In):
    session_id: str
    path: str
    line: int | None = None
    limit: int | None = None


class WriteTextFileParams(_In):
    session_id: str
    path: str
    content: str


def permission_selected(option_id: str) -> dict[str, Any]:
    """The `session/request_permission` result for a chosen option."""
    return {"outcome": {"outcome": "selected", "optionId": option_id}}


PERMISSION_CANCELLED: dict[str, Any] = {"outcome": {"outcome": "cancelled"}}

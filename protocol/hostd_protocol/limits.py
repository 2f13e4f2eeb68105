"""Every size limit of the client <-> host protocol, in one place (docs/protocol.md, "Limits").

The frame limit bounds one message on the wire. Everything that can grow (a message a user
sends, what a driver streams, a snapshot, a history page, a topic listing) has its own
smaller limit, so no single thing can reach the frame limit and wedge a topic or break a
connection:

- Requests carrying user data are refused with `PayloadTooLarge` (code `payload_too_large`)
  before anything is stored when they exceed their limit.
- Driver output is bounded by the host as it arrives: text and thinking deltas are split into
  pieces of at most `MAX_CHUNK_CHARS`; tool output, tool input and messages (errors, notices)
  are cut with a visible `TRUNCATED_MARK`.
- Replies that list rows or topics are bounded by `MAX_REPLY_BYTES` (encoded) and page: a page
  always holds at least one item, so paging always makes progress. A row too big for a page
  is delivered with its newest content and `meta["truncated"]` (see `TRUNCATED_META`); the
  whole row is read in pieces with `read-row`.
"""

from __future__ import annotations

from hostd_protocol.framing import DEFAULT_MAX_FRAME_SIZE

__all__ = [
    "MAX_ATTACHMENT_BYTES",
    "MAX_CHUNK_CHARS",
    "MAX_COMMANDS",
    "MAX_DEPTH",
    "MAX_DRIVER_HISTORY_BYTES",
    "MAX_FIELD_CHARS",
    "MAX_OPTIONS_BYTES",
    "MAX_FRAME_SIZE",
    "MAX_MESSAGE_CHARS",
    "MAX_REPLY_BYTES",
    "MAX_SEND_BYTES",
    "MAX_SEND_HISTORY_BYTES",
    "MAX_TOOL_INPUT_BYTES",
    "MAX_TOOL_OUTPUT_CHARS",
    "TRUNCATED_MARK",
    "TRUNCATED_META",
]

#: One frame body, both directions, both channels.
MAX_FRAME_SIZE = DEFAULT_MAX_FRAME_SIZE
#: The text of one `send` or `edit-queued` (UTF-8 bytes).
MAX_SEND_BYTES = 1024 * 1024
#: The attachments of one `send`, together (base64 characters): with the largest text the
#: user row still fits one snapshot (`MAX_REPLY_BYTES`).
MAX_ATTACHMENT_BYTES = 2 * 1024 * 1024
#: The `history` a client sends along with one `send`, together: texts (UTF-8) and tool parts
#: (encoded), in bytes.
MAX_SEND_HISTORY_BYTES = 2 * 1024 * 1024
#: The stored history the host sends a stateless driver with one turn (encoded bytes): the
#: oldest messages leave first, whole (a tool call with its result).
MAX_DRIVER_HISTORY_BYTES = 4 * 1024 * 1024
#: The largest text or thinking delta forwarded as one event; bigger ones are split.
MAX_CHUNK_CHARS = 64 * 1024
#: A tool result's output kept (characters); the rest is cut with `TRUNCATED_MARK`.
MAX_TOOL_OUTPUT_CHARS = 1024 * 1024
#: A tool call's or approval request's `input`, encoded (bytes); bigger ones are replaced by
#: `{"truncated": "<the start of its JSON>"}`.
MAX_TOOL_INPUT_BYTES = 256 * 1024
#: Errors, notices, log lines and descriptions from a driver (characters).
MAX_MESSAGE_CHARS = 16 * 1024
#: One snapshot, history page, topic listing or `read-row` piece, encoded (bytes).
MAX_REPLY_BYTES = 4 * 1024 * 1024
#: Containers (maps, arrays) nested in any request: deeper is refused (`invalid_argument`).
MAX_DEPTH = 32
#: Entries of one plan chunk, and commands of one command list (more are dropped); each
#: entry's or command's texts are cut at `MAX_FIELD_CHARS`.
MAX_COMMANDS = 256
#: A request's free-form `options` map, encoded (bytes).
MAX_OPTIONS_BYTES = 64 * 1024
#: Any other string field of a request (titles, names, paths, ids, reasons), in characters;
#: the message texts (`text`) have `MAX_SEND_BYTES` instead.
MAX_FIELD_CHARS = 4096
#: Appended where the host cut a text.
TRUNCATED_MARK = " [... truncated by hostd]"
#: `MessageRow.meta` key set on a row delivered without its oldest content (too big for one
#: reply): `{"omitted_parts": n, "omitted_chars": m}`: the first n parts, then m characters of
#: part n, are left out. `read-row` returns the whole row in pieces.
TRUNCATED_META = "truncated"

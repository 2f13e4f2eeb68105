"""What an editor sends `hostd acp`, as hostd takes it (sans-IO): a prompt's ACP content
blocks as the message text, and the editor's MCP servers as the driver's MCP option.

Rules this module guards: lenient in (blocks hostd has no use for are refused with a reason,
never dropped silently; an odd MCP entry is skipped), and each driver gets the MCP shape it
declares (`DriverSpec.mcp_option` / `mcp_format`).
"""

from __future__ import annotations

import re
from typing import Any, get_args

from hostd_acp.jsonrpc import INVALID_PARAMS
from hostd_acp.rpc_peer import RequestRefused
from hostd_protocol.client_messages import DriverInfo
from hostd_protocol.common import Attachment, ImageMediaType

__all__ = ["mcp_option", "prompt_input", "prompt_text"]

#: The image types an attachment may have (`hostd_protocol.common.Attachment.media_type`).
_IMAGE_TYPES: dict[Any, ImageMediaType] = {t: t for t in get_args(ImageMediaType)}


def prompt_text(blocks: Any) -> str:
    """ACP content blocks as the message text (images refused: see `prompt_input`)."""
    text, _ = prompt_input(blocks, images=False)
    return text


def prompt_input(blocks: Any, *, images: bool, driver: str = "") -> tuple[str, list[Attachment]]:
    """ACP content blocks as the message: text as is, embedded resources inlined, images
    (only where the session's `driver` takes them: `images`) as attachments (protocol 1.5;
    the daemon checks their size and count)."""
    if not isinstance(blocks, list):
        raise RequestRefused(INVALID_PARAMS, "prompt must be a list of content blocks")
    out: list[str] = []
    attachments: list[Attachment] = []
    for b in blocks:
        if not isinstance(b, dict):
            continue
        kind = b.get("type")
        if kind == "text":
            out.append(str(b.get("text", "")))
        elif kind == "resource":
            res = b.get("resource") or {}
            if isinstance(res, dict):
                uri, text = res.get("uri", ""), res.get("text")
                body = text if isinstance(text, str) else "(binary content)"
                out.append(f"\n<context uri={uri!r}>\n{body}\n</context>\n")
        elif kind == "resource_link":
            out.append(f"[{b.get('name') or b.get('uri', '')}]({b.get('uri', '')})")
        elif kind == "image" and images:
            data, media = b.get("data"), b.get("mimeType")
            if not isinstance(data, str) or not data:
                raise RequestRefused(INVALID_PARAMS, "an image block needs data (base64)")
            if media not in _IMAGE_TYPES:
                raise RequestRefused(
                    INVALID_PARAMS, f"image type {media!r} is not taken (PNG, JPEG, GIF, WebP)"
                )
            uri = b.get("uri")
            name = uri.rsplit("/", 1)[-1] if isinstance(uri, str) and uri else ""
            attachments.append(Attachment(media_type=_IMAGE_TYPES[media], data=data,
                                          name=name or f"image-{len(attachments) + 1}"))
        elif kind == "image":
            who = f"the {driver} driver" if driver else "this session's driver"
            raise RequestRefused(
                INVALID_PARAMS,
                f"{who} takes no images; send the text alone, or open a session with a "
                "driver that takes them (hostd drivers)",
            )
        else:
            raise RequestRefused(INVALID_PARAMS, f"hostd does not take {kind!r} content")
    return "".join(out), attachments


def mcp_option(driver: DriverInfo | None, servers: Any) -> dict[str, Any]:
    """The editor's MCP servers as the driver's option, in the shape it declares
    (`DriverSpec.mcp_option` / `mcp_format`); {} when it takes none."""
    if not isinstance(servers, list) or not servers or driver is None or not driver.mcp_option:
        return {}
    if driver.mcp_format == "acp":
        return {driver.mcp_option: servers}  # e.g. to an inner ACP agent's session/new as is
    if driver.mcp_format == "mcp.json":
        table: dict[str, Any] = {}
        for s in servers:
            if not isinstance(s, dict) or not s.get("name"):
                continue
            pairs = s.get("env") or s.get("headers") or []
            kv = {p["name"]: p["value"] for p in pairs if isinstance(p, dict) and "name" in p}
            # The openai driver takes names of letters, digits, '-' and '_' only.
            name = re.sub(r"[^A-Za-z0-9_-]", "_", str(s["name"]))
            if s.get("url"):
                kind = {"type": "sse"} if s.get("type") == "sse" else {}
                table[name] = {"url": s["url"], "headers": kv, **kind}
            else:
                table[name] = {
                    "command": s.get("command", ""),
                    "args": list(s.get("args") or []),
                    "env": kv,
                }
        return {driver.mcp_option: table} if table else {}
    return {}

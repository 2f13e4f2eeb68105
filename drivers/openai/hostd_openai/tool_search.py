"""Deferring a large tool catalog behind one `tool_search` tool, only when that saves tokens.

Rules this module guards (pure, no I/O):

- Nothing is deferred unless the catalog's schemas cost more than `tool_search_over_tokens`
  and folding saves more than the search tool itself costs (its description lists the folded
  names, so the model knows what it can ask for).
- A tool that needs the user's approval is never folded away: only tools `allowed_tools`
  lets run unasked can be deferred, so an approval is never hidden behind a search.
- `search` ranks the folded tools by the words of the query found in their names and
  descriptions and returns the best matches' schemas; the loop then offers those tools for the
  rest of the turn.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from hostd_openai.config import is_allowed
from hostd_openai.mcp_tools import CatalogTool

SEARCH_TOOL = "tool_search"
MAX_RESULTS = 5
_WORD = re.compile(r"[a-z0-9]+")


def schema_tokens(schema: dict[str, Any]) -> int:
    """A rough token count of a tool schema (~4 characters per token)."""
    return len(json.dumps(schema)) // 4


@dataclass
class ToolPlan:
    """What one turn offers: `visible` schemas now, `deferred` ones on request."""

    visible: dict[str, CatalogTool]
    deferred: dict[str, CatalogTool] = field(default_factory=dict)

    def schemas(self) -> list[dict[str, Any]]:
        out = [t.openai_schema() for t in self.visible.values()]
        if self.deferred:
            out.append(search_schema(sorted(self.deferred)))
        return out

    def activate(self, names: list[str]) -> None:
        for name in names:
            tool = self.deferred.pop(name, None)
            if tool is not None:
                self.visible[name] = tool


def search_schema(names: list[str]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": SEARCH_TOOL,
            "description": (
                "Find more tools. These are available on request (call this with words "
                "describing what you need; the matching tools become callable): " + ", ".join(names)
            ),
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}},
                "required": ["query"],
            },
        },
    }


def plan(tools: dict[str, CatalogTool], allowed: list[str], over_tokens: int) -> ToolPlan:
    """Which tools to show and which to defer (see the module docstring)."""
    if over_tokens <= 0 or not tools:
        return ToolPlan(visible=dict(tools))
    costs = {name: schema_tokens(t.openai_schema()) for name, t in tools.items()}
    if sum(costs.values()) <= over_tokens:
        return ToolPlan(visible=dict(tools))
    foldable = sorted(n for n in tools if is_allowed(n, allowed))
    saved = sum(costs[n] for n in foldable)
    if not foldable or saved <= schema_tokens(search_schema(foldable)):
        return ToolPlan(visible=dict(tools))
    visible = {n: t for n, t in tools.items() if n not in foldable}
    return ToolPlan(visible=visible, deferred={n: tools[n] for n in foldable})


def search(query: str, deferred: dict[str, CatalogTool]) -> tuple[str, list[str]]:
    """(text for the model, names of the tools found)."""
    words = set(_WORD.findall(query.lower()))
    scored = []
    for name, tool in deferred.items():
        haystack = set(_WORD.findall(f"{name} {tool.description}".lower().replace("__", " ")))
        score = len(words & haystack)
        if score or query.strip() in ("", "*"):
            scored.append((-score, name))
    found = [name for _, name in sorted(scored)[:MAX_RESULTS]]
    if not found:
        return (
            f"No tool matches {query!r}. Available on request: {', '.join(sorted(deferred))}.",
            [],
        )
    text = "These tools are now callable:\n" + "\n".join(
        json.dumps(deferred[n].openai_schema()["function"]) for n in found
    )
    return text, found

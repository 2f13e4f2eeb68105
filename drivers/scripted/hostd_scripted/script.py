"""The scripted driver's little language, sans-IO: text in, steps out.

A message is a script when any line starts with `/`: each such line is one directive
(`/name arg arg key=value`), run in order; other lines are the prompt (what a user would
have typed), which some steps quote. A message without directives plays a named scenario
(from `Send.options["scenario"]`, else `Init.options["scenario"]`, else `default`). A
scenario value that itself starts with `/` is a script. README.md documents every directive.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["SCENARIOS", "Script", "Step", "ScriptError", "parse", "resolve"]


class ScriptError(ValueError):
    """A directive the driver does not know, or with bad arguments."""


@dataclass(frozen=True)
class Step:
    """One directive: `/op args... key=value...`."""

    op: str
    args: tuple[str, ...] = ()
    kw: Mapping[str, str] = field(default_factory=dict)

    def arg(self, i: int, default: str = "") -> str:
        return self.args[i] if i < len(self.args) else default

    def rest(self) -> str:
        """All positional arguments as one text."""
        return " ".join(self.args)

    def num(self, name: str, default: float, *, pos: int | None = None) -> float:
        raw = self.kw.get(name)
        if raw is None and pos is not None and pos < len(self.args):
            raw = self.args[pos]
        if raw is None:
            return default
        try:
            return float(raw)
        except ValueError:
            raise ScriptError(f"/{self.op}: {name} must be a number, got {raw!r}") from None


@dataclass(frozen=True)
class Script:
    steps: tuple[Step, ...]
    prompt: str = ""


#: Directives and how many positional arguments they take at most (None: free text).
KNOWN: dict[str, int | None] = {
    "scenario": 1,
    "text": None,
    "chunks": 1,
    "think": None,
    "tool": 1,
    "approve": 1,
    "compact": 1,
    "error": None,
    "crash": 1,
    "hang": 0,
    "wait": 0,
    "sleep": 1,
    "garbage": 0,
    "oversized": 0,
    "stray": 0,
    "late": 0,
    "whoami": 0,
    "history": 0,
    "model": 1,
    "env": 1,
    "leak": 1,
    "huge": 2,
    "envkeys": 0,
    "usage": 2,
    "notice": None,
    "plan": None,
    "commands": 64,
    "bench": 1,
    "echo": 0,
    "stderr": None,
    "child": 0,
    "sh": None,
    "readfile": 1,
    "writefile": 1,
    "connect": 2,
    "orphan": 1,
    "pwd": 0,
    "freeze": 1,
    "burst": 1,
    "traceparent": 0,
}

#: Built-in scenarios, as scripts. `default` is what `scripts/demo` shows: a streamed answer
#: with one tool call whose boundary pauses (`tool_pause`, 1.5 s) so a demo can steer.
SCENARIOS: dict[str, str] = {
    "default": "\n".join(
        [
            "/think The user wants an overview; read the README before answering.",
            "/text Let me look at the project first, so the answer matches your code.",
            "/tool Read",
            "/text The README says this project is a small daemon with a socket API, a "
            "store and pluggable drivers. In short: windows attach to topics, the daemon "
            "owns every answer stream, and drivers translate vendor SDKs into one event "
            "set. Ask me to go deeper into any part.",
            "/usage 1200 180",
        ]
    ),
    "echo": "/echo",
    "tool": "/text Checking.\n/tool Read\n/text Done reading.",
    "think": "/think Considering the question step by step.\n/text Here is the answer.",
    "steer": "/text Working on it.\n/tool Read wait-steer=10\n/text Finished.",
    "approve": "/approve Bash",
    "compact": "/compact anchor\n/text Continuing after compaction.",
    "error": "/text Starting.\n/error scripted failure",
    "crash": "/text Starting.\n/crash 3",
    "hang": "/hang",
    "wait": "/text Waiting.\n/wait",
    "garbage": "/garbage",
    "oversized": "/oversized",
    "whoami": "/whoami",
    "bench": "/bench",
}


def parse(text: str) -> Script | None:
    """The script in `text`, or None when it has no directive lines (a plain prompt)."""
    steps: list[Step] = []
    prompt: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line.startswith("/") or line.startswith("//"):
            prompt.append(raw)
            continue
        steps.append(_parse_line(line[1:]))
    if not steps:
        return None
    return Script(tuple(_expand(steps, depth=0)), "\n".join(prompt).strip())


def resolve(
    text: str, send_options: Mapping[str, object], init_options: Mapping[str, object]
) -> Script:
    """What to play for one turn: directives in the text, else the options' scenario."""
    script = parse(text)
    if script is not None:
        return script
    for opts in (send_options, init_options):
        if "bench_chunks" in opts:
            return Script((Step("bench"),), text.strip())
        scenario = opts.get("scenario")
        if isinstance(scenario, str) and scenario:
            return _scenario(scenario, text.strip())
    return _scenario("default", text.strip())


def _scenario(name_or_script: str, prompt: str) -> Script:
    if name_or_script.lstrip().startswith("/"):
        script = parse(name_or_script)
        assert script is not None
        return Script(script.steps, prompt)
    try:
        body = SCENARIOS[name_or_script]
    except KeyError:
        known = ", ".join(sorted(SCENARIOS))
        raise ScriptError(f"unknown scenario {name_or_script!r} (known: {known})") from None
    script = parse(body)
    assert script is not None
    return Script(script.steps, prompt)


def _parse_line(line: str) -> Step:
    op, _, rest = line.partition(" ")
    op = op.strip().lower()
    if op not in KNOWN:
        raise ScriptError(f"unknown directive /{op} (known: {', '.join(sorted(KNOWN))})")
    if KNOWN[op] is None:  # free text: keep it verbatim
        return Step(op, (rest.strip(),) if rest.strip() else ())
    try:
        words = shlex.split(rest)
    except ValueError as exc:
        raise ScriptError(f"/{op}: {exc}") from None
    args: list[str] = []
    kw: dict[str, str] = {}
    for word in words:
        key, eq, value = word.partition("=")
        if eq and key:
            kw[key] = value
        else:
            args.append(word)
    limit = KNOWN[op]
    if limit is not None and len(args) > limit:
        raise ScriptError(f"/{op} takes at most {limit} argument(s), got {len(args)}")
    return Step(op, tuple(args), kw)


def _expand(steps: list[Step], depth: int) -> list[Step]:
    out: list[Step] = []
    for step in steps:
        if step.op != "scenario":
            out.append(step)
            continue
        if depth > 3:
            raise ScriptError("scenarios nest too deep")
        name = step.arg(0, "default")
        out.extend(_expand(list(_scenario(name, "").steps), depth + 1))
    return out

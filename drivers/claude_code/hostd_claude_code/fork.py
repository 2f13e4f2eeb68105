"""Vendor fork and rewind for the Claude Code driver: the CLI's own session copy.

The host offers a source in `Init.fork_from` (a fork of another topic, or a rewind of this
one to a checkpoint); the driver starts its session with the SDK's `resume=<session id>`,
`fork_session=True` and, for a checkpoint, `resume_session_at=<message uuid>` (the CLI loads
the transcript up to that message and writes a new session: the source is never changed).

Rules this module guards:

- A token is `<session id>` (the resume token) or `<session id>@<message uuid>` (a
  `Checkpoint`: the last top-level assistant message of a turn, as the SDK reported it).
- The CLI finds a session by its transcript, `<config dir>/projects/<cwd slug>/<id>.jsonl`,
  searching every project folder of its config dir (checked with the bundled CLI 2.1.332:
  a resume from another working dir finds it). Each topic has its own config dir (under its
  state dir), so a fork copies the source's transcript (and its folder of sub-agent files)
  into the new topic's config dir first; the source's own files are only read.
- The copy is taken only when it can work: the transcript is found and holds the checkpoint's
  message. Otherwise `prepare` says no and the driver declares `fork_session=False` in its
  `Ready`, so the host feeds the new session the history instead (nothing is lost, nothing
  is guessed). Plain file work: no SDK import, no network.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hostd_claude_code.config import ClaudeCodeOptions, CliPaths
from hostd_protocol.common import SessionSource

__all__ = ["ForkPlan", "checkpoint_token", "parse_token", "prepare", "source_config_dir"]


@dataclass(frozen=True)
class ForkPlan:
    """The session to start from: its id, and the message to cut after (None: all of it)."""

    session_id: str
    at: str | None = None

    def options(self, new_id: str) -> dict[str, Any]:
        """`ClaudeAgentOptions` fields that start the copy. A preset id is honoured for a
        whole copy only (the CLI picks its own with `resume_session_at`; the driver reads
        it from the session's `init` message like any other)."""
        fields: dict[str, Any] = {"resume": self.session_id, "fork_session": True}
        if self.at is None:
            fields["session_id"] = new_id
        else:
            fields["resume_session_at"] = self.at
        return fields


def checkpoint_token(session_id: str, message_uuid: str) -> str:
    """The `Checkpoint` token for the session as it stood after `message_uuid`."""
    return f"{session_id}@{message_uuid}"


def parse_token(token: str) -> ForkPlan:
    """A resume token or a checkpoint token as a plan."""
    session_id, _, at = token.partition("@")
    return ForkPlan(session_id=session_id, at=at or None)


def source_config_dir(
    source: SessionSource, own: CliPaths, own_config: str, opts: ClaudeCodeOptions
) -> Path:
    """Where the source session's transcripts are.

    `own_config` is the `CLAUDE_CONFIG_DIR` this session's CLI gets: when it is not the
    topic's own (a logged-in user's config dir, or an `env` override) every topic shares it;
    a fixed `claude_home`, or a source without a state dir, is shared too.
    """
    if Path(own_config) != own.config_dir or opts.claude_home or not source.state_dir:
        return Path(own_config)
    return Path(source.state_dir).resolve() / "claude" / ".claude"


def _find_transcript(config_dir: Path, session_id: str) -> Path | None:
    projects = config_dir / "projects"
    try:
        folders = sorted(p for p in projects.iterdir() if p.is_dir())
    except OSError:
        return None
    for folder in folders:
        candidate = folder / f"{session_id}.jsonl"
        if candidate.is_file():
            return candidate
    return None


def prepare(
    source: SessionSource, own: CliPaths, own_config: str, opts: ClaudeCodeOptions
) -> ForkPlan | None:
    """Make the source session findable by this session's CLI; the plan, or None when the
    copy cannot work (the driver then starts fresh and the host feeds the history)."""
    plan = parse_token(source.token)
    if not plan.session_id or os.sep in plan.session_id or plan.session_id.startswith("."):
        return None
    found = _find_transcript(source_config_dir(source, own, own_config, opts), plan.session_id)
    if found is None:
        return None
    try:
        if plan.at is not None and f'"uuid":"{plan.at}"' not in found.read_text("utf-8"):
            return None  # the checkpoint's message is not in this transcript
        own_dir = Path(own_config) / "projects" / found.parent.name
        if found.parent.resolve() != own_dir.resolve():
            own_dir.mkdir(parents=True, exist_ok=True)
            shutil.copy2(found, own_dir / found.name)
            extra = found.parent / plan.session_id  # sub-agent transcripts, tool results
            if extra.is_dir():
                shutil.copytree(extra, own_dir / plan.session_id, dirs_exist_ok=True)
    except (OSError, UnicodeDecodeError):
        return None
    return plan

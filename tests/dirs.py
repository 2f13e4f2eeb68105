"""Folders tests hand to hostd as a topic's working directory."""

from __future__ import annotations

from pathlib import Path


def made_dir(path: Path) -> str:
    """`path`, created (with its parents): a topic's chosen working directory must exist,
    hostd creates only its own per-topic folders."""
    path.mkdir(parents=True, exist_ok=True)
    return str(path)

"""hostd.core is sans-IO: no module there imports an I/O library or touches files.

The rule (DESIGN.md, "Layout"): the core takes inputs and returns effects; the shell does the
I/O. Checked on the source (AST), so a lazy import inside a function counts too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import hostd.core

CORE = Path(hostd.core.__file__).parent

#: Modules the core must never import (top-level package names).
FORBIDDEN_MODULES = {
    "trio",
    "anyio",
    "asyncio",
    "apsw",
    "sqlite3",
    "socket",
    "selectors",
    "ssl",
    "subprocess",
    "tempfile",
    "shutil",
    "io",
    "fcntl",
    "signal",
    "platformdirs",
}
#: First-party packages above the core.
FORBIDDEN_FIRST_PARTY = ("hostd.shell", "hostd.client", "hostd.cli", "hostd.web", "hostd.testing")
#: Calls that open, read, write or inspect files (`open(...)`, `path.read_text()`, `os.stat`...).
FILE_CALLS = {
    "open",
    "read_text",
    "write_text",
    "read_bytes",
    "write_bytes",
    "mkdir",
    "makedirs",
    "unlink",
    "rmdir",
    "iterdir",
    "glob",
    "rglob",
    "touch",
    "exists",
    "is_dir",
    "is_file",
    "stat",
    "lstat",
    "chmod",
    "listdir",
    "scandir",
    "expanduser",
}


def _core_modules() -> list[Path]:
    return sorted(CORE.rglob("*.py"))


def _violations(source: str) -> list[str]:
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""] if node.level == 0 else []
        else:
            names = []
        for name in names:
            if name.split(".")[0] in FORBIDDEN_MODULES or name == "os" or name.startswith("os."):
                found.append(f"line {node.lineno}: imports {name}")
            if name.startswith(FORBIDDEN_FIRST_PARTY):
                found.append(f"line {node.lineno}: imports {name} (above the core)")
        if isinstance(node, ast.Call):
            func = node.func
            called = (
                func.id
                if isinstance(func, ast.Name)
                else func.attr
                if isinstance(func, ast.Attribute)
                else ""
            )
            # `self._approvals.open()` is a method of ours, not the builtin: only bare `open(`
            # and attribute calls of the file kind count.
            is_builtin_open = isinstance(func, ast.Name) and called == "open"
            if is_builtin_open or (
                isinstance(func, ast.Attribute) and called in FILE_CALLS and called != "open"
            ):
                found.append(f"line {node.lineno}: calls {called}()")
    return found


def test_there_is_a_core() -> None:
    names = {p.stem for p in _core_modules()}
    assert {"topic_runtime", "transcript", "effects", "connector", "history_overlap"} <= names


@pytest.mark.parametrize("module", _core_modules(), ids=lambda p: str(p.relative_to(CORE)))
def test_core_module_does_no_io(module: Path) -> None:
    assert _violations(module.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import trio\n", ["line 1: imports trio"]),
        ("def f():\n    import apsw\n", ["line 2: imports apsw"]),
        ("from socket import socket\n", ["line 1: imports socket"]),
        ("import os.path\n", ["line 1: imports os.path"]),
        ("from hostd.shell import daemon\n", ["line 1: imports hostd.shell (above the core)"]),
        ("x = open('f')\n", ["line 1: calls open()"]),
        ("from pathlib import Path\nPath('a').read_text()\n", ["line 2: calls read_text()"]),
        ("self.approvals.open()\n", []),
    ],
)
def test_the_check_catches_io(source: str, expected: list[str]) -> None:
    assert _violations(source) == expected

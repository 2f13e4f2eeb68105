"""Secrets by reference: `${NAME}` (or VS Code's `${env:NAME}`) in a driver option stands for
the value of the variable NAME, which the daemon passes to that driver's environment only
(`DriverSpec.secret_options`). The one definition of the syntax, for the daemon and drivers."""

from __future__ import annotations

import re
from typing import Any

__all__ = ["SECRET_REF", "references"]

#: `${NAME}` or `${env:NAME}`; group 1 is NAME.
SECRET_REF = re.compile(r"\$\{(?:env:)?([A-Za-z_][A-Za-z0-9_]*)\}")


def references(value: Any) -> set[str]:
    """The names referred to in `value`: a string, or any nesting of lists and maps of them
    (map keys are not looked at)."""
    out: set[str] = set()
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            out.update(m.group(1) for m in SECRET_REF.finditer(item))
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return out

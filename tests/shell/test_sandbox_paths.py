"""What a confined driver's interpreter needs to see: every folder it imports our packages from.

A checkout under /tmp or the user's home (both hidden in the sandbox) once left the drivers
unable to import themselves inside it: setuptools' editable installs keep their source folders
in an `__editable___*_finder` module's MAPPING, not on `sys.path`.
"""

from __future__ import annotations

import importlib.util
import os
import sys

import pytest

from hostd.shell.drivers.sandbox import interpreter_paths


@pytest.mark.parametrize(
    "module", ["hostd", "hostd_protocol", "hostd_scripted", "hostd_claude_code"]
)
def test_every_package_a_driver_imports_is_under_a_visible_folder(module: str) -> None:
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin
    where = os.path.realpath(os.path.dirname(spec.origin))
    visible = [os.path.realpath(p) for p in interpreter_paths(sys.executable)]
    assert any(where == p or where.startswith(p + os.sep) for p in visible), (where, visible)

"""The conformance suite as a pytest plugin, used the way a driver author uses it: pytest run
in a subprocess on a small driver project of its own, with nothing of hostd's test suite.

The project is "installed" in a throwaway virtual environment: a `.pth` file adds this
environment's site-packages (hostd, pytest; the plugin comes through hostd's `pytest11` entry
point) and the project folder, which holds the driver package and its dist-info (so its
`hostd.drivers` entry point is found like a pip-installed one's). The driver starts as
`python -I -m echo_driver`, as every driver does.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import trio

pytestmark = pytest.mark.e2e

DRIVER = '''
import trio

from hostd_protocol.common import TextDelta
from hostd_protocol.driver_harness import DriverBase, run_driver


class Echo(DriverBase):
    name = "echo-test"

    async def run_turn(self, turn):
        text = turn.send.text
        if text.startswith("Count"):
            await turn.chunk(TextDelta("1 "))
            await trio.sleep_forever()  # until the host interrupts
        await turn.chunk(TextDelta(text))


run_driver(Echo())
'''

SPEC = '''
from hostd_protocol.driver_spec import DriverSpec

SPEC = DriverSpec(name="echo-test", module="echo_driver")
'''

TEST = '''
def test_echo(hostd_conformance):
    hostd_conformance.run()


def test_plain():
    """A test that does not ask for the suite runs as it always does."""
'''

CONFTEST = '''
import pytest

from hostd.testing.conformance import ConformanceProfile


@pytest.fixture
def hostd_conformance_profile():
    return ConformanceProfile(
        driver="echo-test", turn_text="hi", long_turn_text="Count!", handshake_timeout=10.0,
        turn_timeout=10.0,
    )
'''


def _project(root: Path, *, conftest: bool) -> Path:
    """A driver author's checkout, installed into its own virtual environment."""
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = Path(
        sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)})
    )
    ours = sysconfig.get_path("purelib")
    proj = root / "echo-driver"
    (proj / "echo_driver").mkdir(parents=True)
    (proj / "echo_driver" / "__init__.py").write_text("")
    (proj / "echo_driver" / "__main__.py").write_text(DRIVER)
    (proj / "echo_driver" / "spec.py").write_text(SPEC)
    info = proj / "echo_driver-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: echo-driver\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[hostd.drivers]\necho-test = echo_driver.spec:SPEC\n")
    (site / "echo_driver_env.pth").write_text(f"import site; site.addsitedir({ours!r})\n{proj}\n")
    (proj / "tests").mkdir()
    (proj / "tests" / "test_conformance.py").write_text(TEST)
    if conftest:
        (proj / "tests" / "conftest.py").write_text(CONFTEST)
    return venv / "bin" / "python"


async def _pytest(python: Path, cwd: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTHON"))}
    with trio.fail_after(120):
        done = await trio.run_process(
            [str(python), "-m", "pytest", "-p", "no:cacheprovider", "-rs", *args],
            cwd=cwd, env=env, capture_stdout=True, stderr=subprocess.STDOUT, check=False,
        )
    return done.stdout.decode()


def _summary(out: str) -> str:
    return out.strip().splitlines()[-1]


async def test_an_option_runs_the_suite_against_an_installed_driver(tmp_path: Path) -> None:
    python = await trio.to_thread.run_sync(lambda: _project(tmp_path, conftest=False))
    proj = tmp_path / "echo-driver"
    out = await _pytest(python, proj, "--hostd-driver", "echo-test", "-v")
    # One test per check; the default profile drives no garbage and no slow start.
    for check in ("handshake", "one_turn", "interrupt", "crash_mid_turn", "bad_input"):
        assert f"tests/test_conformance.py::test_echo[{check}] PASSED" in out, out
    assert "test_echo[garbage_on_stdout] SKIPPED" in out
    assert re.match(r"^=+ 6 passed, 2 skipped in ", _summary(out)), out

    # Without the option or a profile fixture: a clear failure, not a hang or a crash.
    out = await _pytest(python, proj, "-k", "handshake")
    assert (
        "hostd_conformance: define a `hostd_conformance_profile` fixture returning a "
        "ConformanceProfile, or pass --hostd-driver NAME" in out
    ), out
    assert re.match(r"^=+ 7 deselected, 1 error in ", _summary(out)), out

    # A driver that is not installed: its name and the installed ones, in one line.
    out = await _pytest(python, proj, "--hostd-driver", "echo-tset", "-k", "handshake")
    assert ("hostd_conformance: no driver named 'echo-tset' is installed (did you mean "
            "'echo-test'?) (installed: ") in out, out
    assert "Traceback" not in out and "During handling" not in out


async def test_a_profile_fixture_drives_the_driver_its_own_way(tmp_path: Path) -> None:
    python = await trio.to_thread.run_sync(lambda: _project(tmp_path, conftest=True))
    proj = tmp_path / "echo-driver"
    out = await _pytest(python, proj, "-v")
    assert "test_echo[one_turn] PASSED" in out, out
    assert re.match(r"^=+ 6 passed, 2 skipped in ", _summary(out)), out

    # The plugin can be turned off; then nothing provides the fixture.
    out = await _pytest(python, proj, "-p", "no:hostd-conformance", "-k", "echo")
    assert "fixture 'hostd_conformance' not found" in out, out

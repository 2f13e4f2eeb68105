"""The driver conformance suite as a pytest plugin, for driver authors' own test suites.

Installed with hostd (entry point `pytest11`, name `hostd-conformance`; `pip install
hostd[testing]` brings pytest). A driver's repository needs one test::

    def test_conformance(hostd_conformance):
        hostd_conformance.run()

and says which driver to check, either with a fixture (in conftest.py or that module)::

    @pytest.fixture
    def hostd_conformance_profile():
        return ConformanceProfile(driver="echo", turn_text="hello", crash_text="/crash")

or, for an installed driver driven with the default profile, an option:
`pytest --hostd-driver echo` (or `hostd_driver = "echo"` in the pytest ini options).

The test becomes one test per check (`test_conformance[handshake]`, `[one_turn]`, ...); a
check the profile cannot drive is skipped. Each check runs in its own `trio.run`, so the test
is a plain function: no async plugin or mode is needed (under pytest-trio, `await
hostd_conformance.arun()` in an async test works too).

Rules this module guards: pytest loads it in every run of an environment where hostd is
installed, so it imports nothing but pytest until a test asks for `hostd_conformance`, and it
adds no test by itself (`-p no:hostd-conformance` turns it off altogether).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from hostd.testing.conformance import Check, ConformanceProfile

__all__ = ["ConformanceCheck"]

_HELP = "run the hostd driver conformance suite against this installed driver"


@dataclass(frozen=True)
class ConformanceCheck:
    """One check of the suite, bound to a profile and a scratch directory."""

    check: Check
    profile: ConformanceProfile
    workdir: Path

    @property
    def name(self) -> str:
        return _check_id(self.check)

    def run(self, workdir: Path | None = None) -> None:
        """Run the check to its end (in a `trio.run` of its own)."""
        import trio

        trio.run(self.check, self.profile, workdir or self.workdir)

    async def arun(self, workdir: Path | None = None) -> None:
        """The same, inside a running trio test."""
        await self.check(self.profile, workdir or self.workdir)


def _check_id(check: Check) -> str:
    return check.__name__.removeprefix("check_")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("hostd", "hostd driver conformance")
    group.addoption("--hostd-driver", metavar="NAME", default=None, help=_HELP)
    parser.addini("hostd_driver", help=_HELP, default="")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "hostd_conformance" in metafunc.fixturenames:
        from hostd.testing.conformance import CHECKS

        metafunc.parametrize("hostd_conformance", CHECKS, ids=_check_id, indirect=True)


@pytest.fixture
def hostd_conformance_profile(pytestconfig: pytest.Config) -> ConformanceProfile:
    """The profile the suite drives: the default one for `--hostd-driver NAME`. Define a
    fixture of this name to drive your driver your way (see `ConformanceProfile`)."""
    from hostd.shell.drivers.registry import DriverRegistry
    from hostd.testing.conformance import ConformanceProfile
    from hostd_protocol.errors import HostdError

    name = pytestconfig.getoption("hostd_driver") or pytestconfig.getini("hostd_driver")
    if not name:
        pytest.fail(
            "hostd_conformance: define a `hostd_conformance_profile` fixture returning a "
            "ConformanceProfile, or pass --hostd-driver NAME",
            pytrace=False,
        )
    registry = DriverRegistry.discover()
    problem = ""
    try:
        registry.get(str(name))
    except HostdError as exc:  # a typo or a driver not installed: one line, not 7 tracebacks
        problem = str(exc)
    if problem:
        pytest.fail(f"hostd_conformance: {problem}", pytrace=False)
    return ConformanceProfile(driver=str(name), registry=registry)


@pytest.fixture
def hostd_conformance(
    request: pytest.FixtureRequest, hostd_conformance_profile: ConformanceProfile, tmp_path: Path
) -> ConformanceCheck:
    """One check of the conformance suite (tests asking for it run once per check)."""
    return ConformanceCheck(request.param, hostd_conformance_profile, tmp_path)

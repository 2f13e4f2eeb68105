"""Suite-wide settings.

The whole suite runs on two pytest-xdist workers (scripts/test): each test file is one unit of
work (scheduled whole on one worker, so a module's daemon, browser or Xvfb is started once, as
before), and files that share something outside their own temporary folders are one unit between
them (`SHARED`), run one after another on one worker.

Hypothesis runs derandomized under CI (CI=true), so a red CI run reproduces locally with
`CI=true scripts/test`; developers get fresh random examples every run.
"""

from __future__ import annotations

import os
import signal

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", deadline=None)
settings.load_profile("ci" if os.environ.get("CI") == "true" else "dev")


def pytest_configure(config: object) -> None:
    """Give the suite a terminal's Ctrl-C. A shell without job control starts a background
    command (`scripts/test &`, also `nohup`) with SIGINT ignored, and every process the
    suite starts inherits that: `hostd attach` then rightly ignores the Ctrl-C the e2e tests
    send it (a background job must), and those tests hang until their deadline. A handled
    signal is reset to its default on exec, so restoring Python's handler here gives every
    child the disposition a terminal's foreground command has."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


#: Files that use the same thing outside their own temporary folders, one group between them:
#: `npm test` and `npm pack` (its prepack) rebuild protocol/typescript/dist in place, the page's
#: `tsc --noEmit` reads that dist's type files, `scripts/package` (the wheels) runs the page build
#: hook over both, and `scripts/test` (tests/test_scripts_test.py) runs `scripts/setup` (uv sync,
#: the npm installs) on the checkout. The two files that add a real second user (`useradd`,
#: `userdel`) share the machine's user database, whose lock a concurrent one fails on.
SHARED = {
    "tests/typescript/": "checkout-builds",
    "tests/web/test_page_types.py": "checkout-builds",
    "tests/packaging/test_wheels.py": "checkout-builds",
    "tests/test_scripts_test.py": "checkout-builds",
    "tests/reliability/test_access.py": "user-database",
    "tests/reliability/test_neighbours.py": "user-database",
}


def xdist_group_of(nodeid: str) -> str:
    """The worker group of a test: its file's, or the group of the shared thing it uses."""
    path = nodeid.split("::", 1)[0]
    for prefix, group in SHARED.items():
        if path.startswith(prefix):
            return group
    return path


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """xdist's file scheduling (`--dist loadfile`: a file's tests run on one worker, in order)
    with `xdist_group_of` as the unit. xdist's own `xdist_group` mark cannot do it: its suffix
    on the node id is lost under pytest 9."""
    if config.getvalue("dist") != "loadfile":
        return None  # another mode asked for by name: xdist's own
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return xdist_group_of(nodeid)

    return GroupScheduling(config, log)

"""`scripts/test`, the command CI runs: the `slow` variants are deselected by default and run
with `--slow` or `HOSTD_TEST_SLOW=1` (README "Tests"); an explicit `-m` wins. The whole suite
runs on xdist workers, a file (or the group of files that build in the checkout) a unit."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SLOW = "test_a_fast_long_answer_reaches_both_pages_whole"  # marked slow
BOUNDED = "test_schedule_added_from_the_page_runs_now_into_the_transcript"


def collected(*args: str, slow_env: str | None = None) -> str:
    env = {
        k: v for k, v in os.environ.items() if k not in ("HOSTD_TEST_SLOW", "HOSTD_TEST_WORKERS")
    }
    if slow_env is not None:
        env["HOSTD_TEST_SLOW"] = slow_env
    proc = subprocess.run(
        [str(ROOT / "scripts" / "test"), "--collect-only", "-q", "tests/web/test_browser.py",
         *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_slow_variants_are_deselected_by_default_and_run_on_request() -> None:
    default = collected()
    assert BOUNDED in default and SLOW not in default and "1 deselected" in default
    assert SLOW in collected("--slow")
    assert SLOW in collected(slow_env="1")
    assert SLOW not in collected(slow_env="0")
    only = collected("-m", "slow")
    assert SLOW in only and BOUNDED not in only


def test_a_bad_worker_count_is_said_in_one_line() -> None:
    env = {**os.environ, "HOSTD_TEST_WORKERS": "two"}
    proc = subprocess.run(
        [str(ROOT / "scripts" / "test"), "--collect-only", "-q", "tests/test_layering.py"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.splitlines()[-1] == (
        "test: HOSTD_TEST_WORKERS must be a whole number (0 = no workers), not 'two'"
    )


def test_files_that_build_in_the_checkout_are_one_unit_of_work() -> None:
    from tests.conftest import xdist_group_of

    units = {
        xdist_group_of(nodeid)
        for nodeid in (
            "tests/typescript/test_packed_package.py::test_x",
            "tests/typescript/test_typescript_client.py::test_node_suite",
            "tests/web/test_page_types.py::test_page_typechecks",
            "tests/packaging/test_wheels.py::test_hostd_demo_passes",
            "tests/test_scripts_test.py::test_slow_variants_are_deselected_by_default_and_run_on_request",
        )
    }
    assert len(units) == 1
    assert xdist_group_of("tests/web/test_browser.py::test_a[1]") == "tests/web/test_browser.py"
    assert xdist_group_of("tests/web/test_gateway.py::test_b") != units.pop()

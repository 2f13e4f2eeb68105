"""`scripts/test`, the command CI runs: the `slow` variants are deselected by default and run
with `--slow` or `HOSTD_TEST_SLOW=1` (README "Tests"); an explicit `-m` wins."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SLOW = "test_a_fast_long_answer_reaches_both_pages_whole"  # marked slow
BOUNDED = "test_schedule_added_from_the_page_runs_now_into_the_transcript"


def collected(*args: str, slow_env: str | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "HOSTD_TEST_SLOW"}
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

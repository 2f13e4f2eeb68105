"""`scripts/bench ab`: the before/after command's logic (its order, its merge, its arguments,
its before tree), and one tiny run end to end. Nothing about speed is asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hostd.testing.processes import child_pids
from hostd_dev.bench import ab, before_tree

REPO = Path(__file__).resolve().parents[2]


def test_sides_alternate_abba_so_each_goes_first_every_other_round() -> None:
    assert ab.schedule(3) == [
        (1, "before"),
        (1, "after"),
        (2, "after"),
        (2, "before"),
        (3, "before"),
        (3, "after"),
    ]
    order = [side for _, side in ab.schedule(4)]
    assert order.count("before") == order.count("after") == 4


def _run(side_value: float, met: bool | None, *, check: bool = True) -> dict[str, object]:
    return {
        "results": [
            {
                "scenario": "latency",
                "goal": "g",
                "skipped": None,
                "rows": [
                    {
                        "metric": "p99",
                        "unit": "ms",
                        "values": [side_value],
                        "goal": "<= 2.00 ms",
                        "met": met,
                        "baseline": False,
                    },
                    {
                        "metric": "cpu",
                        "unit": "us",
                        "values": [side_value * 10],
                        "goal": None,
                        "met": None,
                        "baseline": False,
                    },
                ],
                "checks": [{"name": "every chunk", "passed": check, "detail": ""}],
                "notes": ["a note"],
            }
        ]
    }


def test_merge_keeps_every_runs_values_per_side_and_counts_goals_met_per_run() -> None:
    docs = [
        ("before", _run(5.0, False)),
        ("after", _run(1.0, True)),
        ("after", _run(3.0, False)),
        ("before", _run(7.0, False, check=False)),
    ]
    (sc,) = ab.merge(docs)
    assert sc["scenario"] == "latency"
    p99, cpu = sc["rows"]
    assert p99["before"]["values"] == [5.0, 7.0] and p99["after"]["values"] == [1.0, 3.0]
    assert (p99["before"]["median"], p99["after"]["median"]) == (6.0, 2.0)
    assert (p99["before"]["met"], p99["before"]["judged"]) == (0, 2)
    assert (p99["after"]["met"], p99["after"]["judged"]) == (1, 2)
    assert cpu["after"]["judged"] == 0 and ab.met_text(cpu["after"]) == ""
    assert [c["passed"] for c in sc["checks"]["before"]] == [True, False]
    assert sc["notes"] == ["a note"]
    assert ab.change(p99["before"]["median"], p99["after"]["median"]) == "0.33x"
    assert ab.change(0.0, 1.0) == "" and ab.change(None, 1.0) == ""


def test_a_row_only_one_side_has_is_shown_with_a_dash_on_the_other() -> None:
    before = _run(5.0, None)
    after = _run(1.0, None)
    after["results"][0]["rows"].append(  # type: ignore[index]
        {"metric": "new row", "unit": "us", "values": [4.0], "met": None}
    )
    (sc,) = ab.merge([("before", before), ("after", after)])
    new = sc["rows"][-1]
    assert ab.cell(new["before"], "us") == "-" and ab.cell(new["after"], "us") == "4 us"


def test_arguments_pass_through_and_default_to_every_ab_scenario() -> None:
    args, rest = ab.parse_ab_args(
        [
            "--before",
            "main",
            "--runs",
            "2",
            "latency",
            "--scales",
            "100x4",
            "--load-drivers",
            "scripted,bench-load",
        ]
    )
    assert (args.before, args.runs) == ("main", 2)
    assert rest == ["latency", "--scales", "100x4", "--load-drivers", "scripted,bench-load"]
    _, rest = ab.parse_ab_args(["--before", "main", "--quick"])
    assert rest == [*ab.AB_SCENARIOS, "--quick"]


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["latency"], "name the before side"),
        (["--before", "x", "cli"], "ab runs latency"),
        (["--before", "x", "--runs", "0"], "at least 1"),
        (["--before", "x", "latency", "--scales", "3x"], "argument --scales"),
    ],
)
def test_a_bad_command_line_is_one_usage_error(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        ab.parse_ab_args(argv)
    assert exc.value.code == 2
    assert says in capsys.readouterr().err


def test_an_unknown_revision_is_one_line_and_exit_1(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "hostd_dev.bench", "ab", "--before", "no-such-rev-xyz", "latency"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        f"ab: no commit 'no-such-rev-xyz' in {REPO}; name a commit of `git log`"
    ]


def test_a_before_tree_is_reused_only_when_finished_for_that_commit(tmp_path: Path) -> None:
    sha = before_tree.resolve("HEAD", REPO)
    tree = before_tree.tree_dir(sha, REPO, tmp_path)
    assert tree == tmp_path / sha[:12]
    assert not before_tree.is_ready(tree, sha)
    (tree / ".venv" / "bin").mkdir(parents=True)
    before_tree.python_of(tree).symlink_to(sys.executable)
    assert not before_tree.is_ready(tree, sha)  # no stamp: an interrupted set-up
    (tree / ".venv" / before_tree.STAMP).write_text("0" * 40 + "\n")
    assert not before_tree.is_ready(tree, sha)  # another commit's
    (tree / ".venv" / before_tree.STAMP).write_text(sha + "\n")
    assert before_tree.is_ready(tree, sha)


@pytest.mark.e2e
def test_ab_runs_both_sides_alternately_and_writes_both(tmp_path: Path) -> None:
    """The before side here is this checkout's own interpreter behind a wrapper script
    (--before-python): what is checked is the order, which interpreter each side's daemon
    ran on and the merged output."""
    out = tmp_path / "ab.json"
    wrapper = tmp_path / "before-python"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    before = child_pids()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "hostd_dev.bench",
            "ab",
            "--before-python",
            str(wrapper),
            "--runs",
            "2",
            "--json",
            str(out),
            "--markdown",
            str(tmp_path / "ab.md"),
            "--rows",
            "CPU per chunk",
            "latency",
            "--quick",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["order"] == ["1b", "1a", "2a", "2b"]
    assert doc["before"]["python"] == str(wrapper)
    # The before side's daemon and drivers ran through its interpreter, the after side's not.
    assert doc["product_python"] == {"before": [str(wrapper)], "after": [sys.executable]}
    (sc,) = doc["results"]
    assert sc["scenario"] == "latency"
    rows = {r["metric"]: r for r in sc["rows"]}
    for metric in ("3x2 daemon CPU per chunk", "3x2 run-queue wait of daemon (share of the round)"):
        assert rows[metric]["before"]["n"] == rows[metric]["after"]["n"] == 2
    assert all(c["passed"] for side in ("before", "after") for c in sc["checks"][side])
    assert "hostd bench ab" in proc.stdout
    md = (tmp_path / "ab.md").read_text().splitlines()
    assert "| metric | before | after | after / before | goal | met (before) | met (after) |" in md
    shown = [line.split(" | ")[0] for line in md if line.startswith("| 3x2")]
    assert shown == [
        "| 3x2 bare: load driver CPU per chunk",
        "| 3x2 daemon CPU per chunk",
        "| 3x2 load driver CPU per chunk",
    ]
    assert proc.stderr.count("ab: round") == 8  # a start and an end line per side per round
    assert child_pids() - before == set()

"""hostd's modules import down only: no cycles, and no module of one send's path reaches a
module above it (`python -m hostd_dev.import_graph` prints the same check)."""

from __future__ import annotations

from pathlib import Path

import hostd
from hostd_dev.import_graph import LAYERS, cycles, library, module_graph, upward_imports


def test_no_import_cycles() -> None:
    assert cycles(library(module_graph(Path(hostd.__file__).parent, typing_only=False))) == []


def test_the_send_path_calls_down_only() -> None:
    graph = module_graph(Path(hostd.__file__).parent)
    assert all(m in graph for layer in LAYERS for m in layer)
    assert upward_imports(graph) == []


def test_the_check_sees_a_cycle_and_an_upward_import() -> None:
    graph = {"a": {"b"}, "b": {"a"}, "hostd.core.turn": {"hostd.shell.daemon"}}
    graph.setdefault("hostd.shell.daemon", set())
    assert cycles(graph) == [["a", "b"]]
    assert "hostd.core.turn -> hostd.shell.daemon" in upward_imports(graph)


def test_only_the_cli_is_left_out_of_the_cycle_rule() -> None:
    graph: dict[str, set[str]] = {m: set() for m in ("hostd.cli", "hostd.cli.x", "hostd.client.x")}
    assert set(library(graph)) == {"hostd.client.x"}

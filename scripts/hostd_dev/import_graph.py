"""hostd's import graph: cycles, and the layers one send crosses (`python -m hostd_dev.import_graph`).

Reads every module under hostd/ (imports inside functions count: a lazy import is still a
dependency) and checks two rules, exiting 1 when one breaks:

1. No cycles: no hostd module imports (directly or not) a module that imports it back.
   Imports under `if TYPE_CHECKING:` are left out of this rule (they never run; a service
   that holds its owner, like the scheduler's target holding the daemon, may name its type),
   but not out of rule 2; so is the CLI (`hostd.cli`: commands are dispatched by name and
   imported lazily, so a command module may import the dispatcher back; it is an edge, not
   a library layer).
2. One send's modules are layered and calls go down only: `LAYERS` lists them top to
   bottom (the request comes in through the connection to the daemon, the topic host is the
   hub that calls the runtime, the turn machine's executor, the driver session, fan-out and
   store); no module reaches (imports, directly or not) a module of a higher layer. So the
   driver session never calls back into the host, the runtime never into the shell, fan-out
   and store never into the host or the runtime: their news travels as return values,
   channels the host reads, or effects.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

#: One send's modules, top to bottom (docs/design.md "One send, end to end").
LAYERS: tuple[tuple[str, ...], ...] = (
    ("hostd.client.async_client",),
    ("hostd.shell.daemon", "hostd.shell.handlers"),
    ("hostd.shell.connection", "hostd.shell.topic_host", "hostd.shell.topic_driver"),
    (
        "hostd.shell.turns",
        "hostd.shell.drivers.supervisor",
        "hostd.shell.drivers.session",
        "hostd.shell.fanout",
        "hostd.shell.store.store",
    ),
    ("hostd.core.turn", "hostd.core.topic_runtime"),
)


def _type_checking_nodes(tree: ast.Module) -> set[int]:
    """ids of the import nodes under `if TYPE_CHECKING:`."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and (
            (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
            or (isinstance(node.test, ast.Attribute) and node.test.attr == "TYPE_CHECKING")
        ):
            for sub in node.body:
                out.update(id(n) for n in ast.walk(sub))
    return out


def module_graph(package_dir: Path, *, typing_only: bool = True) -> dict[str, set[str]]:
    """module -> the hostd modules it imports (`typing_only=False`: leave out the imports
    under `if TYPE_CHECKING:`)."""
    mods: dict[str, Path] = {}
    for f in sorted(package_dir.rglob("*.py")):
        parts = f.relative_to(package_dir.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        mods[name] = f
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m, f in mods.items():
        tree = ast.parse(f.read_text(encoding="utf-8"))
        skip = set() if typing_only else _type_checking_nodes(tree)
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            graph[m].update(t for t in targets if t in mods and t != m)
    return graph


def library(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The graph without the CLI (see rule 1)."""
    keep = {m for m in graph if m != "hostd.cli" and not m.startswith("hostd.cli.")}
    return {m: graph[m] & keep for m in keep}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp: list[str] = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph)))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def reaches(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for w in graph.get(todo.pop(), ()):
            if w not in seen:
                seen.add(w)
                todo.append(w)
    return seen


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Imports (direct or not) from a module of a layer to a module of a higher layer."""
    out: list[str] = []
    for i, layer in enumerate(LAYERS):
        above = {m for upper in LAYERS[:i] for m in upper}
        for module in layer:
            out.extend(f"{module} -> {m}" for m in sorted(reaches(graph, module) & above))
    return out


def main() -> int:
    import hostd

    graph = module_graph(Path(hostd.__file__).parent)
    found = cycles(library(module_graph(Path(hostd.__file__).parent, typing_only=False)))
    back = upward_imports(graph)
    print(f"{len(graph)} modules, {sum(len(v) for v in graph.values())} imports")
    print("cycles:", "none" if not found else found)
    for i, layer in enumerate(LAYERS):
        print(f"layer {i}:", ", ".join(m.removeprefix("hostd.") for m in layer))
    print("imports up the layers:", "none" if not back else back)
    return 1 if found or back else 0


if __name__ == "__main__":
    sys.exit(main())

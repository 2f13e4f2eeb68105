"""No Python module of the product is over 600 lines (docs/design.md; STYLE.md: one concept
per module, roughly 150-600 lines). A module that grows past it is split by concept, not
trimmed: name the new module for what it holds.

Counted: every `.py` file under `hostd/`, each `drivers/<name>/<package>/`,
`protocol/hostd_protocol/` and `scripts/hostd_dev/`. Tests are not counted here.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 600

#: Where the product's modules live (drivers: every distribution's import package).
SOURCE_DIRS = (
    "hostd",
    "protocol/hostd_protocol",
    "scripts/hostd_dev",
    *(
        str(pkg.relative_to(ROOT))
        for dist in sorted((ROOT / "drivers").iterdir())
        if dist.is_dir()
        for pkg in sorted(dist.iterdir())
        if (pkg / "__init__.py").is_file()
    ),
)

#: Files allowed over the limit, each with the reason. Generated code belongs here (its size
#: follows its source); none is Python today: the generated TypeScript wire types
#: (protocol/typescript/src/protocol.gen.ts) are outside the counted folders.
EXEMPT: dict[str, str] = {}

#: Folders never counted: build output and caches that may sit inside a package.
SKIPPED_PARTS = frozenset({"__pycache__", "node_modules", "build", "dist", ".venv"})


def modules() -> list[Path]:
    found: list[Path] = []
    for folder in SOURCE_DIRS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if not SKIPPED_PARTS.intersection(path.relative_to(ROOT).parts):
                found.append(path)
    return found


def lines_of(path: Path) -> int:
    with path.open("rb") as f:
        return sum(1 for _ in f)


def test_no_module_is_over_600_lines() -> None:
    over = {
        str(path.relative_to(ROOT)): n
        for path in modules()
        if (n := lines_of(path)) > LIMIT and str(path.relative_to(ROOT)) not in EXEMPT
    }
    assert not over, (
        f"modules over {LIMIT} lines (split each by concept, see docs/design.md): "
        + ", ".join(f"{name} ({n})" for name, n in sorted(over.items()))
    )


def test_the_count_sees_every_part_and_the_exemptions_are_real() -> None:
    seen = {str(p.relative_to(ROOT)) for p in modules()}
    for module in (
        "hostd/core/topic_runtime.py",
        "hostd/shell/daemon.py",
        "protocol/hostd_protocol/framing.py",
        "scripts/hostd_dev/import_graph.py",
        "drivers/scripted/hostd_scripted/driver.py",
        "drivers/acp/hostd_acp/driver.py",
    ):
        assert module in seen, module
    assert all((ROOT / name).is_file() for name in EXEMPT), "an exemption names a missing file"

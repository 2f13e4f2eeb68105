"""The TypeScript client (protocol/typescript), checked from pytest so `scripts/test` runs it.

- its generated types equal what `scripts/gen-types.mjs` makes of today's schema;
- its error classes mirror `hostd_protocol.errors` (code and parent code);
- its Node test suite (`npm test`: unit tests, the real daemon with the scripted driver, the
  shared transcript fixtures) passes. The suite starts its own daemons from `HOSTD_BIN`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hostd_protocol.errors import HostdError, error_classes
from hostd_protocol.schema_export import wire_schema_json

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "protocol" / "typescript"
NODE = shutil.which("node")
NPM = shutil.which("npm")

# No skip when Node is missing: scripts/setup installs it, so its absence is a failure.


def _run(argv: list[str], *, timeout: float, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        argv, cwd=PKG, capture_output=True, text=True, timeout=timeout, env=env, check=False
    )
    if proc.returncode != 0:
        pytest.fail(f"{' '.join(argv)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout


def test_generated_types_are_current(tmp_path: Path) -> None:
    schema = tmp_path / "schema.json"
    schema.write_text(wire_schema_json(), encoding="utf-8")
    assert NODE is not None
    _run([NODE, "scripts/gen-types.mjs", "--check", str(schema)], timeout=60)


def test_error_classes_mirror_python() -> None:
    import hostd.client.sync_wire  # noqa: F401  (registers DaemonNotRunning, a client-side error)

    assert NODE is not None
    out = _run(
        [
            NODE,
            "--input-type=module",
            "-e",
            "import { ERROR_CLASSES } from './dist/index.js';"
            "const out = {};"
            "for (const [code, cls] of ERROR_CLASSES) out[code] = Object.getPrototypeOf(cls).code"
            " ?? null;"
            "console.log(JSON.stringify(out));",
        ],
        timeout=60,
    )
    ts = json.loads(out)
    # Errors a client can meet: the wire's (hostd_protocol) and the client's own. Daemon-local
    # ones (e.g. `daemon_running`, raised by `hostd serve`) are registered only when their
    # module happens to be imported by another test, so they are left out on purpose.
    py = {
        code: (cls.__mro__[1].code if issubclass(cls.__mro__[1], HostdError) else None)
        for code, cls in error_classes().items()
        if cls.__module__.startswith(("hostd_protocol", "hostd.client"))
    }
    missing = {code: parent for code, parent in py.items() if ts.get(code, "?") != parent}
    extra = sorted(set(ts) - set(py))
    assert not missing and not extra, (
        "protocol/typescript/src/errors.ts does not mirror hostd_protocol.errors: add a class "
        f"(and an ERROR_CLASSES entry) for each code -> parent code {missing}; "
        f"remove {extra}"
    )


@pytest.mark.e2e
def test_node_suite() -> None:
    """`npm test` in protocol/typescript (real daemons, started by the suite itself)."""
    assert NPM is not None
    env = dict(os.environ, HOSTD_BIN=str(Path(sys.executable).with_name("hostd")))
    _run([NPM, "test", "--silent"], timeout=600, env=env)


@pytest.mark.parametrize("xdg", ["unset", "private", "wide"])
def test_socket_path_matches_the_daemons(tmp_path: Path, xdg: str) -> None:
    """`socketPath()` of hostd-client/node finds the socket where the daemon puts it."""
    import warnings

    from hostd.shell.paths import Paths

    env = {k: v for k, v in os.environ.items() if k not in {"HOSTD_HOME", "XDG_RUNTIME_DIR"}}
    if xdg != "unset":
        run = tmp_path / "xdg"
        run.mkdir(mode=0o700 if xdg == "private" else 0o755)
        run.chmod(0o700 if xdg == "private" else 0o755)
        env["XDG_RUNTIME_DIR"] = str(run)
    saved = dict(os.environ)
    try:
        os.environ.clear()
        os.environ.update(env)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # platformdirs warns when it falls back
            want = str(Paths.default().socket_path)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    assert NODE is not None
    got = subprocess.run(
        [NODE, "--input-type=module", "-e",
         "import { socketPath } from './dist/node/index.js'; console.log(socketPath());"],
        cwd=PKG, env=env, capture_output=True, text=True, timeout=60, check=True,
    ).stdout.strip()
    assert got == want


def test_npm_pack_from_a_fresh_checkout_ships_the_built_package(tmp_path: Path) -> None:
    """A UI author installs the client from a tarball (`npm pack` in protocol/typescript, then
    `npm install hostd-client-*.tgz`): packing a checkout that was never built must build it
    (`prepack`), not ship a package whose `exports` point at no files."""
    assert NPM is not None
    copy = tmp_path / "typescript"
    copy.mkdir()
    for name in ("package.json", "package-lock.json", "tsconfig.json", "README.md"):
        shutil.copy(PKG / name, copy / name)
    shutil.copytree(PKG / "src", copy / "src")
    (copy / "node_modules").symlink_to(PKG / "node_modules")  # typescript, already installed
    proc = subprocess.run(
        [NPM, "pack", "--dry-run", "--json"], cwd=copy, capture_output=True, text=True,
        timeout=300, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    files = {f["path"] for f in json.loads(out[out.index("[") :])[0]["files"]}
    exported = json.loads((PKG / "package.json").read_text())["exports"]
    for entry in exported.values():
        for target in entry.values():
            assert target.removeprefix("./") in files, f"{target} is not in the packed package"

"""The TypeScript package as a user gets it: `npm pack` output installed into an empty Node
project works as its README says. The README's quick start is run as written (taken from the
README, not copied here) against a real daemon and a real `hostd web`, on the machine's
Node.js (20: `ws` passed in), and every relative link of the packed README resolves to a file
inside the package."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from tests.e2e.daemon_proc import start

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "protocol" / "typescript"
NODE = shutil.which("node")
NPM = shutil.which("npm")


def _run(argv: list[str], cwd: Path, timeout: float, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=env, check=False)
    if proc.returncode != 0:
        pytest.fail(f"{' '.join(argv)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout


@pytest.fixture(scope="module")
def tgz(tmp_path_factory: pytest.TempPathFactory) -> Path:
    assert NPM is not None
    out = tmp_path_factory.mktemp("pack")
    _run([NPM, "pack", "--silent", "--pack-destination", str(out)], PKG, timeout=300)
    (packed,) = out.glob("hostd-client-*.tgz")
    return packed


def _readme(tgz: Path) -> tuple[str, set[str]]:
    with tarfile.open(tgz) as tar:
        names = {m.name.removeprefix("package/") for m in tar.getmembers() if m.isfile()}
        member = tar.extractfile("package/README.md")
        assert member is not None
        return member.read().decode(), names


def test_links_in_the_packed_readme_resolve_inside_the_package(tgz: Path) -> None:
    readme, names = _readme(tgz)
    targets = re.findall(r"\]\(([^)\s]+)\)", readme)
    relative = [t.split("#", 1)[0] for t in targets if not re.match(r"[a-z]+:|#", t)]
    broken = [t for t in relative if t.removeprefix("./") not in names]
    assert broken == [], f"links leading out of the package: {broken}"


@pytest.fixture
def home() -> Iterator[Path]:
    # Short: the daemon's socket path must fit in sun_path.
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="hdt", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _quick_start(readme: str) -> str:
    section = readme.split("## Quick start (Node.js)", 1)[1]
    match = re.search(r"```js\n(.*?)```", section, re.S)
    assert match is not None, "the README's quick start has no js block"
    return match.group(1)


async def test_the_readme_quick_start_runs_from_the_packed_package(
    tgz: Path, home: Path, tmp_path: Path
) -> None:
    assert NODE is not None and NPM is not None
    readme, _ = _readme(tgz)
    app = tmp_path / "app"
    app.mkdir()
    (app / "package.json").write_text('{"name": "app", "private": true, "type": "module"}\n')
    # `ws` at the version the package's own tests use (in npm's cache after scripts/setup).
    lock = json.loads((PKG / "package-lock.json").read_text())
    ws = lock["packages"]["node_modules/ws"]["version"]
    _run([NPM, "install", "--no-audit", "--no-fund", "--prefer-offline", str(tgz), f"ws@{ws}"],
         app, timeout=300)
    (app / "quickstart.mjs").write_text(_quick_start(readme))

    daemon = await start(home, "--default-driver", "scripted")
    web = await trio.lowlevel.open_process(
        [sys.executable, "-m", "hostd", "--home", str(home), "web"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )
    try:
        with trio.fail_after(60):
            assert web.stdout is not None
            first = b""
            while not first.endswith(b"\n"):
                chunk = await web.stdout.receive_some(1024)
                assert chunk, "hostd web exited before printing its URL"
                first += chunk
        assert first.startswith(b"hostd web: http://127.0.0.1:")
        env = {"PATH": str(Path(NODE).parent), "HOSTD_HOME": str(home), "HOME": str(tmp_path)}
        with trio.fail_after(120):
            done = await trio.run_process([NODE, "quickstart.mjs"], cwd=app, env=env,
                                          capture_stdout=True, capture_stderr=True, check=False)
        assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()
        out = done.stdout.decode()
    finally:
        web.terminate()
        with trio.fail_after(30):
            await web.wait()
        await daemon.terminate()
    lines = out.splitlines()
    assert lines[0] == "topics now: 0"
    assert "topic list: created From Node" in lines
    assert "sent: started" in lines
    assert "row: user 1 parts" in lines

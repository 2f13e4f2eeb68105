"""The built packages are the whole product: scripts/package's wheels, installed into a fresh
virtual environment (the lock's versions for everything else) and run with no Node.js on PATH,
give a `hostd web` that serves the page through its token cookie, a passing `hostd demo` and
a `hostd drivers` that lists every driver under drivers/."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
UV = REPO / "scripts" / "uv"


@dataclass(frozen=True)
class Installed:
    venv: Path
    env: dict[str, str]  # PATH holds the venv's bin only: no node, npm or checkout tools
    cwd: Path  # outside the checkout, so `python -m hostd` cannot import the sources

    def run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.venv / "bin" / args[0]), *args[1:]], cwd=self.cwd, env=self.env,
            capture_output=True, text=True, timeout=timeout, check=False,
        )


def _uv(*args: str, timeout: float = 600) -> None:
    subprocess.run([str(UV), *args], cwd=REPO, check=True, timeout=timeout,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    root = tmp_path_factory.mktemp("wheels")
    dist, venv, home = root / "dist", root / "venv", root / "home"
    subprocess.run([str(REPO / "scripts" / "package"), "--out", str(dist)], cwd=REPO,
                   check=True, timeout=900, stdout=subprocess.DEVNULL)
    constraints = root / "constraints.txt"
    _uv("export", "--locked", "--quiet", "--all-packages", "--no-emit-workspace", "--no-hashes",
        "--output-file", str(constraints))
    _uv("venv", "--quiet", "--python", sys.executable, str(venv))
    _uv("pip", "install", "--quiet", "--python", str(venv / "bin" / "python"),
        "-c", str(constraints), *map(str, sorted(dist.glob("*.whl"))))
    home.mkdir()
    env = {"PATH": str(venv / "bin"), "HOME": str(home), "LANG": "C.UTF-8"}
    assert shutil.which("node", path=env["PATH"]) is None
    yield Installed(venv, env, root)


def test_the_installed_hostd_is_the_wheel(installed: Installed) -> None:
    proc = installed.run("python", "-c", "import hostd, hostd_protocol; print(hostd.__file__)")
    assert proc.returncode == 0, proc.stderr
    assert Path(proc.stdout.strip()).is_relative_to(installed.venv)


def test_hostd_drivers_lists_every_driver(installed: Installed) -> None:
    expected = set()
    for toml in REPO.glob("drivers/*/pyproject.toml"):
        project = tomllib.loads(toml.read_text())["project"]
        expected |= set(project["entry-points"]["hostd.drivers"])
    proc = installed.run("hostd", "--home", str(installed.cwd / "hd"), "drivers")
    assert proc.returncode == 0, proc.stderr
    listed = {line.split()[0] for line in proc.stdout.splitlines()[1:] if line.strip()}
    assert expected <= listed, proc.stdout


def test_hostd_demo_passes(installed: Installed) -> None:
    proc = installed.run("hostd", "demo", timeout=180)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stdout.rstrip().splitlines()[-1].startswith("PASS:")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


def _get(url: str, cookie: str = "") -> tuple[int, dict[str, str], bytes]:
    opener = urllib.request.build_opener(_NoRedirect)
    request = urllib.request.Request(url, headers={"Cookie": cookie} if cookie else {})
    try:
        with opener.open(request, timeout=30) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, dict(exc.headers), exc.read()


def test_hostd_web_serves_the_page_through_the_token_cookie(installed: Installed) -> None:
    web = subprocess.Popen(
        [str(installed.venv / "bin" / "hostd"), "--home", str(installed.cwd / "hw"), "web"],
        cwd=installed.cwd, env=installed.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert web.stdout is not None
        url = web.stdout.readline().removeprefix("hostd web: ").strip()
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/\?token=[\w-]+", url), url
        base = url.split("?", 1)[0]

        status, _, _ = _get(base)
        assert status == 401  # no token, no page

        status, headers, _ = _get(url)
        assert status == 303
        cookie = headers["set-cookie"].split(";", 1)[0]

        status, _, body = _get(base, cookie)
        assert status == 200
        page = body.decode()
        scripts = re.findall(r'src="\./(assets/[^"]+\.js)"', page)
        assert scripts, page
        status, _, script = _get(base + scripts[0], cookie)
        assert status == 200 and len(script) > 10_000  # the built page, not a placeholder
    finally:
        web.terminate()
        _, stderr = web.communicate(timeout=30)
    assert "the page is not built" not in stderr

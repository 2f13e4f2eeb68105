"""A repository the user opens is data, never code (issue 14, HIGH 1).

Every installed driver (found through the `hostd.drivers` entry points, so a driver added
later is covered without touching this file) is started by the real supervisor in a working
directory full of planted modules that shadow what a driver imports at start-up (trio,
msgspec, the driver's own package, site hooks), with a daemon environment whose PYTHON*
variables point at more planted code. The driver must complete its handshake and none of the
planted code may run.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from hostd.shell.drivers.registry import DriverRegistry
from hostd.shell.drivers.supervisor import SessionOptions, Supervisor
from hostd.testing.conformance import collect_turn
from hostd_protocol.driver_messages import Send

pytestmark = pytest.mark.e2e

REGISTRY = DriverRegistry.discover()
DRIVERS = sorted(e.spec.name for e in REGISTRY.entries() if e.spec is not None)

#: Names a Python driver imports at start-up, or that Python imports by itself at start-up.
#: What a driver needs to complete its handshake beyond the defaults (a model to talk to).
NEEDS_MODEL = {"openai": "test-model"}

PLANTED = ("trio", "msgspec", "sitecustomize", "usercustomize", "hostd_protocol", "anyio",
           "typing_extensions", "uuid", "struct", "subprocess")


def _plant(where: Path, names: list[str], marker: Path) -> None:
    where.mkdir(parents=True, exist_ok=True)
    for name in names:
        (where / f"{name}.py").write_text(
            f"open({str(marker)!r}, 'a').write({name!r} + ' from {where.name}\\n')\n"
        )


@asynccontextmanager
async def serving(tmp_path: Path, base_env: dict[str, str]) -> AsyncIterator[Supervisor]:
    sup = Supervisor(REGISTRY, base_env=base_env, workdir_root=str(tmp_path / "w"),
                     handshake_timeout=20.0)
    async with trio.open_nursery() as nursery:
        await nursery.start(sup.serve)
        try:
            yield sup
        finally:
            with trio.CancelScope(shield=True):
                await sup.aclose()


def test_every_shipped_driver_is_covered() -> None:
    assert {"scripted", "claude-code"} <= set(DRIVERS)


@pytest.mark.parametrize("driver", DRIVERS)
async def test_planted_modules_in_the_working_dir_do_not_run(
    tmp_path: Path, driver: str
) -> None:
    spec = REGISTRY.get(driver)
    marker = tmp_path / "pwned"
    repo = tmp_path / "repo"
    own = spec.module.split(".")[0]
    _plant(repo, [*PLANTED, own], marker)
    # The driver's own package shadowed by a planted package as well.
    (repo / own).mkdir()
    (repo / own / "__init__.py").write_text(f"open({str(marker)!r}, 'a').write('pkg\\n')\n")
    (repo / own / "__main__.py").write_text(f"open({str(marker)!r}, 'a').write('main\\n')\n")
    # PYTHON* variables of the daemon's environment and a user site under HOME.
    env_dir = tmp_path / "envpath"
    _plant(env_dir, [*PLANTED, own], marker)
    startup = tmp_path / "startup.py"
    startup.write_text(f"open({str(marker)!r}, 'a').write('startup\\n')\n")
    home = tmp_path / "home"
    user_site = home / ".local" / "lib" / "python3.11" / "site-packages"
    _plant(user_site, ["usercustomize", "sitecustomize"], marker)
    base_env = {
        "PATH": os.environ.get("PATH", os.defpath),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "PYTHONPATH": str(env_dir),
        "PYTHONSTARTUP": str(startup),
        "PYTHONUSERBASE": str(home / ".local"),
        "PYTHONINSPECT": "1",
    }
    with trio.fail_after(40):
        async with serving(tmp_path, base_env) as sup:
            session = await sup.open("t1", SessionOptions(
                driver=driver, model=NEEDS_MODEL.get(driver, ""), working_dir=str(repo)))
            assert session.alive
            assert session.driver_version  # it answered Ready: it still imports its own code
            await sup.close("t1")
    assert not marker.exists(), marker.read_text()


async def test_a_turn_in_a_booby_trapped_repository_succeeds(tmp_path: Path) -> None:
    """The scripted driver does a whole turn (its imports are lazy as well as eager)."""

    marker = tmp_path / "pwned"
    repo = tmp_path / "repo"
    _plant(repo, [*PLANTED, "hostd_scripted", "itertools", "json", "asyncio"], marker)
    base_env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": str(tmp_path),
                "PYTHONPATH": str(repo)}
    with trio.fail_after(40):
        async with serving(tmp_path, base_env) as sup:
            session = await sup.open("t1", SessionOptions(driver="scripted",
                                                          working_dir=str(repo)))
            await session.send(Send(turn_id="u1", text="/text hello\nq"))
            end = await collect_turn(session, "u1")
            assert end.end is not None and end.end.status == "success", end
    assert not marker.exists(), marker.read_text()

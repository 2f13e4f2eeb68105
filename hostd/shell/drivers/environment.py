"""What a driver process's environment holds: the few variables every driver gets from the
daemon's (`MINIMAL_ENV`), the ones its spec names, and its secrets. Nothing else reaches it.

What a window may set in a driver's options (the variables an option names, the entries of
a tool's environment table, where the credential's requests go) is
`hostd.shell.drivers.window_options`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

__all__ = ["MINIMAL_ENV", "driver_env"]

#: Variables a driver gets from the daemon's environment without asking: enough to run a
#: Python interpreter and find its packages, nothing that could carry a credential. No
#: PYTHON* variable: drivers run isolated (`DriverSpec.argv`), and a Python child a driver
#: starts must not inherit a path into a planted directory either.
MINIMAL_ENV: tuple[str, ...] = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "LC_MESSAGES",
    "TZ",
    "TMPDIR",
    "TEMP",
    "TMP",
    "SYSTEMROOT",
    "VIRTUAL_ENV",
)


def driver_env(
    needs: Iterable[str], base_env: Mapping[str, str], secrets: Mapping[str, str]
) -> dict[str, str]:
    """The environment of one driver: `MINIMAL_ENV`, the variables its spec names, its secrets.

    A variable the spec names but the daemon does not have is simply absent: the driver
    reports missing credentials itself (`DriverFatal`), with a message that says which.
    """
    env = {name: base_env[name] for name in MINIMAL_ENV if name in base_env}
    env.setdefault("PATH", os.defpath)
    for name in needs:
        if name in base_env:
            env[name] = base_env[name]
    env.update(secrets)
    return env

"""Where hostd keeps its files.

Every path comes from platformdirs (runtime dir for the socket and lock, data dir for the
database, config dir, log dir) unless `HOSTD_HOME=<dir>` (or `--home`) is set, which puts all
of them under one folder: tests use that so they never touch the user's real daemon.

Rules this module guards:

- The runtime dir holds the socket, so it is created 0700 and re-chmodded to 0700 if it
  already existed with a wider mode (a permissive umask must not open it up). A runtime dir
  owned by someone else is refused rather than used.
- AF_UNIX paths are limited to ~104-108 bytes; a too-long socket path is a clear error, not
  an obscure `OSError` from bind.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from hostd_protocol.errors import ConfigError

APP_NAME = "hostd"
HOME_ENV = "HOSTD_HOME"
#: sun_path is 108 bytes on Linux and 104 on macOS, including the terminating NUL.
MAX_SOCKET_PATH = 103


@dataclass(frozen=True)
class Paths:
    """The folders hostd uses; `ensure()` creates them with the right modes."""

    runtime_dir: Path
    data_dir: Path
    config_dir: Path
    log_dir: Path
    #: Set when every path lives under one folder (`HOSTD_HOME` / `--home`).
    home: Path | None = None

    @property
    def socket_path(self) -> Path:
        return self.runtime_dir / "hostd.sock"

    @property
    def lock_path(self) -> Path:
        # Next to the socket: whoever holds the lock owns the socket, which is what makes a
        # leftover socket file safe to replace.
        return self.runtime_dir / "hostd.lock"

    @property
    def db_path(self) -> Path:
        return self.data_dir / "hostd.sqlite3"

    @property
    def log_path(self) -> Path:
        return self.log_dir / "hostd.log"

    @property
    def config_path(self) -> Path:
        return self.config_dir / "config.toml"

    @classmethod
    def under(cls, home: str | os.PathLike[str]) -> Paths:
        """All paths under one folder."""
        root = Path(home).expanduser().absolute()
        return cls(
            runtime_dir=root / "run",
            data_dir=root / "data",
            config_dir=root / "config",
            log_dir=root / "log",
            home=root,
        )

    @classmethod
    def default(cls) -> Paths:
        """The per-user platform folders."""
        import platformdirs  # not at the top: `--home` CLI runs need none of it (start-up time)

        return cls(
            runtime_dir=Path(platformdirs.user_runtime_dir(APP_NAME)),
            data_dir=Path(platformdirs.user_data_dir(APP_NAME)),
            config_dir=Path(platformdirs.user_config_dir(APP_NAME)),
            log_dir=Path(platformdirs.user_log_dir(APP_NAME)),
        )

    @classmethod
    def from_env(
        cls, home: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None
    ) -> Paths:
        """`home` if given, else `$HOSTD_HOME` if set, else the platform folders."""
        if home:
            return cls.under(home)
        value = (os.environ if env is None else env).get(HOME_ENV, "")
        return cls.under(value) if value else cls.default()

    def ensure(self) -> None:
        """Create every folder; the runtime dir is private (0700) whatever the umask, and the
        other folders are created private (existing ones are left as the user set them)."""
        for d in (self.data_dir, self.config_dir, self.log_dir):
            # Private when created (conversations, logs), whatever the umask.
            if not d.exists():
                d.mkdir(parents=True, exist_ok=True)
                os.chmod(d, 0o700)
        ensure_private_dir(self.runtime_dir)
        if len(os.fsencode(self.socket_path)) > MAX_SOCKET_PATH:
            raise ConfigError(
                f"socket path {str(self.socket_path)!r} is longer than {MAX_SOCKET_PATH} bytes, "
                f"the limit of Unix sockets; set {HOME_ENV} to a shorter folder"
            )


def ensure_private_dir(path: Path) -> None:
    """Create `path` (and parents) and make it 0700, owned by us, not a symlink."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise ConfigError(f"{str(path)!r} must be a directory, not a link or a file")
    if st.st_uid != os.getuid():
        raise ConfigError(
            f"{str(path)!r} is owned by uid {st.st_uid}, not by you (uid {os.getuid()}); "
            "refusing to put the hostd socket there"
        )
    if stat.S_IMODE(st.st_mode) != 0o700:
        os.chmod(path, 0o700)

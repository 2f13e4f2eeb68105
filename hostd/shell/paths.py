"""Where hostd keeps its files.

Every path comes from platformdirs (runtime dir for the socket and lock, data dir for the
database, config dir, log dir) unless `HOSTD_HOME=<dir>` (or `--home`) is set, which puts all
of them under one folder: tests use that so they never touch the user's real daemon.

Rules this module guards:

- Another local user must never be able to plant anything hostd trusts. Every hostd folder
  (runtime, data, config, log) must be a real directory (not a link) owned by us; a wider mode
  than 0700 is repaired (it is ours), another owner is refused. Every folder above them must be
  owned by us or root and not writable by others unless sticky (/tmp), or the whole folder
  could be swapped. Files hostd opens (database, log) are opened without following links,
  created 0600 and must be ours (`open_private_file`); files it reads as configuration must be
  ours and writable by nobody else (`read_trusted_text`).
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
    def data_lock_path(self) -> Path:
        # Locks the database itself (the runtime lock only covers one runtime dir).
        return self.data_dir / "hostd.lock"

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
            runtime_dir=default_runtime_dir(),
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
        """Create every folder private (0700) and check it is ours (see the module rules);
        raises `ConfigError` saying what is wrong and what to do."""
        for d in (self.data_dir, self.config_dir, self.log_dir, self.runtime_dir):
            ensure_private_dir(d)
        if len(os.fsencode(self.socket_path)) > MAX_SOCKET_PATH:
            raise ConfigError(
                f"socket path {str(self.socket_path)!r} is longer than {MAX_SOCKET_PATH} bytes, "
                f"the limit of Unix sockets; set {HOME_ENV} to a shorter folder"
            )


_ADVICE = f"point XDG_RUNTIME_DIR / {HOME_ENV} (or --home) at a folder of your own"


def check_ancestors(path: Path) -> None:
    """Every existing folder above `path` is owned by us or root and, unless sticky, not
    writable by group or others (otherwise its owner or those could swap `path`)."""
    me = os.getuid()
    for parent in Path(os.path.abspath(path)).parents:
        try:
            st = os.stat(parent)
        except FileNotFoundError:
            continue
        except OSError as exc:  # not a folder, not ours to look into (/proc/1/root)
            raise ConfigError(
                f"cannot use {str(path)!r}: {str(parent)!r}: {exc.strerror}; {_ADVICE}",
                details={"path": str(parent)},
            ) from None
        if st.st_uid not in (me, 0):
            raise ConfigError(
                f"{str(parent)!r} (above {str(path)!r}) is owned by uid {st.st_uid}, who could "
                f"replace hostd's files; {_ADVICE}",
                details={"path": str(parent), "uid": st.st_uid},
            )
        if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
            raise ConfigError(
                f"{str(parent)!r} (above {str(path)!r}) is writable by others "
                f"({oct(stat.S_IMODE(st.st_mode))}), who could replace hostd's files; {_ADVICE}",
                details={"path": str(parent)},
            )


def default_runtime_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where the socket and lock go (the rules hostd-client's `runtimeDir` mirrors):

    - `$XDG_RUNTIME_DIR/hostd` when XDG_RUNTIME_DIR is an absolute directory of ours with
      mode 0700 (the session's private tmpfs, removed at logout);
    - else `/run/user/<uid>/hostd` when that directory is ours (`/var/run/user/<uid>` on
      FreeBSD/NetBSD, `/tmp/run/user/<uid>` on OpenBSD);
    - else (containers, cron, ssh without logind) `<tmp>/hostd-<uid>`, as tmux does: one
      private folder per user, created 0700 and refused if another user owns it
      (`ensure_private_dir`). platformdirs would answer `/tmp/runtime-<uid>` with a warning
      on every command and leave its mode to the umask;
    - macOS and Windows: platformdirs' per-user folder.
    """
    import sys

    env = os.environ if env is None else env
    if sys.platform == "darwin" or sys.platform.startswith("win"):
        import platformdirs

        return Path(platformdirs.user_runtime_dir(APP_NAME))
    uid = os.getuid()
    xdg = env.get("XDG_RUNTIME_DIR", "")
    if xdg and os.path.isabs(xdg) and _ours(xdg, private=True):
        return Path(xdg) / APP_NAME
    if sys.platform.startswith(("freebsd", "netbsd")):
        base = f"/var/run/user/{uid}"
    elif sys.platform.startswith("openbsd"):
        base = f"/tmp/run/user/{uid}"
    else:
        base = f"/run/user/{uid}"
    if _ours(base, private=False):
        return Path(base) / APP_NAME
    import tempfile

    return Path(tempfile.gettempdir()) / f"{APP_NAME}-{uid}"


def _ours(path: str, *, private: bool) -> bool:
    """A directory owned by us (and with mode 0700 if `private`)."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        return False
    return not private or stat.S_IMODE(st.st_mode) == 0o700


def ensure_private_dir(path: Path) -> None:
    """Create `path` (and parents) and make it 0700, owned by us, not a symlink."""
    check_ancestors(path)
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:  # a file on the way, a read-only or pseudo file system
        raise ConfigError(
            f"cannot create {str(path)!r}: {exc.strerror}; {_ADVICE}", details={"path": str(path)}
        ) from None
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise ConfigError(f"{str(path)!r} must be a directory, not a link or a file; {_ADVICE}")
    if st.st_uid != os.getuid():
        raise ConfigError(
            f"{str(path)!r} is owned by uid {st.st_uid}, not by you (uid {os.getuid()}); "
            f"refusing to use it for hostd's files; {_ADVICE}",
            details={"path": str(path), "uid": st.st_uid},
        )
    if stat.S_IMODE(st.st_mode) != 0o700:
        os.chmod(path, 0o700)


def open_private_file(path: Path, flags: int = os.O_RDWR) -> int:
    """Open (creating it 0600) a file hostd writes: never through a link, ours, a regular file,
    private afterwards. Returns the descriptor; raises `ConfigError`."""
    try:
        fd = os.open(path, flags | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        if os.path.islink(path):
            raise ConfigError(
                f"{str(path)!r} is a symbolic link; hostd never writes through one (remove it)",
                details={"path": str(path)},
            ) from None
        raise ConfigError(f"cannot open {str(path)!r}: {exc}", details={"path": str(path)}) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
            raise ConfigError(
                f"{str(path)!r} is not a regular file of yours (owner uid {st.st_uid}); "
                "remove it",
                details={"path": str(path), "uid": st.st_uid},
            )
        if stat.S_IMODE(st.st_mode) & 0o077:
            os.fchmod(fd, 0o600)
    except BaseException:
        os.close(fd)
        raise
    return fd


def ensure_private_file(path: Path) -> None:
    """`open_private_file` and close: the file exists, is ours and 0600."""
    os.close(open_private_file(path))


def read_trusted_text(path: Path) -> str:
    """A configuration file's text, only if it is ours (or root's) and nobody else can write
    it, read without following a link. Raises `ConfigError` (or `FileNotFoundError`)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if os.path.islink(path):
            raise ConfigError(
                f"{path}: is a symbolic link; hostd reads configuration only from real files",
                details={"file": str(path)},
            ) from None
        raise ConfigError(f"{path}: cannot read: {exc}", details={"file": str(path)}) from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if st.st_uid not in (os.getuid(), 0) or st.st_mode & 0o022:
            raise ConfigError(
                f"{path}: owned by uid {st.st_uid} with mode {oct(stat.S_IMODE(st.st_mode))}: "
                "someone else could have written it; refusing to load it (make it yours and "
                "not writable by others)",
                details={"file": str(path), "uid": st.st_uid},
            )
        data = f.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: cannot read: {exc}", details={"file": str(path)}) from None


def check_database_files(db_path: Path) -> None:
    """The database is ours, 0600, no link; so are its -wal / -shm / -journal if present."""
    ensure_private_file(db_path)
    for suffix in ("-wal", "-shm", "-journal"):
        side = Path(str(db_path) + suffix)
        if os.path.lexists(side):
            ensure_private_file(side)

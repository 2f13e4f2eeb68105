"""Find drivers through the `hostd.drivers` entry point group.

A driver that fails to load is listed as unavailable with the reason; it never stops the
daemon from starting (the pygls / python-lsp-server plugin rule).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points

from hostd_protocol.client_messages import DriverInfo
from hostd_protocol.driver_spec import ENTRY_POINT_GROUP, DriverSpec
from hostd_protocol.errors import AuthRequired, DriverUnavailable

log = logging.getLogger(__name__)

#: The drivers a topic created with no driver, no assistant and no `default` role in
#: roles.toml runs on: the first one that is installed and has a credential. The scripted
#: driver is a test and demo driver (canned answers), so it is never picked silently.
DEFAULT_DRIVER_PREFERENCE: tuple[str, ...] = ("claude-code",)

EnvironOf = Callable[[DriverSpec], Mapping[str, str]]


@dataclass(frozen=True)
class DriverEntry:
    """One discovered driver: its spec when it loaded, else why it did not."""

    name: str
    spec: DriverSpec | None
    reason: str = ""
    distribution: str = ""

    @property
    def available(self) -> bool:
        return self.spec is not None

    def info(self, environ: Mapping[str, str] | None = None) -> DriverInfo:
        """What `hostd drivers` shows. With `environ` (the environment the driver would get),
        the spec's credential check runs too."""
        spec = self.spec
        status = spec.check_credentials(environ) if spec is not None and environ is not None else None
        return DriverInfo(
            name=self.name,
            available=spec is not None,
            description=spec.description if spec else "",
            version=spec.version if spec else "",
            reason=self.reason,
            credential=status.summary if status is not None else "",
            credential_ok=status.ok if status is not None else True,
            fix=(status.fix or status.warning) if status is not None else "",
            modes=list(spec.modes) if spec else [],
            mode_option=spec.mode_option if spec else "",
            mcp_option=spec.mcp_option if spec else "",
            mcp_format=spec.mcp_format if spec else "",
            images=spec.images if spec else False,
            needs_model=spec.needs_model if spec else False,
        )


def _load(ep: EntryPoint) -> DriverEntry:
    dist = ep.dist.name if ep.dist is not None else ""
    try:
        obj = ep.load()
    except Exception as exc:
        reason = f"failed to load {ep.value!r}: {type(exc).__name__}: {exc}"
        log.warning("driver %s unavailable: %s", ep.name, reason)
        return DriverEntry(ep.name, None, reason, dist)
    if callable(obj) and not isinstance(obj, DriverSpec):
        try:
            obj = obj()
        except Exception as exc:
            reason = f"spec factory {ep.value!r} raised {type(exc).__name__}: {exc}"
            log.warning("driver %s unavailable: %s", ep.name, reason)
            return DriverEntry(ep.name, None, reason, dist)
    if not isinstance(obj, DriverSpec):
        reason = f"entry point {ep.value!r} is a {type(obj).__name__}, not a DriverSpec"
        log.warning("driver %s unavailable: %s", ep.name, reason)
        return DriverEntry(ep.name, None, reason, dist)
    return DriverEntry(ep.name, obj, "", dist)


class DriverRegistry:
    """The drivers installed in this environment, loaded once."""

    def __init__(self, entries: dict[str, DriverEntry], group: str | None = None) -> None:
        self._entries = entries
        #: The entry point group to rescan for unknown names (None: a fixed set of specs).
        self._group = group

    @classmethod
    def discover(cls, group: str = ENTRY_POINT_GROUP) -> DriverRegistry:
        entries: dict[str, DriverEntry] = {}
        for ep in entry_points(group=group):
            if ep.name in entries:
                log.warning("driver %s declared twice; keeping the first", ep.name)
                continue
            entries[ep.name] = _load(ep)
        return cls(entries, group)

    @classmethod
    def from_specs(cls, *specs: DriverSpec) -> DriverRegistry:
        return cls({s.name: DriverEntry(s.name, s) for s in specs})

    def rescan(self) -> None:
        """Look at the installed entry points again (a driver installed while the daemon
        runs); drivers already loaded keep their entry. A registry of fixed specs has none."""
        if self._group is None:
            return
        fresh = DriverRegistry.discover(self._group)._entries
        for name, entry in fresh.items():
            self._entries.setdefault(name, entry)

    def entries(self) -> list[DriverEntry]:
        return sorted(self._entries.values(), key=lambda e: e.name)

    def infos(
        self, environ_of: Callable[[DriverSpec], Mapping[str, str]] | None = None
    ) -> list[DriverInfo]:
        """Every driver's info; with `environ_of(spec)`, credential checks run too."""
        return [
            e.info(environ_of(e.spec) if environ_of is not None and e.spec is not None else None)
            for e in self.entries()
        ]

    def takes_images(self, name: str) -> bool:
        """Whether driver `name` hands a message's images to its model (True when unknown
        here: the turn then fails the usual way)."""
        entry = self._entries.get(name)
        return entry is None or entry.spec is None or entry.spec.images

    def get(self, name: str) -> DriverSpec:
        """The spec of driver `name`; raises `DriverUnavailable` saying why and what to do.
        An unknown name makes the registry look at the installed entry points again."""
        entry = self._entries.get(name)
        if entry is None:
            self.rescan()
            entry = self._entries.get(name)
        if entry is None:
            import difflib

            known = ", ".join(sorted(self._entries)) or "none"
            close = difflib.get_close_matches(name, list(self._entries), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            # Installed from wheels there is no checkout: name the installs that work there.
            raise DriverUnavailable(
                f"no driver named {name!r} is installed{hint} (installed: {known}); a driver "
                "of another package goes into hostd's environment: `pipx inject hostd "
                "PACKAGE`, or `pip install PACKAGE` in the environment hostd runs from",
                driver=name,
            )
        if entry.spec is None:
            raise DriverUnavailable(
                f"driver {name!r} is installed but unavailable: {entry.reason}", driver=name
            )
        return entry.spec

    def require_ready(self, name: str, environ_of: EnvironOf) -> DriverSpec:
        """The spec of driver `name` if it can answer: installed, loaded, and (when it has a
        credential check) a credential found. Raises `DriverUnavailable` or `AuthRequired`
        naming the fix."""
        spec = self.get(name)
        status = spec.check_credentials(environ_of(spec))
        if status is not None and not status.ok:
            raise AuthRequired(
                f"driver {name!r} has no credential ({status.summary})"
                + (f": {status.fix}" if status.fix else ""),
                driver=name,
                details={"fix": status.fix},
            )
        return spec

    def pick_default(
        self, environ_of: EnvironOf, preference: tuple[str, ...] = DEFAULT_DRIVER_PREFERENCE
    ) -> str:
        """The driver of a topic that names none: the first of `preference` that is ready.
        When none is, raise the first one's error with where else to turn."""
        first: AuthRequired | DriverUnavailable | None = None
        for name in preference:
            try:
                self.require_ready(name, environ_of)
            except (AuthRequired, DriverUnavailable) as exc:
                first = first or exc
                continue
            return name
        installed = ", ".join(e.name for e in self.entries() if e.available) or "none"
        hint = (
            f"or pick a driver with `hostd new --driver NAME` (installed: {installed}), or set "
            'a default role in roles.toml ([system] default = { driver = "NAME", model = '
            '"MODEL" }; `hostd paths` shows the config dir)'
        )
        if first is None:
            raise DriverUnavailable(f"no default driver is configured; {hint}")
        raise type(first)(
            f"no driver is ready for a new topic: {first.message}; {hint}",
            driver=first.driver,
            # `reason`: the driver's own words without the hint above, for a window that says
            # what to do in its own terms (the web page's Driver list).
            details={
                **{k: v for k, v in first.details.items() if k not in ("driver", "exit_code")},
                "reason": first.message,
            },
        )

"""Find drivers through the `hostd.drivers` entry point group.

A driver that fails to load is listed as unavailable with the reason; it never stops the
daemon from starting (the pygls / python-lsp-server plugin rule).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points

from hostd_protocol.client_messages import DriverInfo
from hostd_protocol.driver_spec import ENTRY_POINT_GROUP, DriverSpec
from hostd_protocol.errors import DriverUnavailable

log = logging.getLogger(__name__)


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

    def info(self) -> DriverInfo:
        spec = self.spec
        return DriverInfo(
            name=self.name,
            available=spec is not None,
            description=spec.description if spec else "",
            version=spec.version if spec else "",
            reason=self.reason,
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

    def __init__(self, entries: dict[str, DriverEntry]) -> None:
        self._entries = entries

    @classmethod
    def discover(cls, group: str = ENTRY_POINT_GROUP) -> DriverRegistry:
        entries: dict[str, DriverEntry] = {}
        for ep in entry_points(group=group):
            if ep.name in entries:
                log.warning("driver %s declared twice; keeping the first", ep.name)
                continue
            entries[ep.name] = _load(ep)
        return cls(entries)

    @classmethod
    def from_specs(cls, *specs: DriverSpec) -> DriverRegistry:
        return cls({s.name: DriverEntry(s.name, s) for s in specs})

    def entries(self) -> list[DriverEntry]:
        return sorted(self._entries.values(), key=lambda e: e.name)

    def infos(self) -> list[DriverInfo]:
        return [e.info() for e in self.entries()]

    def get(self, name: str) -> DriverSpec:
        """The spec of driver `name`; raises `DriverUnavailable` saying why and what to do."""
        entry = self._entries.get(name)
        if entry is None:
            known = ", ".join(sorted(self._entries)) or "none"
            raise DriverUnavailable(
                f"no driver named {name!r} is installed (installed: {known}); install its "
                f"distribution into hostd's environment, e.g. pip install -e drivers/{name}",
                driver=name,
            )
        if entry.spec is None:
            raise DriverUnavailable(
                f"driver {name!r} is installed but unavailable: {entry.reason}", driver=name
            )
        return entry.spec

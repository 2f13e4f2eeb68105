"""When a schedule is due (pure): a 5-field cron expression evaluated in an IANA time zone,
or an interval in seconds counted from the schedule's creation; the due times in a window.

Cron evaluation uses `cronsim`, which follows Debian cron across DST changes: a time skipped
by a spring-forward runs at the first valid minute after the gap, a time repeated by a
fall-back runs once (fixed-time jobs) while minute/hour wildcard jobs run in both copies.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from hostd_protocol.client_messages import ScheduleInfo
from hostd_protocol.errors import InvalidArgument

__all__ = [
    "MISSED_SCAN_CAP",
    "DueWindow",
    "check_cron",
    "describe_time",
    "due_between",
    "next_due_after",
    "zone",
]

#: Missed cron due times counted one by one at most this far; beyond it "at least N".
MISSED_SCAN_CAP = 1_000


@dataclass(frozen=True, slots=True)
class DueWindow:
    """The due times in a half-open span (after, until]: how many, the first and the latest.

    `capped` means a cron schedule had more than `MISSED_SCAN_CAP` of them: `count` is then a
    lower bound.
    """

    count: int = 0
    first: float | None = None
    latest: float | None = None
    capped: bool = False


def zone(name: str) -> ZoneInfo:
    """The IANA time zone `name`.

    Raises:
        InvalidArgument: not a time zone the system's (or tzdata's) database knows.
    """
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise InvalidArgument(
            f"unknown time zone {name!r}; use an IANA name such as UTC or Europe/Berlin",
            details={"tz": name},
        ) from exc


def _cron(expr: str, start: float, tz: ZoneInfo, *, reverse: bool = False) -> CronSim:
    return CronSim(expr, datetime.fromtimestamp(start, tz), reverse=reverse)


def check_cron(expr: str) -> None:
    """Raises InvalidArgument, naming the bad field, when `expr` is not a valid cron line."""
    try:
        CronSim(expr, datetime(2000, 1, 1, tzinfo=UTC))
    except CronSimError as exc:
        raise InvalidArgument(
            f"invalid cron expression {expr!r}: {exc}; use 5 fields: minute hour "
            "day-of-month month day-of-week",
            details={"cron": expr},
        ) from exc


def _first_k_after(anchor: float, step: float, t: float) -> int:
    """The least k >= 1 with anchor + k * step > t, as the due times are computed.

    The division only estimates k: float rounding can put it one off either way, so it is
    corrected against the very products that become due times (next_due_after and
    due_between must agree to the last bit)."""
    k = max(1, math.floor((t - anchor) / step) + 1)
    while k > 1 and anchor + (k - 1) * step > t:
        k -= 1
    while anchor + k * step <= t:
        k += 1
    return k


def next_due_after(info: ScheduleInfo, t: float) -> float | None:
    """The first due time strictly after `t`, or None if there is none (a cron expression that
    matches no date in the next 50 years; cronsim refuses most such lines up front)."""
    if info.every_s > 0:
        return info.created_at + _first_k_after(info.created_at, info.every_s, t) * info.every_s
    try:
        return next(_cron(info.cron, t, zone(info.tz))).timestamp()
    except StopIteration:
        return None


def due_between(info: ScheduleInfo, after: float, until: float) -> DueWindow:
    """The due times of `info` in (after, until]."""
    if until <= after:
        return DueWindow()
    if info.every_s > 0:
        step, anchor = info.every_s, info.created_at
        k_lo = _first_k_after(anchor, step, after)
        k_hi = _first_k_after(anchor, step, until) - 1
        if k_hi < k_lo:
            return DueWindow()
        return DueWindow(k_hi - k_lo + 1, anchor + k_lo * step, anchor + k_hi * step)
    tz = zone(info.tz)
    count, first, latest = 0, None, None
    for dt in _cron(info.cron, after, tz):
        ts = dt.timestamp()
        if ts > until:
            return DueWindow(count, first, latest)
        count += 1
        first = ts if first is None else first
        latest = ts
        if count >= MISSED_SCAN_CAP:
            break
    else:
        return DueWindow(count, first, latest)
    # Too many to count: find the latest one directly, walking back from `until`. Cron has
    # minute resolution, so starting one second after `until` includes `until` itself.
    back = next(_cron(info.cron, until + 1, tz, reverse=True)).timestamp()
    return DueWindow(count, first, back, capped=back != latest)


def describe_time(t: float, tz_name: str) -> str:
    """A due time as a user reads it: local time in the schedule's zone, with its offset."""
    return datetime.fromtimestamp(t, zone(tz_name)).isoformat(timespec="seconds")

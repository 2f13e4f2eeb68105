"""The hostd error tree.

Every error hostd raises or sends over a wire derives from `HostdError` and carries a stable
`code` string. Codes travel in error frames (`ErrorReply.code`, `DriverFatal.code`) so a client
in any language can map a remote failure back to a class; `error_from_code` does that for
Python clients. Codes never change once released; new classes get new codes.

The tree is small on purpose:

- `ProtocolError`: the bytes or messages on a channel are wrong (framing, schema, handshake).
- `TopicError`: a request names a topic that cannot take it (unknown, busy, closed, ...).
- `DriverError`: a driver process failed; carries driver name, exit code and stderr tail.
- `StoreError`: the database could not do what was asked.
- `RequestError`: a request is well formed but cannot be served (unknown request, bad args).
"""

from __future__ import annotations

from typing import ClassVar


class HostdError(Exception):
    """Root of every hostd error.

    Raised only through a subclass. `code` is stable and travels on the wire.
    """

    code: ClassVar[str] = "hostd_error"

    def __init__(self, message: str, *, details: dict[str, object] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details: dict[str, object] = details or {}


# --- protocol ---------------------------------------------------------------------------------


class ProtocolError(HostdError):
    """The peer sent something that breaks the wire protocol.

    Framing errors (`FrameTooLarge`, `MalformedFrame`, `TruncatedFrame`) close the connection:
    after them the byte stream can no longer be trusted. `InvalidMessage` does not: the frame
    boundary is intact, so only that one message is refused.
    """

    code = "protocol_error"


class FrameTooLarge(ProtocolError):
    """A frame header announced, or an encoder produced, a body over the maximum frame size."""

    code = "frame_too_large"


class MalformedFrame(ProtocolError):
    """A frame body is not valid msgpack/JSON at all, so the stream cannot be trusted."""

    code = "malformed_frame"


class TruncatedFrame(ProtocolError):
    """The stream ended in the middle of a frame."""

    code = "truncated_frame"


class InvalidMessage(ProtocolError):
    """A frame decoded, but its content is not a known message of the right shape.

    Raised for an unknown tag, a missing field or a field of the wrong type. If the message
    had a request id, the error reply names it and the connection stays open; without one
    the daemon closes the connection after the error (nothing could be answered by it).
    """

    code = "invalid_message"


class HandshakeError(ProtocolError):
    """The first message was not a handshake, or the handshake was refused."""

    code = "handshake_error"


class VersionMismatch(HandshakeError):
    """The peers speak different protocol major versions. Upgrade the older side."""

    code = "version_mismatch"


class ConnectionClosed(ProtocolError):
    """Our side closed the connection and an operation was attempted on it."""

    code = "connection_closed"


class ConnectionBroken(ProtocolError):
    """The peer went away (EOF, reset, broken pipe) while we still needed it."""

    code = "connection_broken"


class TooManyConnections(ProtocolError):
    """The daemon serves its maximum number of connections; this one is closed. Close some
    windows or clients, then connect again."""

    code = "too_many_connections"


class EventGap(ProtocolError):
    """A window's topic events skipped a `seq` (or the host sent `Resync`): its transcript is
    no longer complete. Reattach with `Attach(since=<last seq>)`, or take a fresh snapshot."""

    code = "event_gap"


class AccessDenied(ProtocolError):
    """The peer is not allowed to talk to this daemon (other uid, bad token)."""

    code = "access_denied"


# --- requests -----------------------------------------------------------------------------------


class RequestError(HostdError):
    """A well-formed request that cannot be served as asked."""

    code = "request_error"


class UnknownRequest(RequestError):
    """The request kind is not one this daemon serves."""

    code = "unknown_request"


class InvalidArgument(RequestError):
    """A request argument is out of range or inconsistent (e.g. empty text, unknown driver).

    A field value the schema does not allow (e.g. an unknown `intent`) is `InvalidMessage`.
    """

    code = "invalid_argument"


class PayloadTooLarge(RequestError):
    """A request carries more than its limit (`hostd_protocol.limits`), or its reply would
    not fit in one frame. Nothing was stored; `details` has `size` and `max` when known."""

    code = "payload_too_large"


class AlreadyAnswered(RequestError):
    """An approval was already answered (by this or another window) or timed out."""

    code = "already_answered"


class NotFound(RequestError):
    """A row, approval or other object named by a request does not exist."""

    code = "not_found"


# --- topics -------------------------------------------------------------------------------------


class TopicError(HostdError):
    """A topic cannot take the request."""

    code = "topic_error"


class UnknownTopic(TopicError):
    """No topic with that id exists (never created, or deleted)."""

    code = "unknown_topic"


class TopicBusy(TopicError):
    """A `start` send arrived while a turn is running. Use `steer`, `queue` or `auto`."""

    code = "topic_busy"


class TopicClosed(TopicError):
    """The topic is being deleted or the daemon is shutting down."""

    code = "topic_closed"


class NotAttached(TopicError):
    """A request needs the connection to be attached to the topic first."""

    code = "not_attached"


class NothingToStop(TopicError):
    """Stop was asked for but no turn is running (a steer on an idle topic starts a turn)."""

    code = "nothing_to_stop"


class PermissionDenied(TopicError):
    """The request's identity (local uid, profile) may not use this topic, or its options name
    a variable of the daemon's environment the local user did not allow (`api_key_env`, see
    `DriverSpec.env_options`). Nothing was stored."""

    code = "permission_denied"


# --- drivers ------------------------------------------------------------------------------------


class DriverError(HostdError):
    """A driver process failed.

    Carries the driver name, its exit code (None if still running or unknown) and the tail of
    its stderr, so the user sees why, not just that it failed.
    """

    code = "driver_error"

    def __init__(
        self,
        message: str,
        *,
        driver: str = "",
        exit_code: int | None = None,
        stderr_tail: str = "",
        details: dict[str, object] | None = None,
    ) -> None:
        merged: dict[str, object] = {"driver": driver, "exit_code": exit_code}
        if stderr_tail:
            merged["stderr_tail"] = stderr_tail
        merged.update(details or {})
        super().__init__(message, details=merged)
        self.driver = driver
        self.exit_code = exit_code
        self.stderr_tail = stderr_tail

    def __str__(self) -> str:
        text = self.message
        if self.exit_code is not None:
            text += f" (exit code {self.exit_code})"
        if self.stderr_tail:
            text += "\n--- driver stderr (tail) ---\n" + self.stderr_tail
        return text


class DriverUnavailable(DriverError):
    """The named driver is not installed, or failed to load. Install it or pick another."""

    code = "driver_unavailable"


class SandboxUnavailable(DriverUnavailable):
    """The topic's sandbox policy cannot be honoured here (bubblewrap missing, user
    namespaces off, a network mode hostd cannot give, a working directory the sandbox would
    hide). The turn is refused; the driver never runs unconfined instead."""

    code = "sandbox_unavailable"


class AuthRequired(DriverError):
    """The driver has no usable credential (not logged in, no API key, key refused). The
    message names the fix; `hostd drivers` shows which credential each driver would use."""

    code = "auth_required"


class DriverCrashed(DriverError):
    """The driver process exited or broke its pipe while it was needed."""

    code = "driver_crashed"


class DriverTimeout(DriverError):
    """The driver did not answer in time (handshake, interrupt, close)."""

    code = "driver_timeout"


class DriverProtocolError(DriverError):
    """The driver wrote something that is not a valid frame or event."""

    code = "driver_protocol_error"


class DriverTurnError(DriverError):
    """The driver reported that the turn failed (vendor error, CLI exit, bad config)."""

    code = "driver_turn_error"


# --- store --------------------------------------------------------------------------------------


class StoreError(HostdError):
    """The database refused a read or write (disk full, read-only, corrupt)."""

    code = "store_error"


class ConfigError(HostdError):
    """A configuration file or setting is invalid; the message names file and line."""

    code = "config_error"


class UnresolvedRole(ConfigError):
    """A `use::<role>` model could not be resolved at any tier (profile role, system role,
    profile default, system default); the message names every tier tried and the roles file."""

    code = "unresolved_role"


class HookError(HostdError):
    """An assistant hook (create / next) could not be loaded, raised, returned something that
    is not a hook result, or delegated deeper than the limit. The turn ends as `error`."""

    code = "hook_error"


class InternalError(HostdError):
    """A bug in hostd. The daemon logged the traceback; please report it."""

    code = "internal_error"


def _all_subclasses(cls: type[HostdError]) -> list[type[HostdError]]:
    out: list[type[HostdError]] = [cls]
    for sub in cls.__subclasses__():
        out.extend(_all_subclasses(sub))
    return out


def error_classes() -> dict[str, type[HostdError]]:
    """Every error class by its code (computed, so subclasses added later are included)."""
    return {cls.code: cls for cls in _all_subclasses(HostdError)}


def error_from_code(
    code: str, message: str, details: dict[str, object] | None = None
) -> HostdError:
    """Rebuild a typed error from a wire error (unknown codes become plain `HostdError`)."""
    cls = error_classes().get(code, HostdError)
    details = dict(details or {})
    if issubclass(cls, DriverError):
        driver = details.pop("driver", "")
        exit_code = details.pop("exit_code", None)
        stderr_tail = details.pop("stderr_tail", "")
        return cls(
            message,
            driver=str(driver or ""),
            exit_code=exit_code if isinstance(exit_code, int) else None,
            stderr_tail=str(stderr_tail or ""),
            details=details,
        )
    err = cls(message, details=details)
    if cls is HostdError and code != HostdError.code:
        err.details["code"] = code
    return err

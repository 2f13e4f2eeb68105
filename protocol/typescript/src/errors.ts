/**
 * The hostd error tree, mirrored from `hostd_protocol.errors` (a test compares the two).
 *
 * Every error a request can fail with is a `HostdError` subclass with a stable `code`; the
 * daemon sends the code in `error` frames and `errorFromCode` maps it back to the class, so
 * `catch (e) { if (e instanceof TopicBusy) ... }` works the same as in Python. Unknown codes
 * (a newer daemon) become a plain `HostdError` whose `code` is the wire code.
 */

/** Root of every hostd error. `code` is stable and travels on the wire. */
export class HostdError extends Error {
  static readonly code: string = "hostd_error";
  /** The wire code (the class's own, or the unknown code a newer daemon sent). */
  readonly code: string;
  readonly details: Record<string, unknown>;

  constructor(message: string, details: Record<string, unknown> = {}, code?: string) {
    super(message);
    this.name = new.target.name;
    this.code = code ?? (new.target as typeof HostdError).code;
    this.details = details;
  }
}

// --- protocol -----------------------------------------------------------------------------

/** The peer sent something that breaks the wire protocol. */
export class ProtocolError extends HostdError {
  static override readonly code: string = "protocol_error";
}
/** A frame header announced, or an encoder produced, a body over the maximum frame size. */
export class FrameTooLarge extends ProtocolError {
  static override readonly code: string = "frame_too_large";
}
/** A frame body is not valid JSON at all, so the stream cannot be trusted. */
export class MalformedFrame extends ProtocolError {
  static override readonly code: string = "malformed_frame";
}
/** The stream ended in the middle of a frame. */
export class TruncatedFrame extends ProtocolError {
  static override readonly code: string = "truncated_frame";
}
/** A frame decoded, but its content is not a known message of the right shape. */
export class InvalidMessage extends ProtocolError {
  static override readonly code: string = "invalid_message";
}
/** The first message was not a handshake, or the handshake was refused. */
export class HandshakeError extends ProtocolError {
  static override readonly code: string = "handshake_error";
}
/** The peers speak different protocol major versions. Upgrade the older side. */
export class VersionMismatch extends HandshakeError {
  static override readonly code: string = "version_mismatch";
}
/** Our side closed the connection and an operation was attempted on it. */
export class ConnectionClosed extends ProtocolError {
  static override readonly code: string = "connection_closed";
}
/** The peer went away (EOF, reset, broken pipe) while we still needed it. */
export class ConnectionBroken extends ProtocolError {
  static override readonly code: string = "connection_broken";
}
/** Nothing listens on the daemon's socket (and autostart was not asked for, or failed). */
export class DaemonNotRunning extends ConnectionBroken {
  static override readonly code: string = "daemon_not_running";
}
/** A window's events skipped a `seq`, or the host sent `resync` (the subscription re-attaches). */
export class EventGap extends ProtocolError {
  static override readonly code: string = "event_gap";
}
/** The daemon serves its maximum number of connections; this one is closed. Close some windows, then connect again. */
export class TooManyConnections extends ProtocolError {
  static override readonly code: string = "too_many_connections";
}
/** The peer is not allowed to talk to this daemon (other uid, bad token). */
export class AccessDenied extends ProtocolError {
  static override readonly code: string = "access_denied";
}

// --- requests -----------------------------------------------------------------------------

/** A well-formed request that cannot be served as asked. */
export class RequestError extends HostdError {
  static override readonly code: string = "request_error";
}
/** The request kind is not one this daemon serves. */
export class UnknownRequest extends RequestError {
  static override readonly code: string = "unknown_request";
}
/** A request argument is out of range or inconsistent (e.g. empty text). */
export class InvalidArgument extends RequestError {
  static override readonly code: string = "invalid_argument";
}
/** A request carries more than its limit, or its reply would not fit in one frame; nothing was stored. */
export class PayloadTooLarge extends RequestError {
  static override readonly code: string = "payload_too_large";
}
/** An approval was already answered (by this or another window) or timed out. */
export class AlreadyAnswered extends RequestError {
  static override readonly code: string = "already_answered";
}
/** A row, approval or other object named by a request does not exist. */
export class NotFound extends RequestError {
  static override readonly code: string = "not_found";
}

// --- topics -------------------------------------------------------------------------------

/** A topic cannot take the request. */
export class TopicError extends HostdError {
  static override readonly code: string = "topic_error";
}
/** No topic with that id exists (never created, or deleted). */
export class UnknownTopic extends TopicError {
  static override readonly code: string = "unknown_topic";
}
/** A `start` send arrived while a turn is running. Use `steer`, `queue` or `auto`. */
export class TopicBusy extends TopicError {
  static override readonly code: string = "topic_busy";
}
/** The topic is being deleted or the daemon is shutting down. */
export class TopicClosed extends TopicError {
  static override readonly code: string = "topic_closed";
}
/** A request needs the connection to be attached to the topic first. */
export class NotAttached extends TopicError {
  static override readonly code: string = "not_attached";
}
/** Stop was asked for but no turn is running. */
export class NothingToStop extends TopicError {
  static override readonly code: string = "nothing_to_stop";
}
/** The request's identity may not use this topic. Nothing was stored. */
export class PermissionDenied extends TopicError {
  static override readonly code: string = "permission_denied";
}

// --- drivers ------------------------------------------------------------------------------

/**
 * A driver process failed. `details` carries `driver`, `exit_code` and `stderr_tail` when the
 * daemon knows them; the getters read them.
 */
export class DriverError extends HostdError {
  static override readonly code: string = "driver_error";
  get driver(): string {
    return typeof this.details["driver"] === "string" ? this.details["driver"] : "";
  }
  get exitCode(): number | null {
    return typeof this.details["exit_code"] === "number" ? this.details["exit_code"] : null;
  }
  get stderrTail(): string {
    return typeof this.details["stderr_tail"] === "string" ? this.details["stderr_tail"] : "";
  }
}
/** The named driver is not installed, or failed to load. Install it or pick another. */
export class DriverUnavailable extends DriverError {
  static override readonly code: string = "driver_unavailable";
}
/** The topic's sandbox policy cannot be honoured here; the turn is refused, never run unconfined. */
export class SandboxUnavailable extends DriverUnavailable {
  static override readonly code: string = "sandbox_unavailable";
}
/** The driver has no usable credential (not logged in, no API key, key refused); the message names the fix. */
export class AuthRequired extends DriverError {
  static override readonly code: string = "auth_required";
}
/** The driver process exited or broke its pipe while it was needed. */
export class DriverCrashed extends DriverError {
  static override readonly code: string = "driver_crashed";
}
/** The driver did not answer in time (handshake, interrupt, close). */
export class DriverTimeout extends DriverError {
  static override readonly code: string = "driver_timeout";
}
/** The driver wrote something that is not a valid frame or event. */
export class DriverProtocolError extends DriverError {
  static override readonly code: string = "driver_protocol_error";
}
/** The driver reported that the turn failed (vendor error, CLI exit, bad config). */
export class DriverTurnError extends DriverError {
  static override readonly code: string = "driver_turn_error";
}

// --- store, config, hooks, bugs -------------------------------------------------------------

/** The database refused a read or write (disk full, read-only, corrupt). */
export class StoreError extends HostdError {
  static override readonly code: string = "store_error";
}
/** A configuration file or setting is invalid; the message names file and line. */
export class ConfigError extends HostdError {
  static override readonly code: string = "config_error";
}
/** A `use::<role>` model could not be resolved at any tier. */
export class UnresolvedRole extends ConfigError {
  static override readonly code: string = "unresolved_role";
}
/** An assistant hook could not be loaded, raised, or returned something invalid. */
export class HookError extends HostdError {
  static override readonly code: string = "hook_error";
}
/** A bug in hostd. The daemon logged the traceback; please report it. */
export class InternalError extends HostdError {
  static override readonly code: string = "internal_error";
}

/** Every error class of this package, by code. */
export const ERROR_CLASSES: ReadonlyMap<string, typeof HostdError> = new Map(
  [
    HostdError,
    ProtocolError,
    FrameTooLarge,
    MalformedFrame,
    TruncatedFrame,
    InvalidMessage,
    HandshakeError,
    VersionMismatch,
    ConnectionClosed,
    ConnectionBroken,
    DaemonNotRunning,
    EventGap,
    AccessDenied,
    TooManyConnections,
    RequestError,
    UnknownRequest,
    InvalidArgument,
    PayloadTooLarge,
    AlreadyAnswered,
    NotFound,
    TopicError,
    UnknownTopic,
    TopicBusy,
    TopicClosed,
    NotAttached,
    NothingToStop,
    PermissionDenied,
    DriverError,
    DriverUnavailable,
    SandboxUnavailable,
    AuthRequired,
    DriverCrashed,
    DriverTimeout,
    DriverProtocolError,
    DriverTurnError,
    StoreError,
    ConfigError,
    UnresolvedRole,
    HookError,
    InternalError,
  ].map((cls) => [cls.code, cls]),
);

/** Rebuild a typed error from a wire error; unknown codes become a `HostdError` with that code. */
export function errorFromCode(
  code: string,
  message: string,
  details: Record<string, unknown> = {},
): HostdError {
  const cls = ERROR_CLASSES.get(code);
  if (cls === undefined) return new HostdError(message, details, code);
  return new cls(message, details);
}

/**
 * The one small interface every transport implements: whole JSON frame bodies in and out.
 *
 * A transport owns the byte-level concerns of its medium (the 4-byte length prefix on a Unix
 * socket; one WebSocket text message per frame body through the `hostd web` gateway) and maps
 * its medium's failures to our errors in one place: `ConnectionBroken` when the peer went away,
 * `FrameTooLarge` / `MalformedFrame` / `TruncatedFrame` when its bytes cannot be trusted.
 */
import type { HostdError } from "./errors.js";

export interface TransportHandlers {
  /** One frame body (UTF-8 JSON text) arrived. */
  frame(body: string): void;
  /** The transport ended, for the reason given (called exactly once, and nothing after it). */
  closed(reason: HostdError): void;
}

export interface Transport {
  /** Start delivering frames (frames that arrived before are delivered first). Called once. */
  start(handlers: TransportHandlers): void;
  /**
   * Send one frame body. Throws `ConnectionClosed` / `ConnectionBroken` once the transport
   * ended, `FrameTooLarge` over `maxFrameSize`.
   */
  send(body: string): void;
  /** Close the connection (idempotent); `closed` is then called with `ConnectionClosed`. */
  close(): void;
}

/** Options shared by the transport factories. */
export interface ConnectOptions {
  /** Abort the connection attempt (rejects with `signal.reason`). */
  signal?: AbortSignal;
  /** Largest frame body accepted or sent (default 8 MiB, the daemon's default). */
  maxFrameSize?: number;
}

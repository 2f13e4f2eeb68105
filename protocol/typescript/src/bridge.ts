/**
 * A transport over a host's JS-to-native bridge, for a page inside a desktop shell's web view
 * (pywebview's `js_api` in `hostd app`; a Tauri command, an Electron preload the same way):
 * the native side holds the daemon connection (its Unix socket, with the daemon's peer-uid
 * check) and passes whole JSON frame bodies, so the page needs neither a socket nor the
 * gateway's WebSocket, and no token.
 *
 * The page wires it: outgoing bodies go to `bridge.send`, which may be asynchronous (bridges
 * often serve each call on a thread of their own, so sends are chained: each starts once the
 * one before it settled, and the socket sees them in order); incoming bodies are handed to
 * `deliver`, and the native side's end of the connection to `end`.
 */
import { ConnectionBroken, ConnectionClosed, FrameTooLarge, type HostdError } from "./errors.js";
import { DEFAULT_MAX_FRAME_SIZE } from "./framing.js";
import type { Transport, TransportHandlers } from "./transport.js";

/** The native side of one daemon connection. */
export interface NativeBridge {
  /** Write one frame body to the daemon connection; a rejection ends the transport. */
  send(body: string): Promise<unknown> | void;
  /** Close the daemon connection (the transport ended on this side). */
  close(): Promise<unknown> | void;
}

const encoder = new TextEncoder();

export class BridgeTransport implements Transport {
  private handlers: TransportHandlers | null = null;
  private early: string[] = [];
  private ended: HostdError | null = null;
  private chain: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly bridge: NativeBridge,
    private readonly maxFrameSize = DEFAULT_MAX_FRAME_SIZE,
  ) {}

  start(handlers: TransportHandlers): void {
    this.handlers = handlers;
    const early = this.early;
    this.early = [];
    for (const body of early) {
      if (this.ended !== null && this.handlers === null) return;
      handlers.frame(body);
    }
    if (this.ended !== null) handlers.closed(this.ended);
  }

  /** One frame body from the native side. */
  deliver(body: string): void {
    if (this.ended !== null) return;
    if (this.handlers === null) this.early.push(body);
    else this.handlers.frame(body);
  }

  /** The native side's connection ended (the daemon closed it, or it could not be kept). */
  end(reason: string | HostdError): void {
    if (this.ended !== null) return;
    this.ended = typeof reason === "string" ? new ConnectionBroken(reason) : reason;
    this.handlers?.closed(this.ended);
  }

  send(body: string): void {
    if (this.ended !== null) throw this.ended;
    if (body.length * 3 > this.maxFrameSize) {
      const size = encoder.encode(body).length;
      if (size > this.maxFrameSize) {
        throw new FrameTooLarge(
          `message of ${size} bytes exceeds the maximum frame size of ${this.maxFrameSize} bytes`,
          { size, max: this.maxFrameSize },
        );
      }
    }
    this.chain = this.chain
      .then(() => (this.ended === null ? this.bridge.send(body) : undefined))
      .catch((exc: unknown) => this.end(exc instanceof Error ? exc.message : String(exc)));
  }

  close(): void {
    if (this.ended !== null) return;
    this.end(new ConnectionClosed("the connection was closed"));
    void Promise.resolve(this.bridge.close()).catch(() => undefined);
  }
}

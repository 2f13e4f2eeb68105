/**
 * The WebSocket transport (browsers, web views), through the `hostd web` gateway.
 *
 * Contract with the gateway: each WebSocket TEXT message carries exactly one JSON frame body,
 * both ways, with no length prefix (the gateway adds and strips it on the daemon side). The URL,
 * including any token the gateway needs, is the page's business: pass it in as is.
 */
import {
  ConnectionBroken,
  ConnectionClosed,
  FrameTooLarge,
  type HostdError,
  MalformedFrame,
} from "./errors.js";
import { DEFAULT_MAX_FRAME_SIZE } from "./framing.js";
import type { ConnectOptions, Transport, TransportHandlers } from "./transport.js";

/** The part of the WHATWG `WebSocket` this transport uses (the browser's, or `ws` in Node). */
export interface WebSocketLike {
  readonly readyState: number;
  binaryType: string;
  send(data: string): void;
  close(code?: number, reason?: string): void;
  addEventListener(type: "open" | "close" | "error" | "message", listener: (ev: never) => void): void;
}

export type WebSocketConstructor = new (url: string) => WebSocketLike;

export interface WebSocketConnectOptions extends ConnectOptions {
  /** The WebSocket class (default: `globalThis.WebSocket`; in Node 20 pass `ws`'s). */
  WebSocket?: WebSocketConstructor;
}

const OPEN = 1;
const encoder = new TextEncoder();

export class WebSocketTransport implements Transport {
  private handlers: TransportHandlers | null = null;
  private early: string[] = [];
  private ended: HostdError | null = null;
  private readonly maxFrameSize: number;

  /** Wrap a WebSocket that is already open. Prefer `connectWebSocket`. */
  constructor(
    private readonly ws: WebSocketLike,
    maxFrameSize = DEFAULT_MAX_FRAME_SIZE,
  ) {
    this.maxFrameSize = maxFrameSize;
    ws.addEventListener("message", (ev: { data: unknown }) => this.onMessage(ev.data));
    ws.addEventListener("close", (ev: { code: number; reason: string }) =>
      this.end(new ConnectionBroken(`the WebSocket closed (code ${ev.code}${ev.reason ? `: ${ev.reason}` : ""})`)),
    );
    ws.addEventListener("error", () => this.end(new ConnectionBroken("the WebSocket failed")));
  }

  start(handlers: TransportHandlers): void {
    this.handlers = handlers;
    const early = this.early;
    this.early = [];
    for (const body of early) {
      if (this.handlers === null) return;
      handlers.frame(body);
    }
    if (this.ended !== null) handlers.closed(this.ended);
  }

  send(body: string): void {
    if (this.ended !== null) throw this.ended;
    if (this.ws.readyState !== OPEN) throw new ConnectionBroken("the WebSocket is not open");
    if (body.length * 3 > this.maxFrameSize) {
      const size = encoder.encode(body).length;
      if (size > this.maxFrameSize) {
        throw new FrameTooLarge(
          `message of ${size} bytes exceeds the maximum frame size of ${this.maxFrameSize} bytes`,
          { size, max: this.maxFrameSize },
        );
      }
    }
    this.ws.send(body);
  }

  close(): void {
    this.end(new ConnectionClosed("the client closed the connection"));
  }

  private onMessage(data: unknown): void {
    if (this.ended !== null) return;
    if (typeof data !== "string") {
      this.fail(new MalformedFrame("the gateway sent a binary WebSocket message; frames are text"));
      return;
    }
    if (data.length > this.maxFrameSize && encoder.encode(data).length > this.maxFrameSize) {
      this.fail(
        new FrameTooLarge(`peer sent a frame over the maximum of ${this.maxFrameSize} bytes`, {
          max: this.maxFrameSize,
        }),
      );
      return;
    }
    if (this.handlers === null) this.early.push(data);
    else this.handlers.frame(data);
  }

  private fail(error: HostdError): void {
    this.end(error);
  }

  private end(reason: HostdError): void {
    if (this.ended !== null) return;
    this.ended = reason;
    try {
      this.ws.close(1000);
    } catch {
      // Already closing: nothing left to release.
    }
    if (this.handlers !== null) this.handlers.closed(reason);
  }
}

/**
 * The URL as an error message shows it: without its query, fragment and credentials, which
 * may hold the gateway's token (`?token=...`), and error messages end up in logs and on screen.
 */
function urlForDisplay(url: string): string {
  try {
    const parsed = new URL(url);
    const hidden = parsed.search || parsed.hash || parsed.username || parsed.password;
    parsed.username = "";
    parsed.password = "";
    parsed.search = "";
    parsed.hash = "";
    return hidden ? `${parsed.toString()} (query hidden)` : parsed.toString();
  } catch {
    return "(an invalid WebSocket URL)";
  }
}

/** Open a WebSocket to the gateway and resolve once it is open. */
export function connectWebSocket(
  url: string,
  options: WebSocketConnectOptions = {},
): Promise<WebSocketTransport> {
  const Ctor =
    options.WebSocket ??
    (globalThis as unknown as { WebSocket?: WebSocketConstructor }).WebSocket;
  if (Ctor === undefined) {
    return Promise.reject(
      new ConnectionBroken("no WebSocket implementation: pass options.WebSocket (e.g. from `ws`)"),
    );
  }
  const { signal } = options;
  if (signal?.aborted) return Promise.reject(signal.reason);
  return new Promise((resolve, reject) => {
    let ws: WebSocketLike;
    try {
      ws = new Ctor(url);
    } catch (exc) {
      // A malformed URL throws here (a SyntaxError quoting the URL, token and all).
      const why = exc instanceof Error ? exc.name : "error";
      reject(new ConnectionBroken(`could not open the WebSocket ${urlForDisplay(url)}: invalid URL (${why})`));
      return;
    }
    let settled = false;
    const onAbort = (): void => {
      if (settled) return;
      settled = true;
      ws.close();
      reject(signal?.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
    ws.addEventListener("open", () => {
      if (settled) return;
      settled = true;
      signal?.removeEventListener("abort", onAbort);
      resolve(new WebSocketTransport(ws, options.maxFrameSize));
    });
    const failed = (why: string): void => {
      if (settled) return;
      settled = true;
      signal?.removeEventListener("abort", onAbort);
      reject(new ConnectionBroken(`could not open the WebSocket ${urlForDisplay(url)}: ${why}`));
    };
    ws.addEventListener("error", (ev: unknown) => failed(openError(ev)));
    ws.addEventListener("close", (ev: { code: number }) => failed(`closed with code ${ev.code}`));
  });
}

/** Why an opening WebSocket failed. A browser says nothing ("connection error"); Node's `ws`
 * names the HTTP answer, and `hostd web` answers 401 to a token that is not its own (an old
 * URL after a restart on another port, or a typo): say what to do then. */
function openError(ev: unknown): string {
  const said = (ev as { message?: unknown } | null)?.message;
  if (typeof said !== "string" || !said) return "connection error";
  if (/\b401\b/.test(said)) {
    return "the gateway refused the token (HTTP 401): use the URL `hostd web` printed, or read it again from `web-url` in the daemon's runtime folder";
  }
  if (/ECONNREFUSED/.test(said)) return "nothing listens there: start `hostd web`, or use the port it printed";
  return said;
}

/**
 * The Unix socket transport (Node.js, Electron's main process): 4-byte big-endian length +
 * UTF-8 JSON body per frame, on the daemon's socket. Node errors are mapped to ours here only.
 */
import { connect, type Socket } from "node:net";

import {
  ConnectionBroken,
  ConnectionClosed,
  DaemonNotRunning,
  HostdError,
  ProtocolError,
} from "../errors.js";
import { bodyText, DEFAULT_MAX_FRAME_SIZE, encodeFrame, FrameDecoder } from "../framing.js";
import type { ConnectOptions, Transport, TransportHandlers } from "../transport.js";

export class UnixSocketTransport implements Transport {
  private handlers: TransportHandlers | null = null;
  private ended: HostdError | null = null;
  private readonly decoder: FrameDecoder;
  private readonly maxFrameSize: number;

  /** Wrap a connected socket. Prefer `connectUnix`. */
  constructor(
    private readonly socket: Socket,
    maxFrameSize = DEFAULT_MAX_FRAME_SIZE,
  ) {
    this.maxFrameSize = maxFrameSize;
    this.decoder = new FrameDecoder(maxFrameSize);
  }

  start(handlers: TransportHandlers): void {
    this.handlers = handlers;
    const socket = this.socket;
    socket.on("data", (data: Buffer) => this.onData(data));
    socket.on("end", () => {
      try {
        this.decoder.close();
        this.end(new ConnectionBroken("hostd closed the connection"));
      } catch (exc) {
        this.end(exc instanceof HostdError ? exc : new ProtocolError(String(exc)));
      }
    });
    socket.on("error", (err: NodeJS.ErrnoException) =>
      this.end(new ConnectionBroken(`connection to hostd lost: ${err.code ?? err.message}`)),
    );
    socket.on("close", () => this.end(new ConnectionBroken("hostd closed the connection")));
  }

  send(body: string): void {
    if (this.ended !== null) throw this.ended;
    this.socket.write(encodeFrame(Buffer.from(body, "utf-8"), this.maxFrameSize));
  }

  close(): void {
    this.end(new ConnectionClosed("the client closed the connection"));
  }

  private onData(data: Buffer): void {
    if (this.ended !== null || this.handlers === null) return;
    let bodies: Uint8Array[];
    try {
      bodies = this.decoder.feed(data);
    } catch (exc) {
      this.end(exc as HostdError);
      return;
    }
    for (const body of bodies) {
      if (this.ended !== null) return;
      let text: string;
      try {
        text = bodyText(body);
      } catch (exc) {
        this.end(exc as HostdError);
        return;
      }
      this.handlers.frame(text);
    }
    // A framing error found after the complete frames of this chunk surfaces now.
    try {
      this.decoder.feed(new Uint8Array(0));
    } catch (exc) {
      this.end(exc as HostdError);
    }
  }

  private end(reason: HostdError): void {
    if (this.ended !== null) return;
    this.ended = reason;
    this.socket.destroy();
    this.handlers?.closed(reason);
  }
}

/**
 * Connect to the daemon's socket; resolves once connected. A missing socket, or one nobody
 * listens on, is `DaemonNotRunning` (its `details.socket` names the path).
 */
export function connectUnix(path: string, options: ConnectOptions = {}): Promise<UnixSocketTransport> {
  const { signal } = options;
  if (signal?.aborted) return Promise.reject(signal.reason);
  return new Promise((resolve, reject) => {
    const socket = connect(path);
    const onAbort = (): void => {
      socket.destroy();
      reject(signal?.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
    socket.once("connect", () => {
      signal?.removeEventListener("abort", onAbort);
      socket.removeAllListeners("error");
      resolve(new UnixSocketTransport(socket, options.maxFrameSize));
    });
    socket.once("error", (err: NodeJS.ErrnoException) => {
      signal?.removeEventListener("abort", onAbort);
      socket.destroy();
      if (err.code === "ENOENT" || err.code === "ECONNREFUSED") {
        reject(
          new DaemonNotRunning(
            `hostd is not running (${err.code} on ${path}); start it with \`hostd serve --detach\``,
            { socket: path },
          ),
        );
      } else {
        reject(new ConnectionBroken(`could not connect to ${path}: ${err.code ?? err.message}`, { socket: path }));
      }
    });
  });
}

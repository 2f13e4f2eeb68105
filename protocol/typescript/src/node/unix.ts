/**
 * The Unix socket transport (Node.js, Electron's main process): 4-byte big-endian length +
 * UTF-8 JSON body per frame, on the daemon's socket. Node errors are mapped to ours here only.
 */
import { existsSync, lstatSync } from "node:fs";
import { connect, type Socket } from "node:net";
import { basename, dirname } from "node:path";

import {
  AccessDenied,
  ConnectionBroken,
  ConnectionClosed,
  DaemonNotRunning,
  HostdError,
  ProtocolError,
} from "../errors.js";
import { bodyText, DEFAULT_MAX_FRAME_SIZE, encodeFrame, FrameDecoder } from "../framing.js";
import type { ConnectOptions, Transport, TransportHandlers } from "../transport.js";
import { SOCKET_NAME } from "./paths.js";

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
 * Refuse a socket another user could have put in our place (a squatted runtime dir): the
 * socket must be ours and its folder ours and not writable by others. (The Python client asks
 * the kernel for the server's uid, SO_PEERCRED; Node cannot, and a file only its owner could
 * create in a folder only its owner can write to is the same guarantee.) Throws `AccessDenied`.
 */
export function checkSocketOwner(path: string): void {
  const uid = process.getuid?.();
  if (uid === undefined) return; // Windows: no uids
  let st;
  try {
    st = lstatSync(path);
  } catch {
    return; // missing: the connect says the daemon is not running
  }
  const refuse = (why: string, details: Record<string, unknown>): never => {
    throw new AccessDenied(
      `${why}; refusing to talk to it. Remove it, or point XDG_RUNTIME_DIR / HOSTD_HOME at a ` +
        "folder of your own",
      { socket: path, ...details },
    );
  };
  if (!st.isSocket()) refuse(`${path} is not a socket`, {});
  if (st.uid !== uid) refuse(`the hostd socket ${path} belongs to uid ${st.uid}, not to you (uid ${uid})`, { uid: st.uid });
  const dir = lstatSync(dirname(path));
  if (dir.uid !== uid || (dir.mode & 0o022) !== 0) {
    refuse(`the folder of the hostd socket ${dirname(path)} is not private to you`, { uid: dir.uid });
  }
}

/** How long a connect into a full listen backlog (`EAGAIN`) is retried (as the Python client). */
const BACKLOG_RETRY_MS = 5000;
/** How long a refused connect is retried while the socket file exists (a daemon about to listen). */
const REFUSED_RETRY_MS = 200;

/**
 * Connect to the daemon's socket; resolves once connected. A missing socket, or one nobody
 * listens on, is `DaemonNotRunning` (its `details.socket` names the path); a socket another
 * user could have planted is `AccessDenied` (`checkSocketOwner`). A full listen backlog, or a
 * refusal while the socket file exists, is retried for a bounded time first.
 */
export async function connectUnix(path: string, options: ConnectOptions = {}): Promise<UnixSocketTransport> {
  const { signal } = options;
  if (signal?.aborted) throw signal.reason;
  checkSocketOwner(path);
  const start = Date.now();
  let delay = 2;
  for (;;) {
    try {
      return await connectOnce(path, options);
    } catch (exc) {
      const code = (exc as { errno?: string }).errno;
      const limit =
        code === "EAGAIN" ? BACKLOG_RETRY_MS : code === "ECONNREFUSED" && existsSync(path) ? REFUSED_RETRY_MS : 0;
      if (Date.now() - start >= limit) throw mapConnectError(exc, path);
      await new Promise((resolve) => setTimeout(resolve, delay));
      delay = Math.min(delay * 2, 50);
      if (signal?.aborted) throw signal.reason;
    }
  }
}

/** What a connect's error codes mean, in words (Node gives only the code). */
const CONNECT_ERRORS: Record<string, string> = {
  ENOTDIR: "not a directory",
  EACCES: "permission denied",
  ENAMETOOLONG: "the path is too long for a Unix socket",
  ENOTSOCK: "not a socket",
};

/** ` --home H` when `path` is `H/run/hostd.sock`, the socket of a daemon started with `--home H`
 * (the platform's folders end in `hostd/hostd.sock` or `hostd-<uid>/hostd.sock`), else "". */
function homeOf(path: string): string {
  const run = dirname(path);
  return basename(path) === SOCKET_NAME && basename(run) === "run" ? ` --home ${dirname(run)}` : "";
}

function mapConnectError(exc: unknown, path: string): unknown {
  const code = (exc as { errno?: string }).errno;
  if (code === undefined) return exc; // the abort reason
  // In a user's words, as the Python clients say it (hostd.client.sync_wire.unreachable).
  if (code === "ENOENT" || code === "ECONNREFUSED") {
    const why = code === "ENOENT" ? "no socket" : "its socket refuses connections: a daemon that stopped without removing it";
    const home = homeOf(path);
    return new DaemonNotRunning(
      `hostd is not running (${why} at ${path}); start it with \`hostd serve --detach${home}\``,
      { socket: path },
    );
  }
  const why = CONNECT_ERRORS[code] ?? code;
  return new ConnectionBroken(
    `cannot reach hostd at ${path}: ${why}; point HOSTD_HOME (or home) at a folder of your own`,
    { socket: path },
  );
}

/** One connect attempt; rejects with `{errno}` (a Node error code) or the abort reason. */
function connectOnce(path: string, options: ConnectOptions): Promise<UnixSocketTransport> {
  const { signal } = options;
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
      reject({ errno: err.code ?? err.message });
    });
  });
}

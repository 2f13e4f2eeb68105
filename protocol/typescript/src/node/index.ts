/**
 * hostd-client/node: the Unix socket transport, the daemon's socket path, and opt-in
 * autostart, for Node.js and Electron's main process. Everything of the browser entry is
 * re-exported, so a Node program imports from here only.
 */
import { execFile } from "node:child_process";

import { Client, type ClientOptions } from "../client.js";
import { DaemonNotRunning, HostdError } from "../errors.js";
import { socketPath } from "./paths.js";
import { connectUnix } from "./unix.js";

export * from "../index.js";
export { runtimeDir, socketPath, HOME_ENV, SOCKET_NAME } from "./paths.js";
export { checkSocketOwner, connectUnix, UnixSocketTransport } from "./unix.js";

export interface AutostartOptions {
  /** The hostd command (default `["hostd"]`, found on PATH), e.g. `["/opt/venv/bin/hostd"]`. */
  command?: readonly string[];
  /** How long to keep trying to connect after starting it (ms, default 30 000). */
  timeoutMs?: number;
}

export interface NodeConnectOptions extends ClientOptions {
  /** The socket to connect to (default: `socketPath(home)`). */
  socketPath?: string;
  /** Like `HOSTD_HOME`: every daemon path under this folder. */
  home?: string;
  /** Start the daemon (`hostd serve --detach`) when nothing listens. Off unless asked for. */
  autostart?: boolean | AutostartOptions;
}

/**
 * Run `hostd serve --detach [--home H]`: it returns once the daemon serves (or says it already
 * runs). Rejects with a one-line `HostdError` carrying hostd's own message when it fails.
 */
export function startDaemon(
  options: AutostartOptions & { home?: string; signal?: AbortSignal } = {},
): Promise<void> {
  const [cmd = "hostd", ...pre] = options.command ?? ["hostd"];
  const args = [...pre, "serve", "--detach", ...(options.home ? ["--home", options.home] : [])];
  return new Promise((resolve, reject) => {
    execFile(
      cmd,
      args,
      { signal: options.signal, timeout: options.timeoutMs ?? 30_000, encoding: "utf-8" },
      (error, stdout, stderr) => {
        if (error === null) return resolve();
        if (options.signal?.aborted) return reject(options.signal.reason);
        const why = (stderr || stdout).trim() || (error as NodeJS.ErrnoException).code || error.message;
        reject(new HostdError(`could not start hostd (${[cmd, ...args].join(" ")}): ${why}`));
      },
    );
  });
}

function delay(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/**
 * Connect to the local daemon over its Unix socket and handshake. With `autostart`, a daemon
 * that is not running is started first; without it that is a `DaemonNotRunning` error.
 */
export async function connect(options: NodeConnectOptions = {}): Promise<Client> {
  const path = options.socketPath ?? socketPath(options.home);
  const { signal } = options;
  let transport;
  try {
    transport = await connectUnix(path, { signal, maxFrameSize: options.maxFrameSize });
  } catch (exc) {
    if (!(exc instanceof DaemonNotRunning) || !options.autostart) throw exc;
    const auto: AutostartOptions = options.autostart === true ? {} : options.autostart;
    const deadline = Date.now() + (auto.timeoutMs ?? 30_000);
    // A daemon that is still shutting down holds its lock a moment after removing its socket
    // ("already running", but nothing to connect to): start and connect again until the deadline.
    for (;;) {
      await startDaemon({ ...auto, home: options.home, signal });
      try {
        transport = await connectUnix(path, { signal, maxFrameSize: options.maxFrameSize });
        break;
      } catch (again) {
        if (!(again instanceof DaemonNotRunning) || Date.now() > deadline) throw again;
        await delay(100, signal);
      }
    }
  }
  return Client.connect(transport, options);
}

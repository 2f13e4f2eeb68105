/** Test helper: a real hostd daemon (`hostd --home H serve --ready-fd 3`) in a temporary home. */
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, openSync, closeSync, rmSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import type { Readable } from "node:stream";

import { Client, connect, socketPath } from "../src/node/index.js";

const pkgRoot = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");

/** The hostd command: `$HOSTD_BIN`, else the repository's .venv, else `hostd` on PATH. */
export function hostdBin(): string {
  const venv = resolve(pkgRoot, "..", "..", ".venv", "bin", "hostd");
  return process.env["HOSTD_BIN"] ?? (existsSync(venv) ? venv : "hostd");
}

export class Daemon {
  private constructor(
    readonly home: string,
    readonly proc: ChildProcess,
  ) {}

  get socketPath(): string {
    return socketPath(this.home);
  }

  /** Start a daemon and resolve once it says it serves. */
  static async start(home?: string): Promise<Daemon> {
    // Short: AF_UNIX paths are limited to ~104 bytes.
    home ??= mkdtempSync("/tmp/hts");
    const log = openSync(join(home, "daemon.log"), "a");
    const proc = spawn(hostdBin(), ["--home", home, "serve", "--ready-fd", "3"], {
      stdio: ["ignore", log, log, "pipe"],
    });
    closeSync(log);
    const ready = proc.stdio[3] as Readable;
    let line = "";
    for await (const chunk of ready) {
      line += String(chunk);
      if (line.includes("\n")) break;
    }
    if (!line.startsWith("ready")) {
      const output = readFileSync(join(home, "daemon.log"), "utf-8");
      throw new Error(`daemon did not start (${JSON.stringify(line)}):\n${output}`);
    }
    return new Daemon(home, proc);
  }

  connect(clientName = "node-test"): Promise<Client> {
    return connect({ home: this.home, clientName });
  }

  /** SIGTERM and wait for the exit (the home is kept). */
  async terminate(): Promise<void> {
    if (this.proc.exitCode === null && this.proc.signalCode === null) {
      const exited = new Promise((resolve) => this.proc.once("exit", resolve));
      this.proc.kill("SIGTERM");
      await exited;
    }
  }

  /** Stop it and start a new daemon on the same home (its replay buffers start empty). */
  async restart(): Promise<Daemon> {
    await this.terminate();
    return Daemon.start(this.home);
  }

  /** Stop it and remove its home. */
  async stop(): Promise<void> {
    await this.terminate();
    rmSync(this.home, { recursive: true, force: true });
  }
}

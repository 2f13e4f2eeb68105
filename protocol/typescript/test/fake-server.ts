/**
 * A fake hostd on a Unix socket, for what the real daemon never does on purpose (garbage
 * frames, every error code, seq gaps). It speaks the real framing; `onMessage` scripts it.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { createServer, type Server, type Socket } from "node:net";
import { join } from "node:path";

import { encodeFrame, FrameDecoder } from "../src/index.js";

export type Message = Record<string, unknown> & { type: string };

export class FakeConnection {
  readonly received: Message[] = [];
  constructor(readonly socket: Socket) {}

  send(msg: object): void {
    this.raw(encodeFrame(new TextEncoder().encode(JSON.stringify(msg))));
  }

  raw(bytes: Uint8Array): void {
    this.socket.write(bytes);
  }
}

export class FakeServer {
  private readonly dir: string;
  private server: Server | null = null;
  readonly connections: FakeConnection[] = [];

  /** `onMessage` answers each decoded client message; by default `hello` gets a welcome. */
  constructor(private readonly onMessage: (msg: Message, conn: FakeConnection) => void) {
    this.dir = mkdtempSync("/tmp/hfk");
  }

  get path(): string {
    return join(this.dir, "hostd.sock");
  }

  async listen(): Promise<this> {
    const server = createServer((socket) => {
      const conn = new FakeConnection(socket);
      this.connections.push(conn);
      const decoder = new FrameDecoder();
      socket.on("data", (data) => {
        for (const body of decoder.feed(data)) {
          const msg = JSON.parse(new TextDecoder().decode(body)) as Message;
          conn.received.push(msg);
          this.onMessage(msg, conn);
        }
      });
      socket.on("error", () => undefined);
    });
    this.server = server;
    await new Promise<void>((resolve) => server.listen(this.path, resolve));
    return this;
  }

  async close(): Promise<void> {
    for (const conn of this.connections) conn.socket.destroy();
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
    rmSync(this.dir, { recursive: true, force: true });
  }
}

export const WELCOME = { type: "welcome", protocol_version: [1, 0], max_frame_size: 8388608 };

/**
 * The WebSocket transport, in Node with `ws` standing in for the browser's WebSocket, through
 * a minimal gateway that follows the `hostd web` contract (one text message = one JSON frame
 * body, both ways; the gateway adds and strips the length prefix) to the REAL daemon.
 * Also: the browser entry imports nothing from Node.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { connect as netConnect } from "node:net";
import { dirname, join, resolve } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";

import { WebSocket, WebSocketServer } from "ws";

import {
  bodyText,
  Client,
  connectWebSocket,
  encodeFrame,
  FrameDecoder,
  MalformedFrame,
  type WebSocketConstructor,
} from "../src/index.js";
import { Daemon } from "./daemon.js";
import { comparable, turnEnded, until } from "./helpers.js";

const WS = WebSocket as unknown as WebSocketConstructor;

/** A test gateway: each WebSocket bridged one-to-one to a daemon connection. */
async function gateway(socketPath: string): Promise<{ url: string; close(): Promise<void> }> {
  const server = new WebSocketServer({ host: "127.0.0.1", port: 0 });
  server.on("connection", (ws) => {
    const sock = netConnect(socketPath);
    const decoder = new FrameDecoder();
    sock.on("data", (data) => {
      for (const body of decoder.feed(data)) ws.send(bodyText(body));
    });
    sock.on("close", () => ws.close());
    sock.on("error", () => ws.close());
    ws.on("message", (data, isBinary) => {
      if (isBinary) return ws.close(1003);
      sock.write(encodeFrame(new Uint8Array(data as Buffer)));
    });
    ws.on("close", () => sock.destroy());
  });
  await new Promise((resolve) => server.once("listening", resolve));
  const { port } = server.address() as { port: number };
  return {
    url: `ws://127.0.0.1:${port}/`,
    close: () =>
      new Promise<void>((resolve) => {
        for (const client of server.clients) client.terminate();
        server.close(() => resolve());
      }),
  };
}

let daemon: Daemon;
let gw: { url: string; close(): Promise<void> };
before(async () => {
  daemon = await Daemon.start();
  gw = await gateway(daemon.socketPath);
});
after(async () => {
  await gw?.close();
  await daemon?.stop();
});

test("over a WebSocket gateway: handshake, create, send, stream, history", async () => {
  const client = await Client.connect(await connectWebSocket(gw.url, { WebSocket: WS }));
  try {
    assert.deepEqual(client.welcome.protocol_version, [1, 7]);
    const topic = await client.createTopic({ driver: "scripted", title: "web" });
    const sub = await client.attach(topic.id);
    await client.send(topic.id, "/text over the web é😀\n/tool Read pause=0");
    await until(sub, turnEnded);
    assert.deepEqual(comparable(sub.transcript!.rows()), comparable(await client.allRows(topic.id)));
    assert.match(JSON.stringify(sub.transcript!.rows()), /over the web é😀/);
  } finally {
    client.close();
  }
});

test("a binary WebSocket message is a MalformedFrame", async () => {
  const server = new WebSocketServer({ host: "127.0.0.1", port: 0 });
  server.on("connection", (ws) => {
    ws.on("message", () => ws.send(Buffer.from([1, 2, 3])));
  });
  await new Promise((resolve) => server.once("listening", resolve));
  const { port } = server.address() as { port: number };
  try {
    await assert.rejects(
      (async () => Client.connect(await connectWebSocket(`ws://127.0.0.1:${port}/`, { WebSocket: WS })))(),
      MalformedFrame,
    );
  } finally {
    server.close();
  }
});

test("a refused WebSocket is a ConnectionBroken naming the URL", async () => {
  await assert.rejects(connectWebSocket("ws://127.0.0.1:9/", { WebSocket: WS }), {
    name: "ConnectionBroken",
    message: /^could not open the WebSocket ws:\/\/127\.0\.0\.1:9\/: nothing listens there: start `hostd web`/,
  });
});

test("a token the gateway refuses (401) says so and what to do, not 'connection error'", async () => {
  const server = new WebSocketServer({ host: "127.0.0.1", port: 0, verifyClient: (_info, done) => done(false, 401) });
  await new Promise((resolve) => server.once("listening", resolve));
  const { port } = server.address() as { port: number };
  try {
    await assert.rejects(connectWebSocket(`ws://127.0.0.1:${port}/ws?token=old`, { WebSocket: WS }), {
      name: "ConnectionBroken",
      message: /: the gateway refused the token \(HTTP 401\): use the URL `hostd web` printed/,
    });
  } finally {
    server.close();
  }
});

test("the browser entry (dist/index.js) imports nothing from Node", () => {
  const dist = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "dist");
  const seen = new Set<string>();
  const visit = (file: string): void => {
    if (seen.has(file)) return;
    seen.add(file);
    const text = readFileSync(file, "utf-8");
    for (const match of text.matchAll(/(?:import|export)[^'"]*from\s*["']([^"']+)["']/g)) {
      const spec = match[1]!;
      assert.ok(spec.startsWith("."), `${file} imports ${spec}`);
      visit(join(dirname(file), spec));
    }
    assert.doesNotMatch(text, /\bprocess\.|\bBuffer\b|require\(/, file);
  };
  visit(join(dist, "index.js"));
  assert.ok(seen.size > 5);
});

test("a refused or malformed WebSocket URL is named without its query (the gateway's token)", async () => {
  const secret = "s3cret-token-value";
  await assert.rejects(connectWebSocket(`ws://127.0.0.1:9/ws?token=${secret}`, { WebSocket: WS }), (exc: Error) => {
    assert.equal(exc.name, "ConnectionBroken");
    assert.match(exc.message, /^could not open the WebSocket ws:\/\/127\.0\.0\.1:9\/ws \(query hidden\): /);
    assert.ok(!exc.message.includes(secret), exc.message);
    return true;
  });
  await assert.rejects(connectWebSocket(`ws://user:${secret}@127.0.0.1:9/ws`, { WebSocket: WS }), (exc: Error) => {
    assert.ok(!exc.message.includes(secret), exc.message);
    return true;
  });
  await assert.rejects(connectWebSocket(`wss://[bad host/ws?token=${secret}`, { WebSocket: WS }), (exc: Error) => {
    assert.equal(exc.name, "ConnectionBroken");
    assert.equal(exc.message, "could not open the WebSocket (an invalid WebSocket URL): invalid URL (SyntaxError)");
    return true;
  });
});

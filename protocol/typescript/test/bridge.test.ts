/**
 * The bridge transport (a desktop shell's JS-to-native bridge): order, early frames, ends.
 * Its end-to-end use (pywebview windows on the real daemon) is tested in tests/app.
 */
import assert from "node:assert/strict";
import { test } from "node:test";

import { BridgeTransport, ConnectionBroken, ConnectionClosed, FrameTooLarge, type HostdError } from "../src/index.js";

function recorder(t: BridgeTransport): { frames: string[]; closed: HostdError[] } {
  const got = { frames: [] as string[], closed: [] as HostdError[] };
  t.start({ frame: (b) => got.frames.push(b), closed: (r) => got.closed.push(r) });
  return got;
}

test("sends reach the native side in order even when its calls settle out of order", async () => {
  const written: string[] = [];
  let n = 0;
  const t = new BridgeTransport({
    // The first call settles last: a bridge serving each call on its own thread.
    send: (body) => new Promise((resolve) => setTimeout(() => { written.push(body); resolve(undefined); }, n++ === 0 ? 30 : 1)),
    close: () => undefined,
  });
  recorder(t);
  for (let i = 0; i < 5; i++) t.send(`{"n":${i}}`);
  await new Promise((resolve) => setTimeout(resolve, 100));
  assert.deepEqual(written, [0, 1, 2, 3, 4].map((i) => `{"n":${i}}`));
});

test("frames delivered before start come first, then the end, once", () => {
  const t = new BridgeTransport({ send: () => undefined, close: () => undefined });
  t.deliver('{"a":1}');
  t.deliver('{"a":2}');
  t.end("the daemon closed the connection");
  t.end("again");
  t.deliver('{"a":3}');
  const got = recorder(t);
  assert.deepEqual(got.frames, ['{"a":1}', '{"a":2}']);
  assert.equal(got.closed.length, 1);
  assert.ok(got.closed[0] instanceof ConnectionBroken);
  assert.throws(() => t.send("{}"), ConnectionBroken);
});

test("a failed native send ends the transport with its message", async () => {
  const t = new BridgeTransport({ send: () => Promise.reject(new Error("the connection is closed")), close: () => undefined });
  const got = recorder(t);
  t.send("{}");
  await new Promise((resolve) => setTimeout(resolve, 10));
  assert.equal(got.closed.length, 1);
  assert.match(got.closed[0]!.message, /the connection is closed/);
});

test("close ends it as closed and closes the native side; a body over the limit is refused", () => {
  let closes = 0;
  const t = new BridgeTransport({ send: () => undefined, close: () => { closes++; } }, 16);
  const got = recorder(t);
  assert.throws(() => t.send(`{"x":"${"é".repeat(20)}"}`), FrameTooLarge);
  t.close();
  t.close();
  assert.equal(closes, 1);
  assert.ok(got.closed[0] instanceof ConnectionClosed);
});

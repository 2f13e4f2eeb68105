import assert from "node:assert/strict";
import { test } from "node:test";

import {
  decodeBody,
  encodeFrame,
  FrameDecoder,
  FrameTooLarge,
  InvalidMessage,
  MalformedFrame,
  TruncatedFrame,
} from "../src/index.js";

const enc = new TextEncoder();
const dec = new TextDecoder();

function frames(...bodies: string[]): Uint8Array {
  const parts = bodies.map((b) => encodeFrame(enc.encode(b)));
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

test("the header is a 4-byte big-endian length", () => {
  assert.deepEqual([...encodeFrame(enc.encode("ab"))], [0, 0, 0, 2, 97, 98]);
});

test("any split of an encoded sequence decodes back, one byte at a time too", () => {
  const bodies = ['{"type":"a"}', "", "é€😀", "x".repeat(5000)];
  const data = frames(...bodies);
  for (const step of [1, 2, 3, 7, 4096, data.length]) {
    const d = new FrameDecoder();
    const got: string[] = [];
    for (let i = 0; i < data.length; i += step) {
      for (const body of d.feed(data.subarray(i, i + step))) got.push(dec.decode(body));
    }
    assert.deepEqual(got, bodies);
    assert.equal(d.buffered, 0);
    d.close();
  }
});

test("a header announcing more than the maximum is refused before the body arrives", () => {
  const d = new FrameDecoder(10);
  assert.throws(() => d.feed(new Uint8Array([0, 0, 0, 11])), {
    name: "FrameTooLarge",
    message: "peer announced a frame of 11 bytes; the maximum is 10 bytes",
  });
  // The decoder stays broken.
  assert.throws(() => d.feed(new Uint8Array([0])), FrameTooLarge);
});

test("frames completed before a framing error are returned first", () => {
  const d = new FrameDecoder(10);
  const data = new Uint8Array([...frames("ok"), 0, 0, 1, 0]);
  assert.deepEqual(d.feed(data).map((b) => dec.decode(b)), ["ok"]);
  assert.throws(() => d.feed(new Uint8Array(0)), FrameTooLarge);
});

test("the encoder refuses an oversized body", () => {
  assert.throws(() => encodeFrame(new Uint8Array(11), 10), FrameTooLarge);
});

test("a stream ending inside a frame is truncated", () => {
  const d = new FrameDecoder();
  d.feed(new Uint8Array([0, 0, 0, 5, 1]));
  assert.throws(() => d.close(), TruncatedFrame);
});

test("garbage bodies are typed errors", () => {
  assert.throws(() => decodeBody("not json"), MalformedFrame);
  assert.throws(() => decodeBody("[1,2]"), InvalidMessage);
  assert.throws(() => decodeBody('{"type":"reply","result":{"type":"empty"}}'), InvalidMessage);
  assert.throws(() => decodeBody('{"type":"row-opened","seq":1}'), InvalidMessage);
  assert.deepEqual(decodeBody('{"type":"future-event","topic_id":"t","seq":3}'), {
    type: "future-event",
    topic_id: "t",
    seq: 3,
  });
});

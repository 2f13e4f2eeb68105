/**
 * Rows a snapshot or history page delivered cut (`meta.truncated`) are made whole with
 * `read-row`: against a fake server (only the head is read, events that arrive meanwhile still
 * apply, characters are code points) and against the real daemon (a 5 MB answer).
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { connect, omittedOf, Transcript, type MessageRow } from "../src/node/index.js";
import { Daemon } from "./daemon.js";
import { FakeServer, type FakeConnection, type Message, WELCOME } from "./fake-server.js";
import { comparable, textOf, until } from "./helpers.js";

async function withServer(
  onMessage: (msg: Message, conn: FakeConnection) => void,
  body: (server: FakeServer) => Promise<void>,
): Promise<void> {
  const server = await new FakeServer((msg, conn) => {
    if (msg.type === "hello") conn.send(WELCOME);
    else onMessage(msg, conn);
  }).listen();
  try {
    await body(server);
  } finally {
    await server.close();
  }
}

/** Stored: thinking "hmm", then the text "😀é-hello world" (😀 is one character, two UTF-16
 * units); the snapshot keeps " world" only: 1 part and 8 characters left out. */
const STORED = [
  { type: "thinking", text: "hmm" },
  { type: "text", text: "😀é-hello world" },
];
const CUT_ROW = {
  id: "big",
  topic_id: "t1",
  role: "assistant",
  status: "pending",
  position: 2,
  meta: { truncated: { omitted_parts: 1, omitted_chars: 8 }, other: 1 },
  parts: [{ type: "text", text: " world" }],
};

test("a cut row in the snapshot is made whole from its head before the snapshot is yielded", async () => {
  const asked: Array<[unknown, unknown]> = [];
  await withServer(
    (msg, conn) => {
      const reply = (result: object) => conn.send({ type: "reply", id: msg["id"], result });
      if (msg.type === "attach") {
        reply({ type: "attached", topic_id: "t1", mode: "snapshot", snapshot: { topic: { id: "t1" }, seq: 4, rows: [CUT_ROW] } });
        // The answer goes on while the window reads the head.
        conn.send({ type: "row-appended", topic_id: "t1", seq: 5, row_id: "big", chunk: { type: "text", text: "!" } });
      } else if (msg.type === "read-row") {
        asked.push([msg["part"] ?? 0, msg["offset"] ?? 0]);
        // The head in two pieces: the thinking part, then the text part (past the cut).
        if (asked.length === 1) {
          reply({ type: "row-content", row_id: "big", parts: [STORED[0]], done: false, next_part: 1, next_offset: 0 });
        } else {
          reply({ type: "row-content", row_id: "big", parts: [STORED[1]], done: true });
        }
      }
    },
    async (server) => {
      const client = await connect({ socketPath: server.path });
      const sub = await client.attach("t1");
      const first = await sub.next();
      assert.equal(first.value?.type, "snapshot");
      const row = sub.transcript!.row("big")!;
      assert.deepEqual(row.parts, STORED);
      assert.deepEqual(row.meta, { other: 1 });
      assert.equal(omittedOf(row), null);
      assert.equal((await sub.next()).value?.type, "row-appended");
      assert.deepEqual(sub.transcript!.row("big")!.parts, [STORED[0], { type: "text", text: "😀é-hello world!" }]);
      assert.deepEqual(asked, [[0, 0], [1, 0]]);
      client.close();
    },
  );
});

test("a cut row that is gone (not_found) stays cut; wholeRows: false reads nothing", async () => {
  let reads = 0;
  await withServer(
    (msg, conn) => {
      const reply = (result: object) => conn.send({ type: "reply", id: msg["id"], result });
      if (msg.type === "attach") {
        reply({ type: "attached", topic_id: "t1", mode: "snapshot", snapshot: { topic: { id: "t1" }, seq: 4, rows: [CUT_ROW] } });
      } else if (msg.type === "read-row") {
        reads += 1;
        conn.send({ type: "error", id: msg["id"], code: "not_found", message: "no row 'big'" });
      } else if (msg.type === "detach") {
        reply({ type: "empty" });
      }
    },
    async (server) => {
      const client = await connect({ socketPath: server.path });
      const sub = await client.attach("t1");
      assert.deepEqual(sub.transcript!.row("big")!.parts, CUT_ROW.parts);
      assert.equal(reads, 1);
      await sub.detach();
      const raw = await client.attach("t1", { wholeRows: false });
      assert.deepEqual(omittedOf(raw.transcript!.row("big")!), { part: 1, chars: 8 });
      assert.equal(reads, 1);
      client.close();
    },
  );
});

test("restoreHead joins a tool output cut in the middle, and refuses a whole row", () => {
  const row = {
    id: "r",
    topic_id: "t",
    role: "assistant",
    status: "success",
    position: 1,
    meta: { truncated: { omitted_parts: 0, omitted_chars: 3 } },
    parts: [{ type: "tool-result", call_id: "c", output: "def" }],
  } as MessageRow;
  const t = new Transcript({ topic: { id: "t" } as never, seq: 1, rows: [row] });
  assert.equal(t.restoreHead("r", [{ type: "tool-result", call_id: "c", output: "abc" }]), true);
  assert.deepEqual(t.row("r")!.parts, [{ type: "tool-result", call_id: "c", output: "abcdef" }]);
  assert.equal(t.restoreHead("r", [{ type: "text", text: "again" }]), false);
  assert.equal(t.restoreHead("nope", []), false);
});

// --- the real daemon -------------------------------------------------------------------------

let daemon: Daemon;
before(async () => {
  daemon = await Daemon.start();
});
after(async () => {
  await daemon?.stop();
});

test("a 5 MB answer: windows (live, late) and allRows hold it whole", async () => {
  const SIZE = 5_000_000;
  const answer = (rows: readonly MessageRow[]) => rows.find((r) => r.role === "assistant");
  const client = await daemon.connect();
  try {
    const topic = await client.createTopic({ title: "big", driver: "scripted" });
    const live = await client.attach(topic.id);
    await client.send(topic.id, `/huge text ${SIZE}\n/wait`);
    // 5 MB of events overflow the window's 4 MiB queue: the host tells it to resync, and the
    // new snapshot delivers the answer cut; the subscription reads the rest.
    await until(live, () => textOf(answer(live.transcript!.rows())).length === SIZE);
    const late = await daemon.connect("late");
    try {
      const raw = await late.attach(topic.id, { wholeRows: false });
      assert.notEqual(omittedOf(answer(raw.transcript!.rows())!), null, "the snapshot delivers it cut");
      await raw.detach();
      const sub = await late.attach(topic.id);
      const row = answer(sub.transcript!.rows())!;
      assert.equal(omittedOf(row), null);
      assert.equal(textOf(row), textOf(answer(live.transcript!.rows())));
      await client.stop(topic.id);
      await until(sub, (item) => item.type === "turn-ended");
      const stored = await late.allRows(topic.id);
      assert.equal(textOf(answer(stored)).length, SIZE);
      assert.deepEqual(comparable([answer(sub.transcript!.rows())!]), comparable([answer(stored)!]));
    } finally {
      late.close();
    }
  } finally {
    client.close();
  }
});

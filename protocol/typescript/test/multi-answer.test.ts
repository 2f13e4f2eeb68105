/**
 * Several answers to one message (protocol 1.1): `send` with `also`, `chooseAnswer`, and the
 * reducer keeping each answer row's own status, usage and `alternative` mark.
 */
import assert from "node:assert/strict";
import { test } from "node:test";

import { connect, Transcript, type MessageRow, type TopicEvent } from "../src/node/index.js";
import { FakeServer, type Message, WELCOME } from "./fake-server.js";

test("send carries also, chooseAnswer its row; speaks() reads the welcome", async () => {
  const seen: Message[] = [];
  const server = await new FakeServer((msg, conn) => {
    if (msg.type === "hello") return conn.send({ ...WELCOME, protocol_version: [1, 1] });
    seen.push(msg);
    const result =
      msg.type === "send"
        ? { type: "sent", row_id: "u1", disposition: "started", turn_id: "t1", position: 1 }
        : { type: "empty" };
    conn.send({ type: "reply", id: msg["id"], result });
  }).listen();
  try {
    const client = await connect({ socketPath: server.path });
    assert.equal(client.speaks(1, 1), true);
    assert.equal(client.speaks(1, 2), false);
    await client.send("tp", "compare", { also: [{ driver: "scripted", model: "m" }, { assistant: "reviewer" }] });
    await client.chooseAnswer("tp", "a2");
    const { id: _1, ...send } = seen[0]!;
    const { id: _2, ...choose } = seen[1]!;
    assert.deepEqual(send, {
      type: "send",
      topic_id: "tp",
      text: "compare",
      also: [{ driver: "scripted", model: "m" }, { assistant: "reviewer" }],
    });
    assert.deepEqual(choose, { type: "choose-answer", topic_id: "tp", row_id: "a2" });
    client.close();
  } finally {
    await server.close();
  }
});

test("the reducer keeps each answer's status, usage and alternative mark", () => {
  const answer = (id: string, lane: number, driver: string): MessageRow => ({
    id,
    topic_id: "tp",
    role: "assistant",
    status: "pending",
    position: 2 + lane,
    turn_id: "t1",
    lane,
    target: { driver },
    parts: [],
  });
  const t = new Transcript({ topic: { id: "tp" } as never, seq: 0, rows: [] });
  const events: TopicEvent[] = [
    { type: "turn-started", topic_id: "tp", seq: 1, turn_id: "t1", lanes: [{ driver: "scripted" }, { driver: "other" }] },
    { type: "row-opened", topic_id: "tp", seq: 2, row: answer("a1", 0, "scripted") },
    { type: "row-opened", topic_id: "tp", seq: 3, row: answer("a2", 1, "other") },
    { type: "row-appended", topic_id: "tp", seq: 4, row_id: "a2", chunk: { type: "text", text: "two" } },
    { type: "row-appended", topic_id: "tp", seq: 5, row_id: "a1", chunk: { type: "text", text: "one" } },
    { type: "row-updated", topic_id: "tp", seq: 6, row_id: "a2", status: "error", error: "boom", usage: { input_tokens: 3 } },
    { type: "row-updated", topic_id: "tp", seq: 7, row_id: "a1", status: "success", usage: { output_tokens: 5 } },
    { type: "row-updated", topic_id: "tp", seq: 8, row_id: "a2", alternative: true },
  ] as TopicEvent[];
  for (const event of events) t.apply(event);
  const [a1, a2] = t.rows();
  assert.deepEqual(
    [a1, a2].map((r) => [r!.id, r!.status, r!.alternative ?? false, r!.usage, r!.parts]),
    [
      ["a1", "success", false, { output_tokens: 5 }, [{ type: "text", text: "one" }]],
      ["a2", "error", true, { input_tokens: 3 }, [{ type: "text", text: "two" }]],
    ],
  );
  t.apply({ type: "row-updated", topic_id: "tp", seq: 9, row_id: "a2", alternative: false } as TopicEvent);
  assert.equal(t.row("a2")!.alternative, false);
});

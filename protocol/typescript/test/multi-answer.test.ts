/**
 * Several answers to one message (protocol 1.1): `send` with `also`, `chooseAnswer`, and the
 * reducer keeping each answer row's own status, usage and `alternative` mark; against the real
 * daemon, two scripted answers (one failing) seen by two windows.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import {
  connect,
  type HostdError,
  Transcript,
  type MessageRow,
  type TopicEvent,
} from "../src/node/index.js";
import { Daemon } from "./daemon.js";
import { FakeServer, type Message, WELCOME } from "./fake-server.js";
import { comparable, textOf, turnEnded, until } from "./helpers.js";

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
    // A 1.1 daemon would stop every answer: stopping one is refused before anything is sent.
    await assert.rejects(client.stop("tp", { rowId: "a2" }), (e: Error) => {
      assert.equal((e as HostdError).code, "invalid_argument");
      assert.match(e.message, /^hostd speaks protocol 1\.1, which stops every answer/);
      return true;
    });
    await client.stop("tp");
    assert.equal(seen.length, 3);
    const { id: _3, ...stop } = seen[2]!;
    assert.deepEqual(stop, { type: "stop", topic_id: "tp" });
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

// --- the real daemon -------------------------------------------------------------------------

let daemon: Daemon;
before(async () => {
  daemon = await Daemon.start();
});
after(async () => {
  await daemon?.stop();
});

/** Both answers say "fine"; the one of model `bad` then fails (the scripted driver's `/model`). */
const SCRIPT = "/text fine\n/model bad\n/error scripted failure";

test("two answers, one failing: each row has its own outcome; a choice moves the marks everywhere", async () => {
  const a = await daemon.connect("window-a");
  const b = await daemon.connect("window-b");
  try {
    assert.equal(a.speaks(1, 1), true);
    const topic = await a.createTopic({ title: "compare", driver: "scripted" });
    const subA = await a.attach(topic.id);
    const subB = await b.attach(topic.id);
    const sent = await a.send(topic.id, SCRIPT, { also: [{ driver: "scripted", model: "bad" }] });
    assert.equal(sent.disposition, "started");
    const started = (await until(subA, (i) => i.type === "turn-started")).pop();
    assert.deepEqual(
      started?.type === "turn-started" && started.lanes?.map((t) => [t.driver, t.model ?? ""]),
      [["scripted", ""], ["scripted", "bad"]],
    );
    const ended = (await until(subA, turnEnded)).pop();
    assert.equal(ended?.type === "turn-ended" && ended.status, "success");
    await until(subB, turnEnded);
    const answers = (t: Transcript) =>
      t.rows().slice(1).map((r) => [r.lane ?? 0, r.target?.model ?? "", r.status, r.alternative ?? false, textOf(r), r.error ?? ""]);
    assert.deepEqual(answers(subA.transcript!), [
      [0, "", "success", false, "fine", ""],
      [1, "bad", "error", true, "fine", "scripted failure"],
    ]);
    assert.deepEqual(comparable(subA.transcript!.rows()), comparable(await a.allRows(topic.id)));
    assert.deepEqual(comparable(subB.transcript!.rows()), comparable(subA.transcript!.rows()));
    // B continues from the failing answer: both windows see the marks move.
    const failing = subB.transcript!.rows()[2]!;
    await b.chooseAnswer(topic.id, failing.id);
    for (const sub of [subA, subB]) {
      const t = sub.transcript!;
      if (!(t.row(failing.id)?.alternative === false && t.rows()[1]?.alternative === true)) {
        await until(sub, () => t.row(failing.id)?.alternative === false && t.rows()[1]?.alternative === true);
      }
    }
    assert.deepEqual(comparable(subA.transcript!.rows()), comparable(await a.allRows(topic.id)));
    assert.deepEqual(comparable(subB.transcript!.rows()), comparable(subA.transcript!.rows()));
  } finally {
    a.close();
    b.close();
  }
});

test("stopping one answer: it ends stopped, the other completes, the turn ends once", async () => {
  const a = await daemon.connect("window-a");
  try {
    assert.equal(a.speaks(1, 2), true);
    const topic = await a.createTopic({ title: "stop one", driver: "scripted", model: "m0" });
    const sub = await a.attach(topic.id);
    // Lane 0 waits on an approval (the test lets it finish); lane 1 waits to be stopped.
    const script = "/model m0\n/text zero\n/approve Bash\n/model m1\n/text one\n/wait";
    const sent = await a.send(topic.id, script, { also: [{ driver: "scripted", model: "m1" }] });
    const t = sub.transcript!;
    const lanes = () => t.rows().filter((r) => r.role === "assistant");
    let approval = "";
    await until(sub, (i) => {
      if (i.type === "approval-requested") approval = i.approval.id;
      return approval !== "" && textOf(lanes()[1]) === "one";
    });
    const [zero, one] = lanes();
    await assert.rejects(a.stop(topic.id, { rowId: t.rows()[0]!.id }), /not an answer of the running turn/);
    await a.stop(topic.id, { rowId: one!.id });
    await until(sub, () => t.row(one!.id)?.status === "stopped");
    assert.equal(t.row(zero!.id)?.status, "pending");
    await a.answerApproval(topic.id, approval, true);
    const seen = await until(sub, turnEnded);
    const ended = seen.filter(turnEnded);
    assert.deepEqual(ended.map((e) => e.type === "turn-ended" && [e.turn_id, e.status]), [[sent.turn_id, "success"]]);
    assert.deepEqual(
      lanes().map((r) => [r.lane ?? 0, r.status, r.alternative ?? false]),
      [[0, "success", false], [1, "stopped", true]],
    );
    assert.deepEqual(comparable(t.rows()), comparable(await a.allRows(topic.id)));
  } finally {
    a.close();
  }
});

/**
 * Against the REAL daemon with the scripted driver: create, send, stream, steer with a roll,
 * two clients whose reducers equal the stored history, reconnect with `since` then
 * `replay-end`, `resync` after a forced gap (daemon restart), approvals answered by the second
 * client with `already_answered` for the first, typed errors from the daemon.
 */
import assert from "node:assert/strict";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";

import {
  AlreadyAnswered,
  connectUnix,
  errorFromCode,
  HandshakeError,
  HostdError,
  InvalidMessage,
  NothingToStop,
  NotFound,
  TopicBusy,
  UnknownTopic,
  VersionMismatch,
  type Transcript,
} from "../src/node/index.js";
import { Daemon } from "./daemon.js";
import { comparable, textOf, turnEnded, until } from "./helpers.js";

let daemon: Daemon;
before(async () => {
  daemon = await Daemon.start();
});
after(async () => {
  await daemon?.stop();
});

test("create, send, stream: the reducer equals the stored history", async () => {
  const client = await daemon.connect();
  try {
    assert.deepEqual(client.welcome.protocol_version, [1, 7]);
    const topic = await client.createTopic({ title: "t", driver: "scripted" });
    const sub = await client.attach(topic.id);
    const sent = await client.send(topic.id, "/text hello there world\n/think hmm,\n/think more");
    assert.equal(sent.disposition, "started");
    const items = await until(sub, turnEnded);
    assert.equal(items[0]?.type, "snapshot");
    assert.ok(items.some((i) => i.type === "row-appended"));
    const rows = sub.transcript!.rows();
    assert.deepEqual(comparable(rows), comparable(await client.allRows(topic.id)));
    // Consecutive thinking chunks merge into one part, like text.
    assert.deepEqual(rows[1]?.parts, [
      { type: "text", text: "hello there world" },
      { type: "thinking", text: "hmm,more" },
    ]);
  } finally {
    client.close();
  }
});

test("steer with a roll, two clients: both reducers equal the stored history", async () => {
  const a = await daemon.connect("window-a");
  const b = await daemon.connect("window-b");
  try {
    const topic = await a.createTopic({ driver: "scripted" });
    const subA = await a.attach(topic.id);
    const subB = await b.attach(topic.id);
    await a.send(topic.id, "/text first part\n/tool Read wait-steer=30\n/text done", { intent: "start" });
    // Steer from the other window once the tool runs (the scripted driver waits for it).
    await until(subB, (i) => i.type === "row-appended" && i.chunk.type === "tool-call");
    await assert.rejects(b.send(topic.id, "no", { intent: "start" }), TopicBusy);
    const steered = await b.send(topic.id, "also check the tests", { intent: "steer" });
    assert.equal(steered.disposition, "steered");
    const itemsA = await until(subA, turnEnded);
    await until(subB, turnEnded);
    const rolled = itemsA.find((i) => i.type === "rolled");
    assert.ok(rolled && rolled.type === "rolled");
    assert.deepEqual(rolled.steer_row_ids, [steered.row_id]);
    const stored = await a.allRows(topic.id);
    assert.deepEqual(comparable(subA.transcript!.rows()), comparable(stored));
    assert.deepEqual(comparable(subB.transcript!.rows()), comparable(stored));
    // History reads U1, A1a, U2, A2.
    assert.deepEqual(
      stored.map((r) => [r.role, r.id === steered.row_id ? "U2" : r.id === rolled.closed_row_id ? "A1a" : r.id === rolled.new_row_id ? "A2" : "U1"]),
      [["user", "U1"], ["assistant", "A1a"], ["user", "U2"], ["assistant", "A2"]],
    );
    assert.match(textOf(stored[3]), /You said: also check the tests/);
    assert.ok(stored.every((r) => r.status === "success"));
  } finally {
    a.close();
    b.close();
  }
});

test("reconnect with since: the missed events, then replay-end, then live", async () => {
  const a = await daemon.connect("window-a");
  const other = await daemon.connect("other");
  try {
    const topic = await a.createTopic({ driver: "scripted" });
    const sub = await a.attach(topic.id);
    await a.send(topic.id, "/text one");
    await until(sub, turnEnded);
    const transcript: Transcript = sub.transcript!;
    const seqBefore = transcript.seq;
    a.close(); // the window goes away...
    const watch = await other.attach(topic.id);
    await other.send(topic.id, "/text two three");
    await until(watch, turnEnded);
    // ...and comes back with its transcript: replay from its seq.
    const again = await daemon.connect("window-a");
    try {
      const resumed = await again.attach(topic.id, { transcript });
      assert.equal(resumed.transcript, transcript);
      const items = await until(resumed, (i) => i.type === "replay-end");
      assert.ok(items.length > 1);
      assert.equal(items[0]?.seq, seqBefore + 1);
      assert.equal(items.at(-1)?.seq, transcript.seq);
      assert.equal(resumed.resyncs, 0);
      assert.deepEqual(comparable(transcript.rows()), comparable(await again.allRows(topic.id)));
      // Live events follow.
      await other.send(topic.id, "/text four");
      await until(resumed, turnEnded);
      assert.deepEqual(comparable(transcript.rows()), comparable(await again.allRows(topic.id)));
    } finally {
      again.close();
    }
  } finally {
    other.close();
  }
});

test("approvals: the second window answers, the first gets already_answered", async () => {
  const a = await daemon.connect("window-a");
  const b = await daemon.connect("window-b");
  try {
    const topic = await a.createTopic({ driver: "scripted" });
    const subA = await a.attach(topic.id);
    const subB = await b.attach(topic.id);
    await a.send(topic.id, "/approve Bash");
    const asked = await until(subA, (i) => i.type === "approval-requested");
    const request = asked.at(-1);
    assert.ok(request?.type === "approval-requested");
    await until(subB, (i) => i.type === "approval-requested");
    assert.deepEqual(subB.transcript!.approvals().map((x) => x.id), [request.approval.id]);
    await b.answerApproval(topic.id, request.approval.id, true);
    await assert.rejects(a.answerApproval(topic.id, request.approval.id, false), AlreadyAnswered);
    const itemsA = await until(subA, turnEnded);
    const resolved = itemsA.find((i) => i.type === "approval-resolved");
    assert.ok(resolved?.type === "approval-resolved");
    assert.equal(resolved.status, "allowed");
    assert.deepEqual(subA.transcript!.approvals(), []);
    await until(subB, turnEnded);
    const stored = await a.allRows(topic.id);
    assert.match(textOf(stored.at(-1)), /approved: ran Bash/);
    assert.deepEqual(comparable(subB.transcript!.rows()), comparable(stored));
  } finally {
    a.close();
    b.close();
  }
});

test("typed errors from the daemon", async () => {
  const client = await daemon.connect();
  try {
    await assert.rejects(client.getTopic("no-such-topic"), UnknownTopic);
    const topic = await client.createTopic({ driver: "scripted" });
    await assert.rejects(client.stop(topic.id), NothingToStop);
    await assert.rejects(client.discardQueued(topic.id, "no-such-row"), NotFound);
    // A bad intent does not decode as a `send`: invalid_message, naming the request id.
    await assert.rejects(
      client.request({ type: "send", topic_id: topic.id, text: "x", intent: "sideways" } as never),
      InvalidMessage,
    );
    // The connection is still good after a per-request error.
    assert.equal((await client.ping()).type, "pong");
  } finally {
    client.close();
  }
});

/** Send raw bodies on a fresh connection; the frames the daemon answers until it closes. */
async function exchange(bodies: object[]): Promise<Array<Record<string, unknown>>> {
  const transport = await connectUnix(daemon.socketPath);
  const frames: Array<Record<string, unknown>> = [];
  const closed = new Promise<void>((resolve) =>
    transport.start({
      frame: (body) => frames.push(JSON.parse(body) as Record<string, unknown>),
      closed: () => resolve(),
    }),
  );
  for (const body of bodies) transport.send(JSON.stringify(body));
  await closed;
  return frames;
}

test("listAssistants: each assistant file with its resolved driver, a broken one with its error, the built-in default", async () => {
  const folder = join(daemon.home, "config", "assistants");
  mkdirSync(folder, { recursive: true });
  writeFileSync(
    join(folder, "helper.toml"),
    'description = "Helps"\ndriver = "scripted"\n[options]\ntoken = "SECRET-VALUE"\n',
  );
  writeFileSync(join(folder, "zbroken.toml"), 'driver = "scripted"\nmodle = "typo"\n');
  const client = await daemon.connect();
  try {
    assert.equal(client.speaks(1, 3), true);
    const listed = await client.listAssistants();
    // The built-in `default` is listed too, marked built-in (the files' entries are not).
    assert.deepEqual(
      listed.map((a) => [a.name, a.builtin ?? false]),
      [["default", true], ["helper", false], ["zbroken", false]],
    );
    assert.deepEqual(listed[1], { name: "helper", description: "Helps", driver: "scripted", available: true });
    assert.match(listed[2]?.error ?? "", /zbroken\.toml:2: modle: unknown key/);
    assert.equal(listed[2]?.available, undefined);
    assert.ok(!JSON.stringify(listed).includes("SECRET"));
  } finally {
    client.close();
  }
});

test("handshake errors are typed and close the connection", async () => {
  const [mismatch] = await exchange([{ type: "hello", protocol_version: [99, 0] }]);
  assert.equal(mismatch?.["code"], "version_mismatch");
  assert.ok(errorFromCode("version_mismatch", "") instanceof VersionMismatch);
  const [early] = await exchange([{ type: "ping", id: 1 }]);
  assert.equal(early?.["code"], "handshake_error");
  assert.ok(errorFromCode("handshake_error", "") instanceof HandshakeError);
});

test("a topic's first turn: driver-ready tells the real capabilities during the turn", async () => {
  const client = await daemon.connect();
  try {
    const topic = await client.createTopic({ driver: "scripted" });
    const sub = await client.attach(topic.id);
    const capabilities = () => sub.transcript!.capabilities; // read fresh (no narrowing)
    assert.equal(capabilities(), null);
    await client.send(topic.id, "/text hi");
    const items = await until(sub, turnEnded);
    const started = items.find((i) => i.type === "turn-started");
    assert.ok(started?.type === "turn-started");
    assert.notEqual(started.capabilities_known, true); // no driver was up yet
    const ready = items.find((i) => i.type === "driver-ready");
    assert.ok(ready?.type === "driver-ready");
    assert.equal(ready.capabilities?.inject_steering, true);
    assert.equal(capabilities()?.inject_steering, true);
    // The next turn knows them from the start, and the driver did not change: no driver-ready.
    await client.send(topic.id, "/text again");
    const next = await until(sub, turnEnded);
    const second = next.find((i) => i.type === "turn-started");
    assert.ok(second?.type === "turn-started");
    assert.equal(second.capabilities_known, true);
    assert.equal(second.capabilities?.inject_steering, true);
    assert.equal(next.some((i) => i.type === "driver-ready"), false);
  } finally {
    client.close();
  }
});

test("watching the topic list: creates, renames and deletes by another window", async () => {
  const watcher = await daemon.connect("list");
  const other = await daemon.connect("other");
  try {
    const watch = await watcher.watchTopics();
    assert.deepEqual(
      watch.topics().map((t) => t.id),
      (await watcher.listTopics()).map((t) => t.id),
    );
    const topic = await other.createTopic({ driver: "scripted", title: "first" });
    await other.renameTopic(topic.id, "renamed");
    await other.deleteTopic(topic.id);
    const changes: string[] = [];
    for await (const change of watch) {
      changes.push(`${change.change}:${change.topic?.title ?? ""}`);
      if (change.change === "created") assert.ok(watch.topics().some((t) => t.id === topic.id));
      if (change.change === "deleted") break;
    }
    assert.deepEqual(changes, ["created:first", "changed:renamed", "deleted:"]);
    assert.equal(watch.topics().some((t) => t.id === topic.id), false);
    await watch.unwatch();
    await other.createTopic({ driver: "scripted" });
    assert.equal((await watch.next()).done, true);
    await watcher.ping(); // the unwatched connection goes on
  } finally {
    watcher.close();
    other.close();
  }
});

test("rewind, regenerate, fork: the reducer equals the stored visible history", async () => {
  const client = await daemon.connect();
  try {
    const topic = await client.createTopic({ title: "ops", driver: "scripted" });
    const sub = await client.attach(topic.id);
    for (const text of ["/text one", "/text two"]) {
      await client.send(topic.id, text);
      await until(sub, turnEnded);
    }
    const rows = await client.allRows(topic.id);
    const cut = await client.rewind(topic.id, rows[1]!.id);
    assert.deepEqual(cut, [rows[2]!.id, rows[3]!.id]);
    await until(sub, (item) => item.type === "rows-removed");
    assert.deepEqual(comparable(sub.transcript!.rows()), comparable(await client.allRows(topic.id)));
    const all = await client.history(topic.id, { all: true });
    assert.deepEqual(
      all.rows.map((r) => r.superseded ?? false),
      [false, false, true, true],
    );
    const regen = await client.regenerate(topic.id);
    assert.equal(regen.disposition, "started");
    await until(sub, turnEnded);
    assert.deepEqual(comparable(sub.transcript!.rows()), comparable(await client.allRows(topic.id)));
    // Regenerate answered "one" again in new rows (the old ones are superseded).
    const now = await client.allRows(topic.id);
    assert.deepEqual(now.map((r) => textOf(r)), ["/text one", "one"]);
    assert.notEqual(now[0]!.id, rows[0]!.id);
    const fork = await client.forkTopic(topic.id, now[0]!.id, { title: "branch" });
    assert.equal(fork.title, "branch");
    assert.deepEqual(
      (await client.allRows(fork.id)).map((r) => textOf(r)),
      ["/text one"],
    );
  } finally {
    client.close();
  }
});

test("schedules: add, list, pause, resume, run now (the message arrives), remove", async () => {
  const client = await daemon.connect();
  try {
    const topic = await client.createTopic({ driver: "scripted" });
    const other = await client.createTopic({ driver: "scripted" });
    await client.addSchedule(other.id, "elsewhere", { every_s: 3600 });
    const added = await client.addSchedule(topic.id, "/text scheduled hello", { every_s: 3600, busy: "skip" });
    assert.equal(added.topic_id, topic.id);
    assert.equal(added.busy, "skip");
    // Defaults are omitted on the wire: `enabled` absent means true.
    assert.notEqual(added.enabled, false);
    assert.equal(typeof added.next_due, "number");
    assert.deepEqual((await client.listSchedules(topic.id)).map((s) => s.id), [added.id]);
    assert.equal((await client.listSchedules()).length, 2);
    const paused = await client.pauseSchedule(added.id);
    assert.equal(paused.enabled, false);
    assert.equal(paused.next_due ?? null, null);
    assert.notEqual((await client.resumeSchedule(added.id)).enabled, false);
    const sub = await client.attach(topic.id);
    const ran = await client.runScheduleNow(added.id);
    assert.equal(ran.id, added.id);
    await until(sub, turnEnded);
    const rows = await client.allRows(topic.id);
    assert.equal(textOf(rows[0]), "/text scheduled hello");
    assert.equal(textOf(rows[1]), "scheduled hello");
    await client.removeSchedule(added.id);
    assert.deepEqual(await client.listSchedules(topic.id), []);
    await assert.rejects(client.removeSchedule(added.id), HostdError);
  } finally {
    client.close();
  }
});

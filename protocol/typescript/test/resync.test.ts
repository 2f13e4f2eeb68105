/**
 * `resync` after a forced gap, against the real daemon: a window holds a transcript at seq N;
 * more events happen, then the daemon restarts (its replay buffer starts empty, so it no longer
 * holds the events after N). Re-attaching with `since=N` gets `resync`; the subscription takes
 * a fresh snapshot by itself, yields it, and its transcript equals the stored history.
 */
import assert from "node:assert/strict";
import { after, test } from "node:test";

import { Daemon } from "./daemon.js";
import { comparable, turnEnded, until } from "./helpers.js";

let daemon: Daemon | undefined;
after(async () => {
  await daemon?.stop();
});

test("resync after a forced gap: the subscription re-attaches with a snapshot", async () => {
  daemon = await Daemon.start();
  const a = await daemon.connect("window-a");
  const topic = await a.createTopic({ driver: "scripted" });
  let sub = await a.attach(topic.id);
  await a.send(topic.id, "/text one");
  await until(sub, turnEnded);
  const transcript = sub.transcript!;
  const oldSeq = transcript.seq;
  a.close();

  const b = await daemon.connect("window-b");
  const watch = await b.attach(topic.id);
  await b.send(topic.id, "/text two");
  await until(watch, turnEnded);
  b.close();

  daemon = await daemon.restart();
  const again = await daemon.connect("window-a");
  try {
    sub = await again.attach(topic.id, { transcript });
    const [item] = await until(sub, (i) => i.type === "snapshot");
    assert.equal(item?.type, "snapshot");
    assert.equal(sub.resyncs, 1);
    assert.notEqual(sub.transcript, transcript); // a fresh one, from the snapshot
    assert.ok(sub.seq > oldSeq);
    assert.deepEqual(comparable(sub.transcript!.rows()), comparable(await again.allRows(topic.id)));
    // Live after the resync.
    await again.send(topic.id, "/text three");
    await until(sub, turnEnded);
    assert.deepEqual(comparable(sub.transcript!.rows()), comparable(await again.allRows(topic.id)));
  } finally {
    again.close();
  }
});

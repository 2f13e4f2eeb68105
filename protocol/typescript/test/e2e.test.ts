import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { Daemon } from "./daemon.js";

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
    assert.deepEqual(client.welcome.protocol_version, [1, 0]);
    const topic = await client.createTopic({ title: "t", driver: "scripted" });
    const sub = await client.attach(topic.id);
    const sent = await client.send(topic.id, "/text hello there world\n/think hmm");
    assert.equal(sent.disposition, "started");
    const types: string[] = [];
    for await (const item of sub) {
      types.push(item.type);
      if (item.type === "turn-ended") break;
    }
    assert.equal(types[0], "snapshot");
    assert.ok(types.includes("row-appended"));
    const rows = sub.transcript!.rows();
    const stored = await client.allRows(topic.id);
    assert.deepEqual(rows.map(strip), stored.map(strip));
    assert.deepEqual(rows[1]?.parts, [
      { type: "text", text: "hello there world" },
      { type: "thinking", text: "hmm" },
    ]);
  } finally {
    client.close();
  }
});

/** Rows without `updated_at` (events do not carry it) and with default fields filled. */
function strip(row: object): object {
  const { updated_at: _ignored, ...rest } = row as { updated_at?: number };
  return { parts: [], ...rest };
}

/**
 * The shared transcript fixtures (tests/fixtures/transcripts/*.json, recorded from the real
 * daemon by record.py): the TypeScript reducer must build exactly the `expected` state the
 * Python reducer builds (tests/typescript/test_transcript_fixtures.py checks that side).
 */
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { Transcript, type MessageRow, type Snapshot, type TopicEvent } from "../src/index.js";

const dir = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "..", "tests", "fixtures", "transcripts");

/** A row as msgspec writes it: fields at their default are omitted. */
function wireShape(row: MessageRow): Record<string, unknown> {
  const defaults: Record<string, unknown> = {
    turn_id: "",
    error: "",
    error_code: "",
    anchor: null,
    created_at: 0,
    updated_at: 0,
    empty: false,
  };
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(row)) {
    if (key in defaults && value === defaults[key]) continue;
    if ((key === "parts" && Array.isArray(value) && value.length === 0) || value === undefined) continue;
    if (key === "meta" && value !== null && typeof value === "object" && Object.keys(value).length === 0) continue;
    out[key] = value;
  }
  return out;
}

const files = readdirSync(dir).filter((f) => f.endsWith(".json")).sort();

test("the fixture set is there", () => {
  assert.ok(files.length >= 5, `fixtures in ${dir}`);
});

for (const file of files) {
  test(`fixture ${file}: the TypeScript reducer builds the expected transcript`, () => {
    const fixture = JSON.parse(readFileSync(join(dir, file), "utf-8")) as {
      snapshot: Snapshot;
      events: TopicEvent[];
      expected: Record<string, unknown>;
    };
    const t = new Transcript(fixture.snapshot);
    for (const event of fixture.events) t.apply(event);
    assert.deepEqual(
      {
        rows: t.rows().map(wireShape),
        approvals: t.approvals(),
        state: t.state,
        seq: t.seq,
        active_turn_id: t.activeTurnId,
        deleted: t.deleted,
      },
      fixture.expected,
    );
  });
}

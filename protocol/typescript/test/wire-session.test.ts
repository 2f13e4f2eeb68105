/** The recorded real session (tests/fixtures/wire/session.jsonl): every frame the daemon sent
 * decodes in this client. */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { decodeBody, type ServerMessage } from "../src/index.js";

const file = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "..", "tests", "fixtures", "wire", "session.jsonl");

test("every frame of the recorded session decodes", () => {
  const lines = readFileSync(file, "utf-8").trim().split("\n").map((l) => JSON.parse(l) as { dir: string; frame: object });
  const received: ServerMessage[] = lines.filter((l) => l.dir === "recv").map((l) => decodeBody(JSON.stringify(l.frame)));
  assert.ok(received.length > 100);
  assert.ok(received.some((m) => m.type === "rolled"));
  assert.ok(received.some((m) => m.type === "topics-changed"));
});

import assert from "node:assert/strict";
import { mkdtempSync, chmodSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";

import { runtimeDir, socketPath } from "../src/node/index.js";

test("HOSTD_HOME (or home) puts the socket under <home>/run", () => {
  assert.equal(socketPath("/x/h", {}), "/x/h/run/hostd.sock");
  assert.equal(socketPath(undefined, { HOSTD_HOME: "/y" }), "/y/run/hostd.sock");
  assert.equal(socketPath("/x/h", { HOSTD_HOME: "/y" }), "/x/h/run/hostd.sock");
});

test("XDG_RUNTIME_DIR is used only when it is a private directory of ours", { skip: process.platform !== "linux" }, () => {
  const dir = mkdtempSync(join(tmpdir(), "xdg"));
  try {
    chmodSync(dir, 0o700);
    assert.equal(runtimeDir(undefined, { XDG_RUNTIME_DIR: dir }), join(dir, "hostd"));
    chmodSync(dir, 0o755);
    assert.notEqual(runtimeDir(undefined, { XDG_RUNTIME_DIR: dir }), join(dir, "hostd"));
    assert.notEqual(runtimeDir(undefined, { XDG_RUNTIME_DIR: "relative/dir" }), "relative/dir/hostd");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

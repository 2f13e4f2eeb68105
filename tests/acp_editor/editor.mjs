// An editor, as far as ACP goes: the official TypeScript SDK (@agentclientprotocol/sdk,
// pinned in package.json) starts `hostd acp` and drives it. The pytest side
// (tests/acp_editor/test_editor.py) steers it with one JSON command per stdin line and reads
// what it saw as one JSON event per stdout line, so each scenario is written in Python
// against the real daemon while the ACP client is one we did not write.
//
// Commands: {op: "call", tag, method, params} (a request; its result or error comes back as
// {ev: "result", tag, result | error}), {op: "notify", method, params}, {op: "answer", key,
// outcome} (answer a pending session/request_permission), {op: "raw", text} (bytes straight
// to the agent's stdin, for garbage), {op: "eof"} (close the agent's stdin, still reading its
// answers), {op: "close"} (close the connection and the agent's stdin), {op: "cancel", tag}
// (withdraw that call: the SDK sends `$/cancel_request` and waits for the answer).
// Events: {ev: "spawned", pid}, {ev: "update", params}, {ev: "permission", key, params},
// {ev: "withdrawn", key} (the agent cancelled that permission request), {ev: "result", ...},
// {ev: "exit", code, signal}.
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { Readable, Writable } from "node:stream";
import { client, ndJsonStream } from "@agentclientprotocol/sdk";

const [command, ...args] = process.argv.slice(2);
const child = spawn(command, args, { stdio: ["pipe", "pipe", "inherit"] });
const out = (obj) => process.stdout.write(JSON.stringify(obj) + "\n");
out({ ev: "spawned", pid: child.pid });
child.on("exit", (code, signal) => out({ ev: "exit", code, signal }));

const pending = new Map(); // permission key -> resolve
const calls = new Map(); // call tag -> AbortController
let nextKey = 1;

const app = client({ name: "hostd-test-editor" })
  .onNotification("session/update", ({ params }) => {
    out({ ev: "update", params });
  })
  .onRequest("session/request_permission", ({ params, signal }) => {
    const key = String(nextKey++);
    out({ ev: "permission", key, params });
    return new Promise((resolve, reject) => {
      pending.set(key, resolve);
      // The agent withdrew it (`$/cancel_request`): an editor takes the prompt down.
      signal.addEventListener("abort", () => {
        pending.delete(key);
        out({ ev: "withdrawn", key });
        reject(signal.reason);
      });
    });
  });

const toAgent = Writable.toWeb(child.stdin);
const fromAgent = Readable.toWeb(child.stdout);
const connection = app.connect(ndJsonStream(toAgent, fromAgent));

const lines = createInterface({ input: process.stdin });
for await (const line of lines) {
  if (!line.trim()) continue;
  const cmd = JSON.parse(line);
  if (cmd.op === "call") {
    const abort = new AbortController();
    calls.set(cmd.tag, abort);
    connection.agent.request(cmd.method, cmd.params, { cancellationSignal: abort.signal }).then(
      (result) => out({ ev: "result", tag: cmd.tag, result: result ?? null }),
      (error) => out({ ev: "result", tag: cmd.tag, error: { code: error.code, message: error.message } }),
    );
  } else if (cmd.op === "cancel") {
    calls.get(cmd.tag)?.abort();
  } else if (cmd.op === "notify") {
    await connection.agent.notify(cmd.method, cmd.params);
  } else if (cmd.op === "answer") {
    const resolve = pending.get(cmd.key);
    pending.delete(cmd.key);
    resolve?.(cmd.outcome);
  } else if (cmd.op === "raw") {
    child.stdin.write(cmd.text);
  } else if (cmd.op === "eof") {
    child.stdin.end(); // our writing end only: answers are still read
  } else if (cmd.op === "close") {
    connection.close();
    child.stdin.end();
  }
}

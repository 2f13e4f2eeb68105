/** The client against a fake server: every error code, garbage frames, gaps, aborts. */
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  AccessDenied,
  Client,
  connect,
  ConnectionBroken,
  ConnectionClosed,
  DaemonNotRunning,
  ERROR_CLASSES,
  FrameTooLarge,
  HostdError,
  InvalidMessage,
  MalformedFrame,
  PayloadTooLarge,
  VersionMismatch,
} from "../src/node/index.js";
import { FakeServer, type FakeConnection, type Message, WELCOME } from "./fake-server.js";

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

test("every error code is raised as its class, unknown codes as HostdError with that code", async () => {
  const codes = [...ERROR_CLASSES.keys(), "some_future_code"];
  await withServer(
    (msg, conn) => {
      const code = codes[(msg["id"] as number) - 1];
      conn.send({ type: "error", id: msg["id"], code, message: `failed: ${code}`, details: { why: code } });
    },
    async (server) => {
      const client = await connect({ socketPath: server.path });
      for (const code of codes) {
        const error = await client.ping().then(
          () => assert.fail("no error"),
          (e: unknown) => e,
        );
        assert.ok(error instanceof HostdError);
        assert.equal(error.code, code);
        assert.equal(error.message, `failed: ${code}`);
        assert.deepEqual(error.details, { why: code });
        const cls = ERROR_CLASSES.get(code) ?? HostdError;
        assert.equal(error.constructor, cls, code);
        assert.equal(error.name, cls.name);
      }
      client.close();
    },
  );
});

test("a malformed frame from the server fails the waiting call with MalformedFrame and closes", async () => {
  await withServer(
    (_msg, conn) => conn.raw(new Uint8Array([0, 0, 0, 5, ...new TextEncoder().encode("nope!")])),
    async (server) => {
      const client = await connect({ socketPath: server.path });
      await assert.rejects(client.ping(), {
        name: "MalformedFrame",
        message: /^frame body is not valid JSON: /,
      });
      assert.ok(client.closedReason instanceof MalformedFrame);
      await assert.rejects(client.ping(), MalformedFrame);
    },
  );
});

test("invalid UTF-8, an oversized header, a shapeless message: typed errors", async () => {
  const cases: Array<[Uint8Array, typeof HostdError]> = [
    [new Uint8Array([0, 0, 0, 2, 0xc3, 0x28]), MalformedFrame],
    [new Uint8Array([0xff, 0xff, 0xff, 0xff]), FrameTooLarge],
    [new Uint8Array([0, 0, 0, 2, 0x5b, 0x5d]), InvalidMessage], // "[]"
  ];
  for (const [bytes, cls] of cases) {
    await withServer(
      (_msg, conn) => conn.raw(bytes),
      async (server) => {
        const client = await connect({ socketPath: server.path });
        await assert.rejects(client.ping(), cls);
        assert.ok((await client.closed()) instanceof cls);
      },
    );
  }
});

test("a connection-level error (no id) is fatal and typed", async () => {
  await withServer(
    (_msg, conn) => conn.send({ type: "error", code: "access_denied", message: "bad token" }),
    async (server) => {
      const client = await connect({ socketPath: server.path });
      await assert.rejects(client.ping(), AccessDenied);
    },
  );
});

test("a daemon of another major version: VersionMismatch", async () => {
  const server = await new FakeServer((_msg, conn) =>
    conn.send({ type: "welcome", protocol_version: [2, 0] }),
  ).listen();
  try {
    await assert.rejects(connect({ socketPath: server.path }), VersionMismatch);
  } finally {
    await server.close();
  }
});

test("a server that closes before welcome: a handshake error, not a hang", async () => {
  const server = await new FakeServer((_msg, conn) => conn.socket.end()).listen();
  try {
    await assert.rejects(connect({ socketPath: server.path }), { name: "HandshakeError" });
  } finally {
    await server.close();
  }
});

test("nothing listening: DaemonNotRunning naming the socket", async () => {
  await assert.rejects(connect({ socketPath: "/tmp/no-such-dir/hostd.sock" }), (e: unknown) => {
    assert.ok(e instanceof DaemonNotRunning);
    assert.ok(e instanceof ConnectionBroken);
    assert.equal(e.details["socket"], "/tmp/no-such-dir/hostd.sock");
    // In words, as the Python clients say it, not an errno name.
    assert.match(e.message, /hostd is not running \(no socket at \/tmp\/no-such-dir\/hostd\.sock\)/);
    return true;
  });
  // A daemon of `--home H`: the fix names that home; a home that is a file is one clear line.
  await assert.rejects(connect({ home: "/tmp/no-such-home" }), (e: unknown) => {
    assert.ok(e instanceof DaemonNotRunning);
    assert.match(e.message, /start it with `hostd serve --detach --home \/tmp\/no-such-home`/);
    return true;
  });
  await assert.rejects(connect({ home: "/etc/passwd" }), (e: unknown) => {
    assert.ok(e instanceof ConnectionBroken);
    assert.match(e.message, /^cannot reach hostd at \/etc\/passwd\/run\/hostd\.sock: not a directory; /);
    return true;
  });
});

test("a socket another user could have planted is refused with AccessDenied", { skip: process.getuid?.() !== 0 }, async () => {
  // Only root can hand a socket to another uid: the squatter's socket, as it would look.
  const { chownSync } = await import("node:fs");
  await withServer(
    () => undefined,
    async (server) => {
      chownSync(server.path, 4242, 4242);
      await assert.rejects(connect({ socketPath: server.path }), (e: unknown) => {
        assert.ok(e instanceof AccessDenied);
        assert.match(e.message, /^the hostd socket .* belongs to uid 4242, not to you \(uid 0\); refusing/);
        return true;
      });
    },
  );
});

test("aborting a call rejects it with the signal's reason; the late reply is ignored", async () => {
  // The server holds each ping until the test releases it.
  const held: Array<() => void> = [];
  let arrived: () => void = () => undefined;
  await withServer(
    (msg, conn) => {
      held.push(() => conn.send({ type: "reply", id: msg["id"], result: { type: "pong", time: msg["id"] } }));
      arrived();
    },
    async (server) => {
      const client = await connect({ socketPath: server.path });
      const waitArrival = () => new Promise<void>((resolve) => (arrived = resolve));
      const controller = new AbortController();
      let got = waitArrival();
      const call = client.ping({ signal: controller.signal });
      await got;
      controller.abort(new Error("window closed"));
      await assert.rejects(call, { message: "window closed" });
      got = waitArrival();
      const second = client.ping();
      await got;
      held.shift()!(); // the aborted call's reply: nobody waits for it any more
      held.shift()!();
      assert.equal((await second).time, 2);
      await assert.rejects(client.ping({ signal: AbortSignal.abort() }), { name: "AbortError" });
      client.close();
      await assert.rejects(client.ping(), ConnectionClosed);
    },
  );
});

const row = (id: string, position: number) => ({
  id,
  topic_id: "t1",
  role: "user",
  status: "success",
  position,
  parts: [{ type: "text", text: id }],
});
const snapshot = (seq: number, rows: object[]) => ({
  topic: { id: "t1", seq },
  seq,
  rows,
});

test("a seq gap re-attaches with since; replayed overlap is skipped", async () => {
  await withServer(
    (msg, conn) => {
      const reply = (result: object) => conn.send({ type: "reply", id: msg["id"], result });
      if (msg.type === "attach" && msg["since"] === undefined) {
        reply({ type: "attached", topic_id: "t1", mode: "snapshot", snapshot: snapshot(0, []) });
        conn.send({ type: "row-opened", topic_id: "t1", seq: 1, row: row("a", 1) });
        conn.send({ type: "row-opened", topic_id: "t1", seq: 3, row: row("c", 3) }); // gap
      } else if (msg.type === "attach") {
        assert.equal(msg["since"], 1);
        reply({ type: "attached", topic_id: "t1", mode: "replay" });
        conn.send({ type: "row-opened", topic_id: "t1", seq: 1, row: row("a", 1) }); // overlap
        conn.send({ type: "row-opened", topic_id: "t1", seq: 2, row: row("b", 2) });
        conn.send({ type: "row-opened", topic_id: "t1", seq: 3, row: row("c", 3) });
        conn.send({ type: "replay-end", topic_id: "t1", seq: 3 });
      } else if (msg.type === "detach") {
        reply({ type: "empty" });
      }
    },
    async (server) => {
      const client = await connect({ socketPath: server.path });
      const sub = await client.attach("t1");
      const items: string[] = [];
      for await (const item of sub) {
        items.push(`${item.type}@${item.seq}`);
        if (item.type === "replay-end") break;
      }
      assert.deepEqual(items, [
        "snapshot@0",
        "row-opened@1",
        "row-opened@2",
        "row-opened@3",
        "replay-end@3",
      ]);
      assert.equal(sub.gaps, 1);
      assert.deepEqual(sub.transcript!.rows().map((r) => r.id), ["a", "b", "c"]);
      await sub.detach();
      assert.equal((await sub.next()).done, true);
      client.close();
    },
  );
});

test("resync during a replay takes a fresh snapshot; an unknown event type only moves the seq", async () => {
  await withServer(
    (msg, conn) => {
      const reply = (result: object) => conn.send({ type: "reply", id: msg["id"], result });
      if (msg.type === "attach" && msg["since"] === 5) {
        reply({ type: "attached", topic_id: "t1", mode: "replay" });
        conn.send({ type: "resync", topic_id: "t1", seq: 9, reason: "too old" });
      } else if (msg.type === "attach") {
        reply({ type: "attached", topic_id: "t1", mode: "snapshot", snapshot: snapshot(9, [row("z", 1)]) });
        conn.send({ type: "some-future-event", topic_id: "t1", seq: 10, whatever: true });
        conn.send({ type: "row-opened", topic_id: "t1", seq: 11, row: row("y", 2) });
      }
    },
    async (server) => {
      const client = await connect({ socketPath: server.path });
      const sub = await client.attach("t1", { since: 5 });
      assert.equal(sub.transcript, null);
      const first = await sub.next();
      assert.equal(first.value?.type, "snapshot");
      assert.equal(sub.resyncs, 1);
      assert.equal((await sub.next()).value?.type, "some-future-event");
      assert.equal((await sub.next()).value?.type, "row-opened");
      assert.equal(sub.transcript!.seq, 11);
      assert.deepEqual(sub.transcript!.rows().map((r) => r.id), ["z", "y"]);
      client.close();
      assert.equal((await sub.next()).done, true); // closed by us: the iteration just ends
    },
  );
});

test("the connection breaking ends a subscription with the reason", async () => {
  await withServer(
    (msg, conn) => {
      conn.send({
        type: "reply",
        id: msg["id"],
        result: { type: "attached", topic_id: "t1", mode: "snapshot", snapshot: snapshot(0, []) },
      });
      conn.socket.end();
    },
    async (server) => {
      const client = await connect({ socketPath: server.path });
      const sub = await client.attach("t1");
      assert.equal((await sub.next()).value?.type, "snapshot");
      await assert.rejects(sub.next(), ConnectionBroken);
    },
  );
});

void Client;

test("readRow joins a part delivered in pieces and stops when done", async () => {
  const pieces = [
    { parts: [{ type: "text", text: "hel" }], done: false, next_part: 0, next_offset: 3 },
    { parts: [{ type: "text", text: "lo" }, { type: "tool-result", call_id: "c", output: "o1" }], done: false, next_part: 1, next_offset: 2 },
    { parts: [{ type: "tool-result", call_id: "c", output: "o2" }] },
  ];
  const asked: Array<[unknown, unknown]> = [];
  await withServer(
    (msg, conn) => {
      asked.push([msg["part"] ?? 0, msg["offset"] ?? 0]);
      const piece = pieces[asked.length - 1]!;
      conn.send({ type: "reply", id: msg["id"], result: { type: "row-content", row_id: "r", ...piece } });
    },
    async (server) => {
      const client = await connect({ socketPath: server.path });
      assert.deepEqual(await client.readRow("t", "r"), [
        { type: "text", text: "hello" },
        { type: "tool-result", call_id: "c", output: "o1o2" },
      ]);
      assert.deepEqual(asked, [[0, 0], [0, 3], [1, 2]]);
      client.close();
    },
  );
});

test("an attach aborted before its reply is undone with a detach", async () => {
  const types: string[] = [];
  let arrived: () => void = () => undefined;
  const attachSeen = new Promise<void>((resolve) => (arrived = resolve));
  await withServer(
    (msg, conn) => {
      types.push(msg.type);
      if (msg.type === "attach") arrived(); // never answered: the window goes away first
      else conn.send({ type: "reply", id: msg["id"], result: { type: "empty" } });
    },
    async (server) => {
      const client = await connect({ socketPath: server.path });
      const controller = new AbortController();
      const attaching = client.attach("t1", { signal: controller.signal });
      await attachSeen;
      controller.abort(new Error("view closed"));
      await assert.rejects(attaching, { message: "view closed" });
      await client.request({ type: "ping" }); // served after the detach: it has arrived
      assert.deepEqual(types, ["attach", "detach", "ping"]);
      // The topic can be attached again on this connection.
      void client.attach("t1").catch(() => undefined);
      client.close();
    },
  );
});

test("a message text over the send limit is refused before encoding, naming that limit", async () => {
  const seen: string[] = [];
  await withServer(
    (msg, conn) => {
      seen.push(msg.type as string);
      conn.send({ type: "reply", id: msg["id"], result: { type: "pong", time: 1 } });
    },
    async (server) => {
      const client = await connect({ socketPath: server.path });
      try {
        // Over the frame size too: the 1 MiB limit is the reason, not "maximum frame size".
        for (const size of [2_000_000, 9_000_000]) {
          await assert.rejects(client.send("tp", "x".repeat(size)), (exc: unknown) => {
            assert.ok(exc instanceof PayloadTooLarge);
            assert.equal(exc.message, `the message is ${size} bytes; the limit is 1048576 bytes`);
            return true;
          });
        }
        await client.ping(); // the connection goes on; nothing else was sent
        assert.deepEqual(seen, ["ping"]);
      } finally {
        await client.close();
      }
    },
  );
});

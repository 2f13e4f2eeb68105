/**
 * The hostd client: one connection over any `Transport`, shaped like `hostd.client` (Python).
 *
 *     const client = await Client.connect(await connectWebSocket(url));
 *     const topic = await client.createTopic({ title: "demo", driver: "scripted" });
 *     const sub = await client.attach(topic.id);
 *     await client.send(topic.id, "hello");
 *     for await (const item of sub) {
 *       render(sub.transcript!.rows());
 *       if (item.type === "turn-ended") break;
 *     }
 *
 * Rules this module guards:
 *
 * - One dispatcher per connection routes frames: replies to the waiting request (by id), topic
 *   events to that topic's subscription. A request gets exactly one reply or one typed error
 *   (`errorFromCode`); a connection-level error (no id) or a frame that cannot be decoded ends
 *   the connection and fails every waiting call with that error.
 * - Every call takes an `AbortSignal`: aborting stops waiting (rejects with `signal.reason`);
 *   it cannot unsend a request the daemon already has.
 * - A subscription hides replay and resync from the caller: it keeps `transcript` current, and
 *   when the host sends `resync` or a seq gap shows up it re-attaches with `since=<last seq>`;
 *   if the host cannot replay that far it takes a fresh snapshot, which it yields (a `snapshot`
 *   item) so the caller redraws.
 */
import {
  ConnectionClosed,
  errorFromCode,
  HandshakeError,
  HostdError,
  InvalidMessage,
  ProtocolError,
  VersionMismatch,
} from "./errors.js";
import { DEFAULT_MAX_FRAME_SIZE, decodeBody, encodeBody } from "./framing.js";
import { PROTOCOL_VERSION } from "./protocol.gen.js";
import type {
  AttachResult,
  TopicsChanged,
  DriverInfo,
  HistoryMessage,
  HistoryResult,
  Pong,
  ScheduleInfo,
  SendResult,
  ServerMessage,
  Snapshot,
  StatusResult,
  TopicInfo,
  UsageTotals,
  Welcome,
} from "./protocol.gen.js";
import { Transcript } from "./transcript.js";
import type { Transport } from "./transport.js";
import type { Chunk, Request, RequestBody, Result, SendIntent, TopicEvent } from "./types.js";

export interface CallOptions {
  /** Stop waiting for this call (rejects with `signal.reason`). */
  signal?: AbortSignal;
}

export interface ClientOptions extends CallOptions {
  /** Shown in the daemon's logs. */
  clientName?: string;
  /** Sent in `hello`; only a network listener of the daemon's own would check it. */
  token?: string;
  /** Largest frame body sent (default: the daemon's `welcome.max_frame_size`, else 8 MiB). */
  maxFrameSize?: number;
}

export interface CreateTopicOptions extends CallOptions {
  title?: string;
  driver?: string;
  model?: string;
  assistant?: string;
  working_dir?: string;
  options?: Record<string, unknown>;
}

export interface SendOptions extends CallOptions {
  /** `auto` (default): start when idle, steer when the driver can inject, else queue. */
  intent?: SendIntent;
  /** Idempotency key: a resend with the same key is not stored twice. */
  client_msg_id?: string;
  options?: Record<string, unknown>;
  history?: HistoryMessage[];
}

/** A scheduled prompt: exactly one of `cron` (5 fields, in zone `tz`) or `every_s`. */
export interface AddScheduleOptions extends CallOptions {
  cron?: string;
  every_s?: number;
  /** IANA zone of `cron` (default UTC). */
  tz?: string;
  /** A due run while the topic answers: wait in the queue (default) or skip that due time. */
  busy?: "queue" | "skip";
  /** Due times passed while the daemon was down: one run at start (default) or none. */
  missed?: "run-once" | "skip";
  enabled?: boolean;
  /** Create a topic of this assistant for every run (then pass `topicId` ""). */
  assistant?: string;
}

export interface AttachOptions extends CallOptions {
  /** Replay the events after this seq instead of taking a snapshot. */
  since?: number;
  /** How many of the newest rows a snapshot carries (default 500). */
  maxRows?: number;
  /**
   * A transcript to keep reducing (a reconnect): `since` defaults to its seq, and replayed
   * events are applied to it. Without it a `since` attach has no transcript until a resync
   * forces a snapshot.
   */
  transcript?: Transcript;
}

/** The item a subscription yields when it (re)took a snapshot: redraw from `snapshot`. */
export interface SnapshotItem {
  readonly type: "snapshot";
  readonly topic_id: string;
  readonly seq: number;
  readonly snapshot: Snapshot;
}

export type SubscriptionItem = SnapshotItem | TopicEvent;

type Waiter = { resolve(result: Result): void; reject(error: unknown): void };

/** One connection to the daemon. Use `Client.connect` (or `connect` from `hostd-client/node`). */
export class Client {
  /** The daemon's `welcome` (set once connected). */
  welcome!: Welcome;
  private nextId = 1;
  private readonly waiting = new Map<number, Waiter>();
  private readonly subs = new Map<string, Subscription>();
  private topicWatch: TopicWatch | null = null;
  private closedBy: HostdError | null = null;
  private readonly closeWaiters: Array<(reason: HostdError) => void> = [];
  private welcomeWaiter: Waiter | null = null;
  private maxFrameSize: number;

  private constructor(
    private readonly transport: Transport,
    maxFrameSize: number,
  ) {
    this.maxFrameSize = maxFrameSize;
  }

  /** Handshake on an open transport; resolves once the daemon welcomed us. */
  static async connect(transport: Transport, options: ClientOptions = {}): Promise<Client> {
    const client = new Client(transport, options.maxFrameSize ?? DEFAULT_MAX_FRAME_SIZE);
    transport.start({
      frame: (body) => client.onFrame(body),
      closed: (reason) => client.fail(reason),
    });
    try {
      await client.hello(options);
    } catch (exc) {
      client.close();
      throw exc;
    }
    if (options.maxFrameSize === undefined && client.welcome.max_frame_size) {
      client.maxFrameSize = client.welcome.max_frame_size;
    }
    return client;
  }

  /** Why the connection ended, or null while it is open. */
  get closedReason(): HostdError | null {
    return this.closedBy;
  }

  /** Resolves with the reason once the connection ended (by us: `ConnectionClosed`). */
  closed(): Promise<HostdError> {
    if (this.closedBy !== null) return Promise.resolve(this.closedBy);
    return new Promise((resolve) => this.closeWaiters.push(resolve));
  }

  /** Close the connection; waiting calls fail with `ConnectionClosed`. Idempotent. */
  close(): void {
    this.fail(new ConnectionClosed("the client closed the connection"));
    this.transport.close();
  }

  // --- plumbing ------------------------------------------------------------------------

  private hello(options: ClientOptions): Promise<void> {
    const { signal } = options;
    if (signal?.aborted) return Promise.reject(signal.reason);
    return new Promise<void>((resolve, reject) => {
      const onAbort = (): void => reject(signal?.reason);
      signal?.addEventListener("abort", onAbort, { once: true });
      this.welcomeWaiter = {
        resolve: () => {
          signal?.removeEventListener("abort", onAbort);
          resolve();
        },
        reject: (error) => {
          signal?.removeEventListener("abort", onAbort);
          reject(error);
        },
      };
      try {
        this.transport.send(
          JSON.stringify({
            type: "hello",
            protocol_version: [PROTOCOL_VERSION[0], PROTOCOL_VERSION[1]],
            client: options.clientName ?? "hostd-client-ts",
            ...(options.token ? { token: options.token } : {}),
          }),
        );
      } catch (exc) {
        this.welcomeWaiter.reject(exc);
      }
    });
  }

  private onFrame(body: string): void {
    if (this.closedBy !== null) return;
    let msg: ServerMessage;
    try {
      msg = decodeBody(body);
    } catch (exc) {
      this.fail(exc instanceof HostdError ? exc : new InvalidMessage(String(exc)));
      this.transport.close();
      return;
    }
    this.dispatch(msg);
  }

  private dispatch(msg: ServerMessage): void {
    switch (msg.type) {
      case "welcome": {
        const waiter = this.welcomeWaiter;
        this.welcomeWaiter = null;
        if (waiter === null) return;
        const [major] = msg.protocol_version;
        if (major !== PROTOCOL_VERSION[0]) {
          const error = new VersionMismatch(
            `hostd speaks protocol ${msg.protocol_version.join(".")}, this client ` +
              `${PROTOCOL_VERSION.join(".")}; upgrade the older side`,
          );
          waiter.reject(error);
          this.fail(error);
          this.transport.close();
          return;
        }
        this.welcome = msg;
        waiter.resolve({ type: "empty" });
        return;
      }
      case "reply": {
        const waiter = this.waiting.get(msg.id);
        this.waiting.delete(msg.id);
        waiter?.resolve(msg.result);
        return;
      }
      case "error": {
        const error = errorFromCode(msg.code, msg.message, msg.details ?? {});
        if (msg.id === null || msg.id === undefined) {
          // A connection-level error (framing, handshake, access denied): fatal.
          this.fail(error);
          this.transport.close();
          return;
        }
        const waiter = this.waiting.get(msg.id);
        this.waiting.delete(msg.id);
        waiter?.reject(error);
        return;
      }
      case "topics-changed":
        this.topicWatch?.push(msg);
        return;
      default:
        // Topic events; a message of a newer daemon without a seq is not ours to handle.
        if (typeof msg.seq === "number") this.subs.get(msg.topic_id)?.push(msg);
    }
  }

  private fail(reason: HostdError): void {
    if (this.closedBy !== null) return;
    this.closedBy = reason;
    const waiters = [...this.waiting.values()];
    this.waiting.clear();
    for (const waiter of waiters) waiter.reject(reason);
    const welcome = this.welcomeWaiter;
    this.welcomeWaiter = null;
    welcome?.reject(
      reason instanceof ConnectionClosed || reason.code !== "connection_broken"
        ? reason
        : new HandshakeError(`no welcome from hostd: ${reason.message}`),
    );
    for (const sub of [...this.subs.values()]) sub.end(reason);
    this.subs.clear();
    this.topicWatch?.end(reason);
    this.topicWatch = null;
    for (const resolve of this.closeWaiters.splice(0)) resolve(reason);
  }

  /**
   * Send one request and resolve with its reply's result; rejects with the typed error the
   * daemon answered, or with the connection's end.
   */
  request(body: RequestBody, options: CallOptions = {}): Promise<Result> {
    const { signal } = options;
    if (this.closedBy !== null) return Promise.reject(this.closedBy);
    if (signal?.aborted) return Promise.reject(signal.reason);
    const id = this.nextId++;
    let text: string;
    try {
      text = encodeBody({ ...body, id } as Request, this.maxFrameSize);
    } catch (exc) {
      return Promise.reject(exc);
    }
    return new Promise<Result>((resolve, reject) => {
      const onAbort = (): void => {
        this.waiting.delete(id);
        reject(signal?.reason);
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      this.waiting.set(id, {
        resolve: (result) => {
          signal?.removeEventListener("abort", onAbort);
          resolve(result);
        },
        reject: (error) => {
          signal?.removeEventListener("abort", onAbort);
          reject(error);
        },
      });
      try {
        this.transport.send(text);
      } catch (exc) {
        this.waiting.delete(id);
        signal?.removeEventListener("abort", onAbort);
        reject(exc);
      }
    });
  }

  private async call<T extends Result["type"]>(
    body: RequestBody,
    type: T,
    options: CallOptions,
  ): Promise<Extract<Result, { type: T }>> {
    const result = await this.request(body, options);
    if (result.type !== type) {
      throw new InvalidMessage(`expected a ${type} result for ${body.type}, got ${result.type}`);
    }
    return result as Extract<Result, { type: T }>;
  }

  // --- requests ------------------------------------------------------------------------

  async createTopic(options: CreateTopicOptions = {}): Promise<TopicInfo> {
    const { signal, ...fields } = options;
    return (await this.call({ type: "create-topic", ...fields }, "topic", { signal })).topic;
  }

  /** Every topic, in creation order (pages through `list-topics` while `has_more`). */
  async listTopics(options: CallOptions = {}): Promise<TopicInfo[]> {
    const first = await this.call({ type: "list-topics" }, "topic-list", options);
    return this.restOfTopics(first, options);
  }

  private async restOfTopics(
    page: { topics: TopicInfo[]; has_more?: boolean },
    options: CallOptions,
  ): Promise<TopicInfo[]> {
    const topics = [...page.topics];
    while (page.has_more && topics.length > 0) {
      const after = topics[topics.length - 1]!.id;
      page = await this.call({ type: "list-topics", after }, "topic-list", options);
      topics.push(...page.topics);
    }
    return topics;
  }

  async getTopic(topicId: string, options: CallOptions = {}): Promise<TopicInfo> {
    return (await this.call({ type: "get-topic", topic_id: topicId }, "topic", options)).topic;
  }

  async renameTopic(topicId: string, title: string, options: CallOptions = {}): Promise<TopicInfo> {
    const body = { type: "rename-topic", topic_id: topicId, title } as const;
    return (await this.call(body, "topic", options)).topic;
  }

  async deleteTopic(topicId: string, options: CallOptions = {}): Promise<void> {
    await this.call({ type: "delete-topic", topic_id: topicId }, "empty", options);
  }

  /** Send a user message; resolves once it is committed, saying what happened to it. */
  send(topicId: string, text: string, options: SendOptions = {}): Promise<SendResult> {
    const { signal, ...fields } = options;
    return this.call({ type: "send", topic_id: topicId, text, ...fields }, "sent", { signal });
  }

  /** Continue the topic's last turn, which failed or was stopped, from its resume data. */
  continueTurn(topicId: string, options: CallOptions = {}): Promise<SendResult> {
    return this.call({ type: "continue", topic_id: topicId }, "sent", options);
  }

  async stop(topicId: string, options: CallOptions = {}): Promise<void> {
    await this.call({ type: "stop", topic_id: topicId }, "empty", options);
  }

  async answerApproval(
    topicId: string,
    approvalId: string,
    allow: boolean,
    options: CallOptions & { reason?: string } = {},
  ): Promise<void> {
    const { signal, reason } = options;
    const body = {
      type: "answer-approval",
      topic_id: topicId,
      approval_id: approvalId,
      allow,
      ...(reason ? { reason } : {}),
    } as const;
    await this.call(body, "empty", { signal });
  }

  async editQueued(topicId: string, rowId: string, text: string, options: CallOptions = {}): Promise<void> {
    await this.call({ type: "edit-queued", topic_id: topicId, row_id: rowId, text }, "empty", options);
  }

  async discardQueued(topicId: string, rowId: string, options: CallOptions = {}): Promise<void> {
    await this.call({ type: "discard-queued", topic_id: topicId, row_id: rowId }, "empty", options);
  }

  /** Stop the running turn and run the queued row `rowId` next. */
  async sendNow(topicId: string, rowId: string, options: CallOptions = {}): Promise<void> {
    await this.call({ type: "send-now", topic_id: topicId, row_id: rowId }, "empty", options);
  }

  /**
   * A stored row's whole content, read in bounded pieces: for a row a snapshot or history page
   * delivered cut (`meta.truncated`). Pieces of one part are joined.
   */
  async readRow(topicId: string, rowId: string, options: CallOptions = {}): Promise<Chunk[]> {
    const parts: Chunk[] = [];
    let part = 0;
    let offset = 0;
    for (;;) {
      const body = {
        type: "read-row",
        topic_id: topicId,
        row_id: rowId,
        ...(part ? { part } : {}),
        ...(offset ? { offset } : {}),
      } as const;
      const r = await this.call(body, "row-content", options);
      r.parts.forEach((piece, i) => {
        const last = parts[parts.length - 1];
        if (i === 0 && offset && last !== undefined) parts[parts.length - 1] = joinPieces(last, piece);
        else parts.push(piece);
      });
      if (r.done ?? true) return parts;
      const nextPart = r.next_part ?? 0;
      const nextOffset = r.next_offset ?? 0;
      if (nextPart < part || (nextPart === part && nextOffset <= offset)) {
        throw new ProtocolError(`read-row of ${rowId} made no progress at ${part}:${offset}`);
      }
      part = nextPart;
      offset = nextOffset;
    }
  }

  async prewarm(topicId: string, options: CallOptions = {}): Promise<void> {
    await this.call({ type: "prewarm", topic_id: topicId }, "empty", options);
  }

  /** A page of rows before `beforePosition` (exclusive), oldest first. */
  history(
    topicId: string,
    options: CallOptions & { beforePosition?: number; limit?: number; all?: boolean } = {},
  ): Promise<HistoryResult> {
    const { signal, beforePosition, limit, all } = options;
    const body = {
      type: "history",
      topic_id: topicId,
      ...(beforePosition !== undefined ? { before_position: beforePosition } : {}),
      ...(limit !== undefined ? { limit } : {}),
      ...(all ? { all } : {}),
    } as const;
    return this.call(body, "history-page", { signal });
  }

  /**
   * Cut the history after `rowId` (and `rowId` itself with `include`); resolves with the ids
   * cut (kept in the store as superseded). With `stop`, a running turn is stopped first.
   */
  async rewind(
    topicId: string,
    rowId: string,
    options: CallOptions & { include?: boolean; stop?: boolean } = {},
  ): Promise<string[]> {
    const { signal, include, stop } = options;
    const body = {
      type: "rewind",
      topic_id: topicId,
      row_id: rowId,
      ...(include ? { include } : {}),
      ...(stop ? { stop } : {}),
    } as const;
    return (await this.call(body, "rewound", { signal })).row_ids ?? [];
  }

  /** Answer the last user message again (it and its answer are superseded). */
  regenerate(
    topicId: string,
    options: CallOptions & { stop?: boolean; clientMsgId?: string } = {},
  ): Promise<SendResult> {
    const { signal, stop, clientMsgId } = options;
    const body = {
      type: "regenerate",
      topic_id: topicId,
      ...(stop ? { stop } : {}),
      ...(clientMsgId ? { client_msg_id: clientMsgId } : {}),
    } as const;
    return this.call(body, "sent", { signal });
  }

  /** Replace the sent message `rowId` (and everything after it) by `text`, sent anew. */
  editResend(
    topicId: string,
    rowId: string,
    text: string,
    options: CallOptions & { stop?: boolean; clientMsgId?: string } = {},
  ): Promise<SendResult> {
    const { signal, stop, clientMsgId } = options;
    const body = {
      type: "edit-resend",
      topic_id: topicId,
      row_id: rowId,
      text,
      ...(stop ? { stop } : {}),
      ...(clientMsgId ? { client_msg_id: clientMsgId } : {}),
    } as const;
    return this.call(body, "sent", { signal });
  }

  /** A new topic with the history of `topicId` up to and including `rowId`. */
  async forkTopic(
    topicId: string,
    rowId: string,
    options: CallOptions & { title?: string } = {},
  ): Promise<TopicInfo> {
    const { signal, title } = options;
    const body = {
      type: "fork-topic",
      topic_id: topicId,
      row_id: rowId,
      ...(title ? { title } : {}),
    } as const;
    return (await this.call(body, "topic", { signal })).topic;
  }

  /** Every row of a topic, oldest first (pages through `history`). */
  async allRows(topicId: string, options: CallOptions = {}): Promise<HistoryResult["rows"]> {
    const pages: HistoryResult["rows"][] = [];
    let before: number | undefined;
    for (;;) {
      const page = await this.history(topicId, { ...options, beforePosition: before, limit: 500 });
      pages.unshift(page.rows);
      const first = page.rows[0];
      if (!page.has_more || first === undefined) break;
      before = first.position;
    }
    return pages.flat();
  }

  status(options: CallOptions = {}): Promise<StatusResult> {
    return this.call({ type: "status" }, "daemon-status", options);
  }

  async listDrivers(options: CallOptions = {}): Promise<DriverInfo[]> {
    return (await this.call({ type: "list-drivers" }, "driver-list", options)).drivers;
  }

  ping(options: CallOptions = {}): Promise<Pong> {
    return this.call({ type: "ping" }, "pong", options);
  }

  /** Token/cost totals per topic (and per turn of `topicId`), since the daemon started. */
  usage(topicId = "", options: CallOptions = {}): Promise<UsageTotals> {
    const body = { type: "get-usage", ...(topicId ? { topic_id: topicId } : {}) } as const;
    return this.call(body, "usage-totals", options);
  }

  // --- schedules (names as in the Python client) -------------------------------------

  /** Send `text` to `topicId` at every due time of `cron` or every `every_s` seconds. */
  async addSchedule(topicId: string, text: string, options: AddScheduleOptions = {}): Promise<ScheduleInfo> {
    const { signal, ...fields } = options;
    const body = { type: "add-schedule", topic_id: topicId, text, ...fields } as const;
    return (await this.call(body, "schedule", { signal })).schedule;
  }

  /** All schedules, or those of `topicId`. */
  async listSchedules(topicId = "", options: CallOptions = {}): Promise<ScheduleInfo[]> {
    const body = { type: "list-schedules", ...(topicId ? { topic_id: topicId } : {}) } as const;
    return (await this.call(body, "schedule-list", options)).schedules;
  }

  async removeSchedule(scheduleId: string, options: CallOptions = {}): Promise<void> {
    await this.call({ type: "remove-schedule", schedule_id: scheduleId }, "empty", options);
  }

  pauseSchedule(scheduleId: string, options: CallOptions = {}): Promise<ScheduleInfo> {
    return this.setScheduleEnabled(scheduleId, false, options);
  }

  /** Run again from now on (due times passed while paused are not run). */
  resumeSchedule(scheduleId: string, options: CallOptions = {}): Promise<ScheduleInfo> {
    return this.setScheduleEnabled(scheduleId, true, options);
  }

  async setScheduleEnabled(scheduleId: string, enabled: boolean, options: CallOptions = {}): Promise<ScheduleInfo> {
    const body = { type: "set-schedule-enabled", schedule_id: scheduleId, enabled } as const;
    return (await this.call(body, "schedule", options)).schedule;
  }

  /** Send the schedule's message now; rejects with TopicBusy while its previous run goes on. */
  async runScheduleNow(scheduleId: string, options: CallOptions = {}): Promise<ScheduleInfo> {
    return (await this.call({ type: "run-schedule-now", schedule_id: scheduleId }, "schedule", options)).schedule;
  }

  /** Ask the daemon to stop; resolves once it closed this connection (turns stopped, store flushed). */
  async shutdown(options: CallOptions & { wait?: boolean } = {}): Promise<void> {
    const { signal, wait = true } = options;
    await this.call({ type: "shutdown" }, "empty", { signal });
    if (wait) await this.closed();
  }

  /**
   * Watch the topic list (one watch per connection): resolves once the daemon sent the list
   * (`watch.topics()`); iterating the watch yields each later change (`topics-changed`:
   * created, changed, deleted by any window), applied to `topics()` as it is yielded.
   */
  async watchTopics(options: CallOptions = {}): Promise<TopicWatch> {
    if (this.topicWatch !== null) throw new HostdError("this connection already watches the topic list");
    const watch = new TopicWatch(this);
    // Registered before the request: changes right behind the reply are routed to it.
    this.topicWatch = watch;
    try {
      const first = await this.call({ type: "watch-topics" }, "topic-list", options);
      // Changes that arrive while the rest is paged are older than the pages that follow them.
      watch.reset(await this.restOfTopics(first, options));
    } catch (exc) {
      this.topicWatch = null;
      watch.end(null);
      throw exc;
    }
    return watch;
  }

  /** @internal */
  async unwatchTopics(watch: TopicWatch, options: CallOptions): Promise<void> {
    if (this.topicWatch !== watch) return;
    this.topicWatch = null;
    if (this.closedBy !== null) return;
    await this.call({ type: "unwatch-topics" }, "empty", options);
  }

  /**
   * Subscribe to a topic (one subscription per topic per connection). Without `since`: the
   * first item is a `snapshot`. With `since` (or `transcript`): the missed events, then
   * `replay-end`, then live events. Aborting `signal` later ends the subscription (detach).
   */
  async attach(topicId: string, options: AttachOptions = {}): Promise<Subscription> {
    if (this.subs.has(topicId)) {
      throw new HostdError(`already attached to topic ${topicId} on this connection`);
    }
    const since = options.since ?? options.transcript?.seq;
    const sub = new Subscription(this, topicId, options.maxRows ?? 500, options.transcript ?? null);
    // Registered before the request, so events right behind the reply are routed.
    this.subs.set(topicId, sub);
    try {
      if (since !== undefined) sub.seq = since;
      await sub.attachNow(since, options.signal);
    } catch (exc) {
      this.subs.delete(topicId);
      sub.end(null);
      // Aborted while the daemon may still attach us: undo it (requests are served in order).
      if (options.signal?.aborted && this.closedBy === null) {
        this.request({ type: "detach", topic_id: topicId }).catch(() => undefined);
      }
      throw exc;
    }
    const { signal } = options;
    signal?.addEventListener("abort", () => void sub.detach().catch(() => undefined), { once: true });
    return sub;
  }

  /** @internal */
  attachRequest(topicId: string, since: number | undefined, maxRows: number, signal?: AbortSignal): Promise<AttachResult> {
    const body = {
      type: "attach",
      topic_id: topicId,
      ...(since !== undefined ? { since } : {}),
      ...(maxRows !== 500 ? { max_rows: maxRows } : {}),
    } as const;
    return this.call(body, "attached", { signal });
  }

  /** @internal */
  async detachSub(sub: Subscription, options: CallOptions): Promise<void> {
    if (this.subs.get(sub.topicId) !== sub) return;
    this.subs.delete(sub.topicId);
    if (this.closedBy !== null) return;
    await this.call({ type: "detach", topic_id: sub.topicId }, "empty", options);
  }
}

/**
 * The live view of one attached topic: iterate it (`for await`) for `SubscriptionItem`s.
 * `transcript` is kept current before each item is yielded; `seq` is the last seq seen.
 */
export class Subscription implements AsyncIterable<SubscriptionItem> {
  /** The snapshot taken at attach; `snapshot` is the latest (a resync takes a new one). */
  first: Snapshot | null = null;
  snapshot: Snapshot | null = null;
  seq = 0;
  /** How often the host told us to resync, and how often we saw a seq gap ourselves. */
  resyncs = 0;
  gaps = 0;
  private replaying = false;
  private readonly queue: TopicEvent[] = [];
  private readonly pending: SubscriptionItem[] = [];
  private wake: (() => void) | null = null;
  private ended = false;
  private endReason: HostdError | null = null;
  private reading = false;

  /** @internal */
  constructor(
    private readonly client: Client,
    readonly topicId: string,
    readonly maxRows: number,
    public transcript: Transcript | null,
  ) {}

  /** True once detached, or the connection ended. */
  get closed(): boolean {
    return this.ended;
  }

  /** @internal */
  push(event: TopicEvent): void {
    if (this.ended) return;
    this.queue.push(event);
    this.wakeUp();
  }

  /** @internal: the subscription ends; a reason other than our own close is thrown by `next`. */
  end(reason: HostdError | null): void {
    if (this.ended) return;
    this.ended = true;
    this.endReason = reason instanceof ConnectionClosed ? null : reason;
    this.wakeUp();
  }

  private wakeUp(): void {
    const wake = this.wake;
    this.wake = null;
    wake?.();
  }

  /** @internal */
  async attachNow(since: number | undefined, signal?: AbortSignal): Promise<void> {
    this.replaying = since !== undefined;
    const result = await this.client.attachRequest(this.topicId, since, this.maxRows, signal);
    if (result.mode === "snapshot") {
      if (!result.snapshot) throw new InvalidMessage("attached in snapshot mode without a snapshot");
      this.reset(result.snapshot);
    }
  }

  private reset(snapshot: Snapshot): void {
    if (this.first === null) this.first = snapshot;
    this.snapshot = snapshot;
    this.transcript = new Transcript(snapshot);
    this.seq = snapshot.seq;
    this.pending.push({ type: "snapshot", topic_id: this.topicId, seq: snapshot.seq, snapshot });
  }

  /** Detach (idempotent); the iteration then ends. */
  async detach(options: CallOptions = {}): Promise<void> {
    if (this.ended) {
      await this.client.detachSub(this, options).catch(() => undefined);
      return;
    }
    this.end(null);
    try {
      await this.client.detachSub(this, options);
    } catch (exc) {
      if (!(exc instanceof HostdError)) throw exc;
    }
  }

  [Symbol.asyncIterator](): AsyncIterator<SubscriptionItem> {
    return { next: () => this.next() };
  }

  /**
   * The next item: a `snapshot` (first, and after a forced resync), or a topic event already
   * applied to `transcript`. Done once detached; throws the connection's end when it broke.
   */
  async next(options: CallOptions = {}): Promise<IteratorResult<SubscriptionItem, undefined>> {
    if (this.reading) throw new HostdError("Subscription.next is already waiting (one reader at a time)");
    this.reading = true;
    try {
      return await this.nextItem(options.signal);
    } finally {
      this.reading = false;
    }
  }

  private async nextItem(signal?: AbortSignal): Promise<IteratorResult<SubscriptionItem, undefined>> {
    for (;;) {
      const item = this.pending.shift();
      if (item !== undefined) return { value: item, done: false };
      if (this.ended) {
        if (this.endReason !== null) throw this.endReason;
        return { value: undefined, done: true };
      }
      const event = this.queue.shift();
      if (event === undefined) {
        await this.waitForEvent(signal);
        continue;
      }
      if (event.type === "replay-end") {
        this.replaying = false;
        return { value: event, done: false };
      }
      if (event.type === "resync") {
        this.resyncs += 1;
        // During a replay the host no longer has our events: take a new snapshot. Otherwise
        // we fell behind live: try to replay from our seq first.
        await this.attachNow(this.replaying ? undefined : this.seq, signal);
        continue;
      }
      if (event.seq <= this.seq) continue; // already in the snapshot, or replay overlap
      if (event.seq !== this.seq + 1) {
        this.gaps += 1;
        await this.attachNow(this.seq, signal);
        continue;
      }
      this.transcript?.apply(event);
      this.seq = event.seq;
      return { value: event, done: false };
    }
  }

  private waitForEvent(signal?: AbortSignal): Promise<void> {
    if (signal?.aborted) return Promise.reject(signal.reason);
    return new Promise<void>((resolve, reject) => {
      const onAbort = (): void => {
        this.wake = null;
        reject(signal?.reason);
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      this.wake = () => {
        signal?.removeEventListener("abort", onAbort);
        resolve();
      };
    });
  }
}

/**
 * The live topic list of one connection (`Client.watchTopics`). Iterate it (`for await`): each
 * change is applied to `topics()` before it is yielded (like a subscription's transcript).
 */
export class TopicWatch implements AsyncIterable<TopicsChanged> {
  private readonly byId = new Map<string, TopicInfo>();
  private readonly queue: TopicsChanged[] = [];
  /** How many queued changes arrived before the last page of the list (already in it). */
  private settled = 0;
  private wake: (() => void) | null = null;
  private ended = false;
  private endReason: HostdError | null = null;

  /** @internal */
  constructor(private readonly client: Client) {}

  /** The topics, in the daemon's order (created order; new ones last). */
  topics(): TopicInfo[] {
    return [...this.byId.values()];
  }

  /** @internal: the list as paged; changes queued until now are older than (or in) it. */
  reset(topics: readonly TopicInfo[]): void {
    this.byId.clear();
    for (const topic of topics) this.byId.set(topic.id, topic);
    this.settled = this.queue.length;
  }

  /** @internal */
  push(change: TopicsChanged): void {
    if (this.ended) return;
    this.queue.push(change);
    const wake = this.wake;
    this.wake = null;
    wake?.();
  }

  /** @internal */
  end(reason: HostdError | null): void {
    if (this.ended) return;
    this.ended = true;
    this.endReason = reason instanceof ConnectionClosed ? null : reason;
    const wake = this.wake;
    this.wake = null;
    wake?.();
  }

  /** Stop watching (idempotent); the iteration then ends. */
  async unwatch(options: CallOptions = {}): Promise<void> {
    this.end(null);
    try {
      await this.client.unwatchTopics(this, options);
    } catch (exc) {
      if (!(exc instanceof HostdError)) throw exc;
    }
  }

  [Symbol.asyncIterator](): AsyncIterator<TopicsChanged> {
    return { next: () => this.next() };
  }

  /** The next change (already applied to `topics()`); done once unwatched. */
  async next(options: CallOptions = {}): Promise<IteratorResult<TopicsChanged, undefined>> {
    const { signal } = options;
    for (;;) {
      const change = this.queue.shift();
      if (change !== undefined) {
        const older = this.settled > 0;
        if (older) this.settled -= 1;
        if (change.change === "deleted" || !change.topic) this.byId.delete(change.topic_id);
        else if (!older) this.byId.set(change.topic_id, change.topic);
        return { value: change, done: false };
      }
      if (this.ended) {
        if (this.endReason !== null) throw this.endReason;
        return { value: undefined, done: true };
      }
      if (signal?.aborted) throw signal.reason;
      await new Promise<void>((resolve, reject) => {
        const onAbort = (): void => {
          this.wake = null;
          reject(signal?.reason);
        };
        signal?.addEventListener("abort", onAbort, { once: true });
        this.wake = () => {
          signal?.removeEventListener("abort", onAbort);
          resolve();
        };
      });
    }
  }
}

/** One part delivered in two `read-row` pieces, whole again. */
function joinPieces(head: Chunk, tail: Chunk): Chunk {
  if (head.type === "text" && tail.type === "text") return { type: "text", text: head.text + tail.text };
  if (head.type === "thinking" && tail.type === "thinking") {
    return { type: "thinking", text: head.text + tail.text };
  }
  if (head.type === "tool-result" && tail.type === "tool-result") {
    return { ...head, output: head.output + tail.output };
  }
  throw new ProtocolError("read-row continued a part with a part of another kind");
}

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
 * One typed method per request (names as in the Python client); the wire (handshake, routing,
 * errors, aborts) is `Connection`'s, live topics are `Subscription`'s, the live topic list is
 * `TopicWatch`'s.
 */
import { HostdError, InvalidArgument } from "./errors.js";
import { Connection } from "./connection.js";
import { DEFAULT_MAX_FRAME_SIZE } from "./framing.js";
import type {
  AddScheduleOptions,
  AttachOptions,
  CallOptions,
  ClientOptions,
  CreateTopicOptions,
  SendOptions,
} from "./options.js";
import type {
  AssistantInfo,
  AttachResult,
  DriverInfo,
  HistoryResult,
  Pong,
  ScheduleInfo,
  SendResult,
  StatusResult,
  TopicInfo,
  UsageTotals,
} from "./protocol.gen.js";
import { type FetchPiece, type Omitted, omittedOf, readHead, readPieces, TRUNCATED_META } from "./row_pieces.js";
import { Subscription } from "./subscription.js";
import { TopicWatch } from "./topic_watch.js";
import type { Transport } from "./transport.js";
import type { Chunk } from "./types.js";

export type {
  AddScheduleOptions,
  AttachOptions,
  CallOptions,
  ClientOptions,
  CreateTopicOptions,
  SendOptions,
  SnapshotItem,
  SubscriptionItem,
} from "./options.js";
export { Subscription } from "./subscription.js";
export { TopicWatch } from "./topic_watch.js";

/** One connection to the daemon. Use `Client.connect` (or `connect` from `hostd-client/node`). */
export class Client extends Connection {
  private constructor(transport: Transport, maxFrameSize: number) {
    super(transport, maxFrameSize);
  }

  /** Handshake on an open transport; resolves once the daemon welcomed us. */
  static async connect(transport: Transport, options: ClientOptions = {}): Promise<Client> {
    const client = new Client(transport, options.maxFrameSize ?? DEFAULT_MAX_FRAME_SIZE);
    await client.open(options);
    return client;
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

  /**
   * Stop the topic's running turn, or with `rowId` only that answer of a multi-answer turn
   * (the other answers go on; protocol 1.2). A daemon older than 1.2 would ignore `rowId` and
   * stop every answer, so the call is refused here (`InvalidArgument`) instead.
   */
  async stop(topicId: string, options: CallOptions & { rowId?: string } = {}): Promise<void> {
    const { signal, rowId } = options;
    if (rowId && !this.speaks(1, 2)) {
      throw new InvalidArgument(
        `hostd speaks protocol ${this.welcome.protocol_version.join(".")}, which stops every ` +
          "answer of a turn: stopping one answer needs 1.2",
      );
    }
    const message = { type: "stop" as const, topic_id: topicId, ...(rowId ? { row_id: rowId } : {}) };
    await this.call(message, "empty", { signal });
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
  readRow(topicId: string, rowId: string, options: CallOptions = {}): Promise<Chunk[]> {
    return readPieces(this.rowPieces(topicId, rowId, options), rowId);
  }

  /**
   * Only what a cut row left out (`omittedOf(row)`), to put in front of the parts a window
   * holds (`Transcript.restoreHead`); null when the stored row does not reach that far.
   */
  readRowHead(topicId: string, rowId: string, omitted: Omitted, options: CallOptions = {}): Promise<Chunk[] | null> {
    return readHead(this.rowPieces(topicId, rowId, options), rowId, omitted);
  }

  private rowPieces(topicId: string, rowId: string, options: CallOptions): FetchPiece {
    return (part, offset) => {
      const body = {
        type: "read-row",
        topic_id: topicId,
        row_id: rowId,
        ...(part ? { part } : {}),
        ...(offset ? { offset } : {}),
      } as const;
      return this.call(body, "row-content", options);
    };
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

  /**
   * Continue the conversation from the answer `rowId` of a multi-answer turn: the other
   * answers of its turn become alternatives (`row-updated` `alternative`), still shown but left
   * out of later turns' history. Allowed while that turn runs; `TopicBusy` while a later one
   * runs; `InvalidArgument` for a row that is not such an answer (protocol 1.1).
   */
  async chooseAnswer(topicId: string, rowId: string, options: CallOptions = {}): Promise<void> {
    await this.call({ type: "choose-answer", topic_id: topicId, row_id: rowId }, "empty", options);
  }

  /**
   * Whether the daemon speaks at least protocol `major.minor` (1.1: `also`, `chooseAnswer`;
   * 1.2: `stop` of one answer; 1.3: `listAssistants`).
   */
  speaks(major: number, minor: number): boolean {
    const [m = 0, n = 0] = this.welcome.protocol_version;
    return m === major && n >= minor;
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

  /**
   * Every row of a topic, oldest first (pages through `history`; with `all`, the rows a rewind
   * superseded too, marked `superseded`); a row a page delivered cut (`meta.truncated`) is
   * read whole (`readRow`).
   */
  async allRows(topicId: string, options: CallOptions & { all?: boolean } = {}): Promise<HistoryResult["rows"]> {
    const pages: HistoryResult["rows"][] = [];
    let before: number | undefined;
    for (;;) {
      const page = await this.history(topicId, { ...options, beforePosition: before, limit: 500 });
      pages.unshift(page.rows);
      const first = page.rows[0];
      if (!page.has_more || first === undefined) break;
      before = first.position;
    }
    const rows = pages.flat();
    for (const [i, row] of rows.entries()) {
      if (omittedOf(row) === null) continue;
      const { [TRUNCATED_META]: _cut, ...meta } = row.meta ?? {};
      rows[i] = { ...row, meta, parts: await this.readRow(topicId, row.id, options) };
    }
    return rows;
  }

  status(options: CallOptions = {}): Promise<StatusResult> {
    return this.call({ type: "status" }, "daemon-status", options);
  }

  async listDrivers(options: CallOptions = {}): Promise<DriverInfo[]> {
    return (await this.call({ type: "list-drivers" }, "driver-list", options)).drivers;
  }

  /**
   * The configured assistants, sorted by name, with the driver/model each resolves to and
   * whether it can answer (`error` says why not, e.g. a broken file). Protocol 1.3: an older
   * daemon rejects it with `UnknownRequest` (check `speaks(1, 3)` before offering it).
   * `profile` resolves `use::<role>` models for that profile.
   */
  async listAssistants(profile = "", options: CallOptions = {}): Promise<AssistantInfo[]> {
    const message = { type: "list-assistants" as const, ...(profile ? { profile } : {}) };
    return (await this.call(message, "assistant-list", options)).assistants ?? [];
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
    const sub = new Subscription(
      this,
      topicId,
      options.maxRows ?? 500,
      options.transcript ?? null,
      options.wholeRows ?? true,
    );
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

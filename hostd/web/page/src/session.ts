/**
 * The page's one connection to the daemon (through the gateway), kept alive across drops.
 *
 * Everything protocol-shaped comes from `hostd-client`: `connectWebSocket` + `Client` speak the
 * wire, `Subscription` keeps a `Transcript` (the same reducer as hostd/transcript.py). This file
 * only decides *when*: connect, attach the topic in the address bar, and after a drop (daemon
 * restarted, gateway gone) reconnect with a backoff and re-attach with the transcript we have,
 * so the client resumes with `attach since=seq` instead of a fresh snapshot.
 */
import {
  Client,
  connectWebSocket,
  HostdError,
  omittedOf,
  type ApprovalInfo,
  type CommandInfo,
  type DriverInfo,
  type MessageRow,
  type Subscription,
  type SubscriptionItem,
  type TopicInfo,
  type TopicWatch,
  type Transcript,
  type Transport,
  type Usage,
} from "hostd-client";

import { connectDesktop, inDesktopApp } from "./desktop";

/** Opens one transport to the daemon (a new one after each drop). */
export type Connect = () => Promise<Transport>;

export type ConnStatus = "connecting" | "online" | "offline";

export interface ViewState {
  conn: ConnStatus;
  /** Why the connection is not online (the gateway's close reason, or the error). */
  connReason: string;
  topics: TopicInfo[];
  topicId: string;
  rows: MessageRow[];
  /** History rows older than the snapshot (it carries the newest only), read on request. */
  older: MessageRow[];
  /** Whether rows older than `older` and `rows` exist (the snapshot or the last page said so). */
  hasOlder: boolean;
  approvals: ApprovalInfo[];
  /** Why the last approval closed without an answer ("Approval for Bash closed: the agent
   * withdrew its permission request"), "" when none did (or a new one opened since). */
  approvalClosed: string;
  topicState: string;
  activeTurnId: string;
  usage: Usage | null;
  /** Rows a rewind (or regenerate, edit and resend) superseded, shown greyed among the others;
   * null while hidden. */
  removed: MessageRow[] | null;
  /** The daemon speaks protocol 1.1: several answers to one message (`also`, `choose-answer`). */
  multiAnswer: boolean;
  /** The daemon speaks protocol 1.2: one answer of a multi-answer turn can be stopped alone. */
  stopOneAnswer: boolean;
  /** The commands the topic's agent offers (typed as `/name args`; protocol 1.4). */
  commands: CommandInfo[];
  /** The daemon's drivers (read once per connection): which take images (1.6). */
  drivers: DriverInfo[];
  /** The last error of a request, one line. */
  error: string;
  /** Bumped on every change (cheap change detection for the view). */
  version: number;
}

const EMPTY: ViewState = {
  conn: "connecting",
  connReason: "",
  topics: [],
  topicId: "",
  rows: [],
  older: [],
  hasOlder: false,
  approvals: [],
  approvalClosed: "",
  topicState: "idle",
  activeTurnId: "",
  usage: null,
  removed: null,
  multiAnswer: false,
  stopOneAnswer: false,
  commands: [],
  drivers: [],
  error: "",
  version: 0,
};

function sumUsage(usage: Map<string, Usage>): Usage | null {
  if (usage.size === 0) return null;
  const total = { input_tokens: 0, output_tokens: 0, cache_read_tokens: 0, cache_write_tokens: 0, cost_usd: 0 };
  for (const u of usage.values()) {
    total.input_tokens += u.input_tokens ?? 0;
    total.output_tokens += u.output_tokens ?? 0;
    total.cache_read_tokens += u.cache_read_tokens ?? 0;
    total.cache_write_tokens += u.cache_write_tokens ?? 0;
    total.cost_usd += u.cost_usd ?? 0;
  }
  return total;
}

export function wsUrl(loc: Location = window.location): string {
  // The token travels in the HttpOnly cookie the gateway set on the first visit.
  const scheme = loc.protocol === "https:" ? "wss:" : "ws:";
  return `${scheme}//${loc.host}/ws`;
}

/**
 * The page's transport: a WebSocket through the gateway, unless the host page installed
 * another before the page loaded (`window.hostdConnect`: a desktop shell's JS-to-native
 * bridge), so the same page runs wherever a transport to the daemon exists.
 */
export function defaultConnect(): Connect {
  const hook = (window as { hostdConnect?: Connect }).hostdConnect;
  // Loaded from a file: inside `hostd app`, whose transport is pywebview's bridge.
  return hook ?? (inDesktopApp() ? connectDesktop : connectGateway);
}

/**
 * The WebSocket through the gateway. A browser tells a script nothing about a refused upgrade
 * (no status), so when it fails one plain request asks the gateway why, and the error says
 * what to do: a gateway restarted with another token refuses the cookie (401) until the
 * printed URL is opened again; a gateway that is gone does not answer at all.
 */
async function connectGateway(): Promise<Transport> {
  try {
    return await connectWebSocket(wsUrl());
  } catch (exc) {
    let status = 0;
    try {
      status = (await fetch("./", { cache: "no-store", redirect: "manual" })).status;
    } catch {
      throw new Error("hostd web is not running: start it again on the same port (hostd web --port N); this page reconnects by itself");
    }
    if (status === 401) {
      throw new Error("hostd web restarted with a new token: open the URL it printed (also in its web-url file)");
    }
    throw exc;
  }
}

export class Session {
  state: ViewState = { ...EMPTY };
  constructor(private readonly connect: Connect = defaultConnect()) {}
  client: Client | null = null;
  private sub: Subscription | null = null;
  private transcript: Transcript | null = null;
  private listeners = new Set<() => void>();
  /** Called with each event of the open topic as it arrives (notifications watch these). */
  onEvent: ((item: SubscriptionItem) => void) | null = null;
  private attachAbort: AbortController | null = null;
  private wantTopic = "";
  private failures = 0;
  private wake: (() => void) | null = null;
  /** The connection whose topic list is live (`watch-topics`): no need to read it again. */
  private watched: Client | null = null;

  subscribe(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  private set(patch: Partial<ViewState>): void {
    this.state = { ...this.state, ...patch, version: this.state.version + 1 };
    for (const l of this.listeners) l();
  }

  private fromTranscript(): void {
    const t = this.transcript;
    if (t === null) return;
    this.set({
      rows: t.rows(),
      approvals: t.approvals().filter((a) => a.status === undefined || a.status === "open"),
      topicState: t.state,
      activeTurnId: t.activeTurnId,
      usage: sumUsage(t.usage),
      commands: t.commands,
    });
  }

  /** Connect and stay connected (runs for the page's life). */
  async run(): Promise<void> {
    for (;;) {
      this.set({ conn: "connecting" });
      let client: Client;
      try {
        const transport = await this.connect();
        client = await Client.connect(transport, { clientName: "hostd-web" });
      } catch (exc) {
        await this.offline(exc);
        continue;
      }
      this.client = client;
      this.failures = 0;
      this.set({ conn: "online", connReason: "", multiAnswer: client.speaks(1, 1), stopOneAnswer: client.speaks(1, 2) });
      void this.keepTopics(client);
      void client.listDrivers().then((drivers) => this.set({ drivers }), () => undefined);
      if (this.wantTopic) void this.attach(this.wantTopic);
      const reason = await client.closed();
      this.client = null;
      this.sub = null;
      await this.offline(reason);
    }
  }

  private async offline(exc: unknown): Promise<void> {
    this.failures += 1;
    const text = exc instanceof Error ? exc.message : String(exc);
    this.set({ conn: "offline", connReason: text });
    // 0.25 s, 0.5 s, 1 s, 2 s, then every 3 s; `reconnectNow` cuts the wait short.
    const delay = Math.min(3000, 250 * 2 ** Math.min(this.failures - 1, 4));
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, delay);
      this.wake = () => {
        clearTimeout(timer);
        resolve();
      };
    });
    this.wake = null;
  }

  reconnectNow(): void {
    this.wake?.();
  }

  /**
   * Keep the topic list current for as long as `client` is the connection. A daemon of
   * protocol 1.6 tells a watching window of every topic created, renamed, deleted, or
   * starting or ending an answer (`watch-topics`): the list is live from it. An older one
   * does not say when another topic starts or stops answering: read the list every 5 s.
   */
  private async keepTopics(client: Client): Promise<void> {
    if (client.speaks(1, 6)) {
      let watch: TopicWatch;
      try {
        watch = await client.watchTopics();
      } catch (exc) {
        if (this.client === client) this.fail(exc);
        return;
      }
      this.watched = client;
      this.showTopics(watch.topics());
      try {
        while (!(await watch.next()).done) this.showTopics(watch.topics());
      } catch {
        // The connection ended: `run` connects again and watches anew.
      }
      return;
    }
    const closed = client.closed();
    while (this.client === client) {
      await this.refreshTopics();
      await Promise.race([new Promise((resolve) => setTimeout(resolve, 5000)), closed]);
    }
  }

  private showTopics(topics: TopicInfo[]): void {
    topics.sort((a, b) => (b.updated_at ?? 0) - (a.updated_at ?? 0));
    this.set({ topics });
  }

  /** Read the topic list now (a no-op while it is live from `watch-topics`). */
  async refreshTopics(): Promise<void> {
    const client = this.client;
    if (client === null || client === this.watched) return;
    try {
      this.showTopics(await client.listTopics());
    } catch (exc) {
      this.fail(exc);
    }
  }

  /** Show `topicId` (the transcript of another topic is dropped; "" shows none). */
  async open(topicId: string): Promise<void> {
    if (topicId === this.wantTopic && this.sub !== null) return;
    this.wantTopic = topicId;
    this.attachAbort?.abort();
    this.attachAbort = null;
    if (this.sub !== null) {
      const old = this.sub;
      this.sub = null;
      void old.detach().catch(() => undefined);
    }
    this.transcript = null;
    this.set({
      topicId, rows: [], older: [], hasOlder: false, approvals: [], approvalClosed: "", usage: null, removed: null, commands: [],
      topicState: "idle", activeTurnId: "", error: "",
    });
    // A topic made elsewhere since the list was read (another window, the CLI): read it now,
    // not at the next poll, so its title shows at once.
    if (topicId && !this.state.topics.some((t) => t.id === topicId)) void this.refreshTopics();
    if (topicId && this.client !== null) await this.attach(topicId);
  }

  private async attach(topicId: string): Promise<void> {
    const client = this.client;
    if (client === null) return;
    const abort = new AbortController();
    this.attachAbort = abort;
    let sub: Subscription;
    try {
      // With the transcript we already have, the client re-attaches with `since`.
      sub = await client.attach(topicId, this.transcript ? { transcript: this.transcript } : {});
    } catch (exc) {
      this.fail(exc);
      return;
    }
    if (abort.signal.aborted || this.wantTopic !== topicId) {
      void sub.detach().catch(() => undefined);
      return;
    }
    this.sub = sub;
    if (sub.transcript) {
      if (sub.transcript !== this.transcript) this.set({ older: [], hasOlder: sub.transcript.truncated });
      this.transcript = sub.transcript;
      this.fromTranscript();
    }
    try {
      for await (const item of sub) {
        if (this.sub !== sub) break;
        this.transcript = sub.transcript;
        this.onEvent?.(item);
        if (item.type === "topic-deleted") {
          void this.refreshTopics();
          void this.open("");
          return;
        }
        if (item.type === "topic-changed") void this.refreshTopics();
        if (item.type === "approval-requested" || item.type === "turn-started") this.set({ approvalClosed: "" });
        if (item.type === "approval-resolved" && (item.status === "cancelled" || item.status === "timed_out")) {
          // Closed without an answer (its driver withdrew it, its turn ended, nobody answered):
          // every window says why, not only that the card went away.
          const tool = this.state.approvals.find((a) => a.id === item.approval_id)?.tool ?? "a tool";
          this.set({ approvalClosed: `Approval for ${tool} closed: ${item.reason || item.status}` });
        }
        // A new snapshot (a resync) starts the older rows over.
        if (item.type === "snapshot") this.set({ older: [], hasOlder: item.snapshot.truncated ?? false });
        if (item.type === "rows-removed") {
          const gone = new Set(item.row_ids);
          if (this.state.older.some((r) => gone.has(r.id))) {
            this.set({ older: this.state.older.filter((r) => !gone.has(r.id)) });
          }
          if (this.state.removed !== null) void this.loadRemoved();
        }
        this.fromTranscript();
      }
    } catch (exc) {
      // The connection ended: `run` reconnects and re-attaches from our transcript.
      if (!(exc instanceof HostdError)) this.fail(exc);
    }
  }

  /** Read the page of history rows before the oldest shown (a row cut for size read whole). */
  async loadOlder(): Promise<void> {
    const topicId = this.state.topicId;
    const first = this.state.older[0] ?? this.state.rows[0];
    const page = await this.call(async (c) => {
      const got = await c.history(topicId, { beforePosition: first?.position, limit: 100 });
      const rows = [...got.rows];
      for (const [i, row] of rows.entries()) {
        if (omittedOf(row) !== null) rows[i] = { ...row, parts: await c.readRow(topicId, row.id) };
      }
      return { rows, hasMore: got.has_more ?? false };
    });
    if (page === undefined || this.state.topicId !== topicId) return;
    const known = new Set([...this.state.older, ...this.state.rows].map((r) => r.id));
    this.set({ older: [...page.rows.filter((r) => !known.has(r.id)), ...this.state.older], hasOlder: page.hasMore });
  }

  /** Show (or hide) the superseded rows of the open topic (`history` with `all`). */
  async showRemoved(on: boolean): Promise<void> {
    if (!on) {
      this.set({ removed: null });
      return;
    }
    await this.loadRemoved();
  }

  private async loadRemoved(): Promise<void> {
    const topicId = this.state.topicId;
    const rows = await this.call((c) => c.allRows(topicId, { all: true }));
    if (rows === undefined || this.state.topicId !== topicId) return;
    this.set({ removed: rows.filter((r) => r.superseded) });
  }

  fail(exc: unknown): void {
    const text = exc instanceof HostdError ? `${exc.message} [${exc.code}]` : exc instanceof Error ? exc.message : String(exc);
    this.set({ error: text });
  }

  clearError(): void {
    this.set({ error: "" });
  }

  /**
   * Run one request; errors become the one-line error banner. A success leaves the banner
   * as it is: a read the page makes by itself (a poll, a list for a form) must not take
   * away a reason the user has not read yet. The user dismisses it, a newer error replaces
   * it, or an action of the user's own succeeds (`act`).
   */
  async call<T>(fn: (client: Client) => Promise<T>): Promise<T | undefined> {
    const client = this.client;
    if (client === null) {
      this.set({ error: "not connected to hostd" });
      return undefined;
    }
    try {
      return await fn(client);
    } catch (exc) {
      this.fail(exc);
      return undefined;
    }
  }

  /** A request the user asked for (send, create, stop, ...): as `call`, and its success
   * clears the banner (the user acted after reading it, and it may be about what they
   * just redid). */
  async act<T>(fn: (client: Client) => Promise<T>): Promise<T | undefined> {
    const before = this.state.error;
    const client = this.client;
    if (client === null) return this.call(fn);
    try {
      const result = await fn(client);
      // Only the banner the user saw when acting: one that arrived meanwhile stays.
      if (this.state.error && this.state.error === before) this.set({ error: "" });
      return result;
    } catch (exc) {
      this.fail(exc);
      return undefined;
    }
  }
}

/**
 * Rebuild a topic's transcript from a `Snapshot` plus the topic events that follow it: the
 * TypeScript twin of `hostd/transcript.py` (shared fixtures under tests/fixtures/transcripts/
 * prove both build the same rows from the same events).
 *
 * Rules it guards:
 *
 * - Events apply in `seq` order with no gap: an event at or below the current `seq` was already
 *   included (replay overlap with the snapshot) and is skipped; a gap, or a `resync`, throws
 *   `EventGap` (re-attach with `since`, or take a new snapshot).
 * - Row parts merge the same way everywhere: consecutive `text` chunks merge into one part,
 *   consecutive `thinking` chunks into one part, tool calls, results and plans stay separate parts;
 *   empty text/thinking chunks are dropped.
 * - Rows are ordered by `position` (ties keep arrival order). `row-updated` fields that are
 *   null or absent are unchanged.
 * - A window cannot know `updated_at` of rows changed by events (they do not carry it).
 */
import { EventGap } from "./errors.js";
import type {
  ApprovalInfo,
  Capabilities,
  CommandInfo,
  MessageRow,
  NoticeEvent,
  RowUpdated,
  Snapshot,
  TextDelta,
  ThinkingDelta,
  TopicInfo,
  Usage,
} from "./protocol.gen.js";
import { omittedOf, TRUNCATED_META, withHead } from "./row_pieces.js";
import type { Chunk, TopicEvent, TopicState } from "./types.js";

type TextKind = "text" | "thinking";

/** The growing parts of one row; the open text (or thinking) run is joined only when built. */
export class PartsBuilder {
  private done: Chunk[] = [];
  private kind: TextKind | null = null;
  private buf: string[] = [];

  constructor(parts: Iterable<Chunk> = []) {
    for (const part of parts) this.append(part);
  }

  /** Add one chunk; false when it carries nothing (an empty text chunk) and was dropped. */
  append(chunk: Chunk): boolean {
    if (chunk.type === "text" || chunk.type === "thinking") {
      if (!chunk.text) return false;
      if (chunk.type === this.kind) {
        this.buf.push(chunk.text);
      } else {
        this.closeRun();
        this.kind = chunk.type;
        this.buf = [chunk.text];
      }
      return true;
    }
    this.closeRun();
    this.done.push(chunk);
    return true;
  }

  /** The parts as a new array. */
  build(): Chunk[] {
    const parts = [...this.done];
    if (this.kind !== null) {
      if (this.buf.length > 1) this.buf = [this.buf.join("")];
      parts.push(textChunk(this.kind, this.buf[0] ?? ""));
    }
    return parts;
  }

  /** All visible answer text (`text` parts) joined; thinking and tools left out. */
  text(): string {
    return this.build()
      .filter((p): p is TextDelta => p.type === "text")
      .map((p) => p.text)
      .join("");
  }

  get isEmpty(): boolean {
    return this.done.length === 0 && this.kind === null;
  }

  private closeRun(): void {
    if (this.kind !== null) {
      this.done.push(textChunk(this.kind, this.buf.join("")));
      this.kind = null;
      this.buf = [];
    }
  }
}

function textChunk(kind: TextKind, text: string): TextDelta | ThinkingDelta {
  return kind === "text" ? { type: "text", text } : { type: "thinking", text };
}

/** A mutable row: its fields without parts, plus a parts builder; `freeze` caches the row. */
class LiveRow {
  base: MessageRow;
  parts: PartsBuilder;
  private cache: MessageRow | null = null;

  constructor(row: MessageRow) {
    const { parts, ...rest } = row;
    this.base = rest;
    this.parts = new PartsBuilder(parts ?? []);
  }

  freeze(): MessageRow {
    if (this.cache === null) this.cache = { ...this.base, parts: this.parts.build() };
    return this.cache;
  }

  append(chunk: Chunk): void {
    if (this.parts.append(chunk)) this.cache = null;
  }

  setParts(parts: readonly Chunk[]): void {
    this.parts = new PartsBuilder(parts);
    this.cache = null;
  }

  update(changes: Partial<MessageRow>): void {
    this.base = { ...this.base, ...changes };
    this.cache = null;
  }
}

const UPDATABLE = [
  "status",
  "position",
  "turn_id",
  "error",
  "error_code",
  "empty",
  "alternative",
  "usage",
  "meta",
] as const;

/**
 * A window's copy of one topic, kept current by applying topic events.
 *
 * `topic`, `seq`, `state`, `activeTurnId`, `capabilities`, `usage` (last `usage-updated` per
 * turn id), `notices` (the last `maxNotices`), `commands` (the agent's command list), `deleted`.
 */
export class Transcript {
  topic: TopicInfo;
  seq: number;
  state: TopicState;
  activeTurnId: string;
  truncated: boolean;
  deleted = false;
  /**
   * What the topic's driver can do (e.g. `inject_steering` for a steer button), from
   * `turn-started` (when it says `capabilities_known`) and `driver-ready`; null while unknown.
   */
  capabilities: Capabilities | null = null;
  readonly usage = new Map<string, Usage>();
  readonly notices: NoticeEvent[] = [];
  /** The commands the topic's agent offers (`snapshot.commands`, then `commands-changed`). */
  commands: CommandInfo[];
  private readonly maxNotices: number;
  private readonly liveRows = new Map<string, LiveRow>();
  private readonly openApprovals = new Map<string, ApprovalInfo>();

  constructor(snapshot: Snapshot, options: { maxNotices?: number } = {}) {
    this.topic = snapshot.topic;
    this.seq = snapshot.seq;
    this.state = snapshot.topic.state ?? "idle";
    this.activeTurnId = snapshot.active_turn_id ?? "";
    this.truncated = snapshot.truncated ?? false;
    this.maxNotices = options.maxNotices ?? 100;
    this.commands = [...(snapshot.commands ?? [])];
    for (const row of snapshot.rows ?? []) this.liveRows.set(row.id, new LiveRow(row));
    for (const approval of snapshot.approvals ?? []) this.openApprovals.set(approval.id, approval);
  }

  /**
   * Apply one event. Returns true if it moved the transcript's seq; false if it was already
   * included (seq at or below ours) or carries no seq of its own (`replay-end`).
   * Throws `EventGap` when its seq skips events, or for `resync`.
   */
  apply(event: TopicEvent): boolean {
    if (event.type === "replay-end") return false;
    if (event.type === "resync") {
      throw new EventGap(
        `topic ${event.topic_id}: the host can no longer replay events after seq ${this.seq} ` +
          `(${event.reason || "replay buffer exceeded"}); take a fresh snapshot`,
      );
    }
    if (event.seq <= this.seq) return false;
    if (event.seq !== this.seq + 1) {
      throw new EventGap(
        `topic ${event.topic_id}: missed events ${this.seq + 1}..${event.seq - 1}; ` +
          `reattach with since=${this.seq}`,
      );
    }
    this.seq = event.seq;
    this.applyEvent(event);
    return true;
  }

  private applyEvent(event: TopicEvent): void {
    switch (event.type) {
      case "row-appended":
        this.liveRows.get(event.row_id)?.append(event.chunk);
        break;
      case "row-opened":
        this.liveRows.set(event.row.id, new LiveRow(event.row));
        break;
      case "row-updated":
        this.updateRow(event);
        break;
      case "row-removed":
        this.liveRows.delete(event.row_id);
        break;
      case "rows-removed":
        for (const rowId of event.row_ids) this.liveRows.delete(rowId);
        break;
      case "turn-started":
        this.activeTurnId = event.turn_id;
        if (event.capabilities_known) this.capabilities = event.capabilities ?? {};
        break;
      case "driver-ready":
        this.capabilities = event.capabilities ?? {};
        break;
      case "turn-ended":
        if (this.activeTurnId === event.turn_id) this.activeTurnId = "";
        break;
      case "state-changed":
        this.state = event.state;
        break;
      case "approval-requested":
        this.openApprovals.set(event.approval.id, event.approval);
        break;
      case "approval-resolved":
        this.openApprovals.delete(event.approval_id);
        break;
      case "usage-updated":
        this.usage.set(event.turn_id, event.usage);
        break;
      case "notice":
        this.notices.push(event);
        if (this.notices.length > this.maxNotices) {
          this.notices.splice(0, this.notices.length - this.maxNotices);
        }
        break;
      case "commands-changed":
        this.commands = [...(event.commands ?? [])];
        break;
      case "topic-changed":
        this.topic = event.topic;
        break;
      case "topic-deleted":
        this.deleted = true;
        this.state = "closed";
        break;
      default:
        // `rolled`: the row events before it already did the work. Unknown (newer) events
        // only move the seq.
        break;
    }
  }

  private updateRow(event: RowUpdated): void {
    const row = this.liveRows.get(event.row_id);
    if (row === undefined) return; // older than this window's (truncated) snapshot
    const changes: Record<string, unknown> = {};
    let changed = false;
    for (const name of UPDATABLE) {
      const value = event[name];
      if (value !== null && value !== undefined) {
        changes[name] = value;
        changed = true;
      }
    }
    if (changed) row.update(changes as Partial<MessageRow>);
    if (event.parts !== null && event.parts !== undefined) row.setParts(event.parts);
  }

  /**
   * Put back the head a cut row left out (`meta.truncated`, read with `Client.readRowHead`) in
   * front of what the row holds now (it may have grown since): the row is whole again and its
   * mark is gone. False when the row is unknown or not cut.
   */
  restoreHead(rowId: string, head: readonly Chunk[]): boolean {
    const row = this.liveRows.get(rowId);
    const omitted = row === undefined ? null : omittedOf(row.base);
    if (row === undefined || omitted === null) return false;
    row.setParts(withHead(head, row.parts.build(), omitted));
    const { [TRUNCATED_META]: _cut, ...meta } = row.base.meta ?? {};
    row.update({ meta });
    return true;
  }

  // --- reading -------------------------------------------------------------------------

  /** All rows, ordered by position. */
  rows(): MessageRow[] {
    return [...this.liveRows.values()]
      .sort((a, b) => a.base.position - b.base.position)
      .map((r) => r.freeze());
  }

  row(rowId: string): MessageRow | undefined {
    return this.liveRows.get(rowId)?.freeze();
  }

  /** Open approvals, in the order they were requested. */
  approvals(): ApprovalInfo[] {
    return [...this.openApprovals.values()];
  }

  /** The transcript as a `Snapshot` (the shape the host sends on attach). */
  snapshot(maxRows?: number): Snapshot {
    let rows = this.rows();
    let truncated = this.truncated;
    if (maxRows !== undefined && rows.length > maxRows) {
      rows = rows.slice(rows.length - maxRows);
      truncated = true;
    }
    return {
      topic: { ...this.topic, state: this.state, seq: this.seq },
      seq: this.seq,
      rows,
      approvals: this.approvals(),
      active_turn_id: this.activeTurnId,
      truncated,
      ...(this.commands.length > 0 ? { commands: [...this.commands] } : {}),
    };
  }
}

/**
 * The live view of one attached topic (`Client.attach`).
 *
 * Rules this module guards:
 *
 * - A subscription hides replay and resync from the caller: it keeps `transcript` current, and
 *   when the host sends `resync` or a seq gap shows up it re-attaches with `since=<last seq>`;
 *   if the host cannot replay that far it takes a fresh snapshot, which it yields (a `snapshot`
 *   item) so the caller redraws.
 * - One reader at a time; the iteration ends after `detach()` or the connection's end (its
 *   reason is thrown unless we closed it ourselves).
 */
import type { Client } from "./client.js";
import { ConnectionClosed, HostdError, InvalidMessage, NotFound, UnknownRequest } from "./errors.js";
import type { CallOptions, SubscriptionItem } from "./options.js";
import type { Snapshot } from "./protocol.gen.js";
import { omittedOf } from "./row_pieces.js";
import { Transcript } from "./transcript.js";
import type { Chunk, TopicEvent } from "./types.js";

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
    private readonly wholeRows: boolean = true,
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
      if (this.wholeRows) await this.completeCutRows(result.snapshot, signal);
    }
  }

  /**
   * Read what the snapshot's cut rows left out (`read-row`) into `transcript`, before any
   * later event is applied (they queue meanwhile), so the window never shows a cut row.
   */
  private async completeCutRows(snapshot: Snapshot, signal?: AbortSignal): Promise<void> {
    for (const row of snapshot.rows ?? []) {
      const omitted = omittedOf(row);
      if (omitted === null) continue;
      let head: Chunk[] | null;
      try {
        head = await this.client.readRowHead(this.topicId, row.id, omitted, { signal });
      } catch (exc) {
        // Gone meanwhile (a rewind; its `rows-removed` follows), or a daemon without
        // `read-row`: the row stays cut, as delivered.
        if (exc instanceof NotFound || exc instanceof UnknownRequest) continue;
        throw exc;
      }
      if (head !== null) this.transcript?.restoreHead(row.id, head);
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

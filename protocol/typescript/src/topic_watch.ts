/** The live topic list of one connection (`Client.watchTopics`). */
import type { Client } from "./client.js";
import { ConnectionClosed, HostdError } from "./errors.js";
import type { CallOptions } from "./options.js";
import type { TopicInfo, TopicsChanged } from "./protocol.gen.js";

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

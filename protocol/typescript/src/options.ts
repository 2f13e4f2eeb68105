/** The options the client's calls take, and what a subscription yields. */
import type { AnswerTarget, Attachment, HistoryMessage, Snapshot } from "./protocol.gen.js";
import type { Transcript } from "./transcript.js";
import type { SendIntent, TopicEvent } from "./types.js";

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
  /**
   * More answers to the same message (protocol 1.1): each target (`{assistant}`, or `{driver,
   * model}`, or `{model}` for the topic's driver) answers in its own row at the same time as
   * the topic's own driver. Such a turn is never steered (`auto` queues while a turn runs).
   * Pick the answer to continue from with `chooseAnswer`.
   */
  also?: AnswerTarget[];
  /**
   * Images sent with the text (protocol 1.5; base64, at most 2 MiB together). Drivers whose
   * vendor takes images pass them on. Such a message never steers (`auto` queues while a turn
   * runs).
   */
  attachments?: Attachment[];
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
   * Make rows a snapshot delivered cut (`meta.truncated`: one row bigger than a reply) whole
   * before the snapshot is yielded, by reading what they left out with `read-row` (default
   * true). With false the transcript keeps them cut (`Client.readRow` reads one later).
   */
  wholeRows?: boolean;
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

/**
 * Frames and the JSON encoding, sans-IO and browser-safe (no Node APIs).
 *
 * Rules this module guards (the same as `hostd_protocol.framing`):
 *
 * - A frame is a 4-byte big-endian unsigned length, then exactly that many body bytes.
 * - A body over `maxFrameSize` is refused on both sides: `encodeFrame` throws `FrameTooLarge`
 *   before anything is written; `FrameDecoder.feed` throws as soon as it reads a header
 *   announcing more, before buffering the body.
 * - After a framing error the decoder stays broken: every later `feed` throws the same error.
 *   Frames completed before the error in the same `feed` are returned first.
 * - Bodies are UTF-8 JSON. Invalid UTF-8 or invalid JSON is `MalformedFrame`; JSON that is not a
 *   message this client understands is `InvalidMessage`.
 */
import { FrameTooLarge, InvalidMessage, MalformedFrame, TruncatedFrame } from "./errors.js";
import { SERVER_MESSAGE_TYPES, TOPIC_EVENT_TYPES } from "./protocol.gen.js";
import type { ClientMessage, ServerMessage } from "./protocol.gen.js";

/** The daemon's default hard limit on one frame body (8 MiB). */
export const DEFAULT_MAX_FRAME_SIZE = 8 * 1024 * 1024;
/** A message's text, at most (UTF-8 bytes): the daemon's `MAX_SEND_BYTES`. */
export const MAX_SEND_BYTES = 1024 * 1024;
export const HEADER_SIZE = 4;

const encoder = new TextEncoder();
const utf8 = new TextDecoder("utf-8", { fatal: true });

/** Prefix `body` with its length. Throws `FrameTooLarge` over the limit. */
export function encodeFrame(body: Uint8Array, maxFrameSize = DEFAULT_MAX_FRAME_SIZE): Uint8Array {
  checkSize(body.length, maxFrameSize);
  const frame = new Uint8Array(HEADER_SIZE + body.length);
  new DataView(frame.buffer).setUint32(0, body.length, false);
  frame.set(body, HEADER_SIZE);
  return frame;
}

function checkSize(size: number, maxFrameSize: number): void {
  if (size > maxFrameSize) {
    throw new FrameTooLarge(
      `message of ${size} bytes exceeds the maximum frame size of ${maxFrameSize} bytes`,
      { size, max: maxFrameSize },
    );
  }
}

/** Incremental frame splitter: feed any split of bytes, get whole frame bodies back. */
export class FrameDecoder {
  readonly maxFrameSize: number;
  private buf: Uint8Array = new Uint8Array(0);
  private len = 0;
  private error: Error | null = null;

  constructor(maxFrameSize = DEFAULT_MAX_FRAME_SIZE) {
    this.maxFrameSize = maxFrameSize;
  }

  /** Bytes received but not yet returned as a frame. */
  get buffered(): number {
    return this.len;
  }

  /** Add received bytes; return every frame body now complete, in order. */
  feed(data: Uint8Array): Uint8Array[] {
    if (this.error !== null) throw this.error;
    this.append(data);
    const frames: Uint8Array[] = [];
    let start = 0;
    const view = new DataView(this.buf.buffer, this.buf.byteOffset, this.buf.byteLength);
    while (this.len - start >= HEADER_SIZE) {
      const length = view.getUint32(start, false);
      if (length > this.maxFrameSize) {
        this.error = new FrameTooLarge(
          `peer announced a frame of ${length} bytes; the maximum is ${this.maxFrameSize} bytes`,
          { size: length, max: this.maxFrameSize },
        );
        this.len = 0;
        this.buf = new Uint8Array(0);
        if (frames.length > 0) return frames;
        throw this.error;
      }
      if (this.len - start - HEADER_SIZE < length) break;
      const bodyStart = start + HEADER_SIZE;
      frames.push(this.buf.slice(bodyStart, bodyStart + length));
      start = bodyStart + length;
    }
    if (start > 0) {
      this.buf.copyWithin(0, start, this.len);
      this.len -= start;
    }
    return frames;
  }

  /** The peer finished sending. Throws `TruncatedFrame` if a partial frame is buffered. */
  close(): void {
    if (this.error === null && this.len > 0) {
      this.error = new TruncatedFrame(
        `stream ended inside a frame (${this.len} bytes of an unfinished frame)`,
        { buffered: this.len },
      );
    }
    if (this.error !== null) throw this.error;
  }

  private append(data: Uint8Array): void {
    const need = this.len + data.length;
    if (need > this.buf.length) {
      const grown = new Uint8Array(Math.max(need, this.buf.length * 2, 4096));
      grown.set(this.buf.subarray(0, this.len));
      this.buf = grown;
    }
    this.buf.set(data, this.len);
    this.len = need;
  }
}

/** One message to its JSON body text. Throws `FrameTooLarge` when its UTF-8 form is too big. */
export function encodeBody(msg: ClientMessage, maxFrameSize = DEFAULT_MAX_FRAME_SIZE): string {
  const text = JSON.stringify(msg);
  // A UTF-8 byte is at least one UTF-16 unit and at most three per unit: measure only near the limit.
  if (text.length * 3 > maxFrameSize) checkSize(encoder.encode(text).length, maxFrameSize);
  return text;
}

/** One message to a whole frame (length prefix + UTF-8 JSON body). */
export function encodeMessageFrame(
  msg: ClientMessage,
  maxFrameSize = DEFAULT_MAX_FRAME_SIZE,
): Uint8Array {
  return encodeFrame(encoder.encode(JSON.stringify(msg)), maxFrameSize);
}

/** A frame body's bytes to text. Throws `MalformedFrame` for invalid UTF-8. */
export function bodyText(body: Uint8Array): string {
  try {
    return utf8.decode(body);
  } catch {
    throw new MalformedFrame("frame body is not valid UTF-8");
  }
}

const KNOWN_TYPES: ReadonlySet<string> = new Set(SERVER_MESSAGE_TYPES);
const EVENT_TYPES: ReadonlySet<string> = new Set(TOPIC_EVENT_TYPES);

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/**
 * A JSON body from the daemon to a message.
 *
 * Throws `MalformedFrame` when the text is not JSON, `InvalidMessage` when it is JSON but lacks
 * what this client relies on (`type`; `id` and `result` of a reply; `code` and `message` of an
 * error; `topic_id` and `seq` of a topic event). A message whose `type` this client does not
 * know (a newer daemon) is returned as is: one with a `seq` is a topic event, so a subscription
 * counts it and moves on and the reducer ignores it; anything else is ignored by the client.
 */
export function decodeBody(text: string): ServerMessage {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (exc) {
    throw new MalformedFrame(`frame body is not valid JSON: ${(exc as Error).message}`);
  }
  if (!isRecord(value) || typeof value["type"] !== "string") {
    throw new InvalidMessage("invalid message: expected an object with a string `type`");
  }
  const type = value["type"];
  const fail = (what: string): never => {
    throw new InvalidMessage(`invalid message: ${type} ${what}`, {
      id: typeof value["id"] === "number" ? value["id"] : null,
    });
  };
  if (type === "reply") {
    if (!Number.isInteger(value["id"])) fail("needs an integer `id`");
    if (!isRecord(value["result"]) || typeof value["result"]["type"] !== "string") {
      fail("needs a tagged `result`");
    }
  } else if (type === "error") {
    if (typeof value["code"] !== "string" || typeof value["message"] !== "string") {
      fail("needs a string `code` and `message`");
    }
  } else if (type === "welcome") {
    const version = value["protocol_version"];
    if (!Array.isArray(version) || version.length !== 2 || !version.every(Number.isInteger)) {
      fail("needs `protocol_version` [major, minor]");
    }
  } else if (type === "topics-changed") {
    if (typeof value["topic_id"] !== "string" || typeof value["change"] !== "string") {
      fail("needs a string `topic_id` and `change`");
    }
  } else if (EVENT_TYPES.has(type) || (!KNOWN_TYPES.has(type) && "seq" in value)) {
    // A topic event (known, or from a newer daemon): it must say which topic and when.
    if (typeof value["topic_id"] !== "string" || !Number.isInteger(value["seq"])) {
      fail("needs a string `topic_id` and an integer `seq`");
    }
  }
  return value as unknown as ServerMessage;
}

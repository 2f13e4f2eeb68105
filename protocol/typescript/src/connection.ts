/**
 * One connection to the daemon over any `Transport`: the handshake, and the dispatcher that
 * routes frames. `Client` (client.ts) adds one typed method per request on top of it.
 *
 * Rules this module guards:
 *
 * - One dispatcher per connection routes frames: replies to the waiting request (by id), topic
 *   events to that topic's subscription. A request gets exactly one reply or one typed error
 *   (`errorFromCode`); a connection-level error (no id) or a frame that cannot be decoded ends
 *   the connection and fails every waiting call with that error.
 * - Every call takes an `AbortSignal`: aborting stops waiting (rejects with `signal.reason`);
 *   it cannot unsend a request the daemon already has.
 */
import {
  ConnectionClosed,
  errorFromCode,
  HandshakeError,
  HostdError,
  InvalidMessage,
  PayloadTooLarge,
  VersionMismatch,
} from "./errors.js";
import { encodeBody, decodeBody, MAX_SEND_BYTES } from "./framing.js";
import type { CallOptions, ClientOptions } from "./options.js";
import { PROTOCOL_VERSION } from "./protocol.gen.js";
import type { ServerMessage, Welcome } from "./protocol.gen.js";
import type { Subscription } from "./subscription.js";
import type { TopicWatch } from "./topic_watch.js";
import type { Transport } from "./transport.js";
import type { Request, RequestBody, Result } from "./types.js";

type Waiter = { resolve(result: Result): void; reject(error: unknown): void };

/**
 * The wire side of a `Client`: handshake, request/reply, routing of events. Not exported from
 * the package: use `Client.connect` (or `connect` from `hostd-client/node`).
 */
export abstract class Connection {
  /** The daemon's `welcome` (set once connected). */
  welcome!: Welcome;
  private nextId = 1;
  private readonly waiting = new Map<number, Waiter>();
  protected readonly subs = new Map<string, Subscription>();
  protected topicWatch: TopicWatch | null = null;
  protected closedBy: HostdError | null = null;
  private readonly closeWaiters: Array<(reason: HostdError) => void> = [];
  private welcomeWaiter: Waiter | null = null;
  private maxFrameSize: number;

  protected constructor(
    private readonly transport: Transport,
    maxFrameSize: number,
  ) {
    this.maxFrameSize = maxFrameSize;
  }

  /** Start reading the transport and handshake; resolves once the daemon welcomed us. */
  protected async open(options: ClientOptions): Promise<void> {
    this.transport.start({
      frame: (body) => this.onFrame(body),
      closed: (reason) => this.fail(reason),
    });
    try {
      await this.hello(options);
    } catch (exc) {
      this.close();
      throw exc;
    }
    if (options.maxFrameSize === undefined && this.welcome.max_frame_size) {
      this.maxFrameSize = this.welcome.max_frame_size;
    }
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
      checkText(body);
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

  protected async call<T extends Result["type"]>(
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
}


/**
 * A message text over the send limit is refused before encoding, in the daemon's words: over
 * the frame size, encoding would fail first with words about frames the user never chose.
 */
function checkText(body: RequestBody): void {
  const text = (body as { text?: unknown }).text;
  // A UTF-16 unit is at most 3 UTF-8 bytes: measure only what could be over.
  if (typeof text !== "string" || text.length * 3 <= MAX_SEND_BYTES) return;
  const size = new TextEncoder().encode(text).length;
  if (size > MAX_SEND_BYTES) {
    throw new PayloadTooLarge(`the message is ${size} bytes; the limit is ${MAX_SEND_BYTES} bytes`, {
      size,
      max: MAX_SEND_BYTES,
    });
  }
}

/**
 * hostd-client: the browser-safe entry (no Node APIs). Unix socket + autostart live in
 * `hostd-client/node`.
 */
export * from "./errors.js";
export * from "./framing.js";
export * from "./protocol.gen.js";
export * from "./types.js";
export { PartsBuilder, Transcript } from "./transcript.js";
export { omittedOf, TRUNCATED_META, type Omitted } from "./row_pieces.js";
export { SCHEDULE_RUN_PREFIX, scheduledBy } from "./row_origin.js";
export { imageTypeOf } from "./images.js";
export type { ConnectOptions, Transport, TransportHandlers } from "./transport.js";
export { BridgeTransport, type NativeBridge } from "./bridge.js";
export {
  connectWebSocket,
  WebSocketTransport,
  type WebSocketConnectOptions,
  type WebSocketConstructor,
  type WebSocketLike,
} from "./websocket.js";
export {
  Client,
  Subscription,
  TopicWatch,
  type AddScheduleOptions,
  type AttachOptions,
  type CallOptions,
  type ClientOptions,
  type CreateTopicOptions,
  type SendOptions,
  type SnapshotItem,
  type SubscriptionItem,
} from "./client.js";

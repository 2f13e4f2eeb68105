/** Names for unions the schema leaves anonymous, derived from the generated types. */
import type {
  ClientMessage,
  ErrorReply,
  Hello,
  MessageRow,
  Reply,
  SendMessage,
  ServerMessage,
  TopicInfo,
  TopicsChanged,
  Welcome,
} from "./protocol.gen.js";

/** One piece of an answer: text, thinking, tool call, tool result, plan. */
export type Chunk = NonNullable<MessageRow["parts"]>[number];
/** What a `reply` carries, tagged by `type`. */
export type Result = Reply["result"];
/** Every event pushed for an attached topic (each carries the topic's `seq`). */
export type TopicEvent = Exclude<ServerMessage, Welcome | Reply | ErrorReply | TopicsChanged>;
/** Every request (client message but `hello`). */
export type Request = Exclude<ClientMessage, Hello>;
/** A request without its `id` (the client assigns ids). */
export type RequestBody = Request extends infer R ? (R extends Request ? Omit<R, "id"> : never) : never;
export type RowStatus = MessageRow["status"];
export type RowRole = MessageRow["role"];
export type TopicState = NonNullable<TopicInfo["state"]>;
export type SendIntent = NonNullable<SendMessage["intent"]>;

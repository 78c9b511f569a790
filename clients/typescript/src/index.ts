// @agent-persistence/client: a client for the agent_persistence websocket protocol.
export {
  ConversationClient,
  ProtocolError,
  FATAL_CLOSE_CODES,
  backoffDelay,
  conversationUrl,
} from "./client.js";
export type {
  CloseEvent,
  ConversationClientOptions,
  ConversationEvents,
  ConversationSnapshot,
  ReconnectEvent,
  ReconnectOptions,
  TextEvent,
  WebSocketConstructor,
  WebSocketLike,
} from "./client.js";
export { Emitter } from "./emitter.js";
export type { Listener } from "./emitter.js";
export type * from "./protocol.js";

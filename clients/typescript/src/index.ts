// @agent-persistence/client: a client for the agent_persistence websocket protocol.
export {
  ConversationClient,
  ProtocolError,
  RefusedError,
  FATAL_CLOSE_CODES,
  REFUSAL_CODES,
  refusalOf,
  ticketUrl,
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
  TicketUrlOptions,
  WebSocketConstructor,
  WebSocketLike,
} from "./client.js";
export { Emitter } from "./emitter.js";
export type { Listener } from "./emitter.js";
export type * from "./protocol.js";

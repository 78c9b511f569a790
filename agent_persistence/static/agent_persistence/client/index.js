// @agent-persistence/client: a client for the agent_persistence websocket protocol.
export { ConversationClient, ProtocolError, FATAL_CLOSE_CODES, backoffDelay, conversationUrl, } from "./client.js";
export { Emitter } from "./emitter.js";

// @agent-persistence/client/react: useConversation(conversationId), a React hook over ConversationClient.
//
// A conversation id no conversation has yet is a new conversation: the hook shows an empty
// transcript and its first start() creates it, the user's. A refusal (not found, not allowed)
// stops the client and is in `error` and `refused`.
//
// It gives the stored transcript (read over the REST API), the live answer of the turn in flight,
// the turn's status, pending interrupts and the actions. The live answer is shown only while its
// turn is not in the stored transcript yet, so a reloaded page (whose attach replays the final
// frame of the last turn) shows every answer exactly once.

import { useCallback, useEffect, useMemo, useRef, useState } from "react";
import {
  ConversationClient,
  conversationUrl,
  type ConversationClientOptions,
  type ConversationSnapshot,
  type ReconnectOptions,
  type RefusedError,
  type WebSocketConstructor,
} from "./client.js";
import type { AnsweredFrame, InterruptAnswer, PendingInterrupt, ResumedFrame, StartedFrame, StopRequestedFrame, TurnState } from "./protocol.js";

/** A stored message, as `GET <api>/conversations/<id>/messages/` returns it. */
export interface StoredMessage {
  id: string;
  role: string;
  content: unknown;
  [field: string]: unknown;
}

/** A message to show: a stored one, or the live answer (`live: true`). */
export interface ShownMessage {
  id: string;
  role: string;
  content: unknown;
  live: boolean;
}

export interface UseConversationOptions {
  /**
   * The socket URL; default: `ws(s)://<page host>/ws/conversations/<id>/`. A function may return a
   * promise, e.g. `ticketUrl(...)`'s URL with a fresh ticket; throwing a RefusedError stops the client.
   */
  url?: string | ((conversationId: string, attempt: number) => string | Promise<string>);
  /**
   * Where your urls.py includes `agent_persistence.api.urls`, e.g. `/api/agents/` (default `/api/`,
   * kept for compatibility), for the transcript: `GET <apiBase>conversations/<id>/messages/`.
   */
  apiBase?: string;
  /** Reads the stored transcript; default: `fetch(<apiBase>conversations/<id>/messages/)` with the page's cookies. */
  fetchMessages?: (conversationId: string) => Promise<StoredMessage[]>;
  WebSocket?: WebSocketConstructor;
  webSocketOptions?: unknown;
  reconnect?: ReconnectOptions | false;
  /** Send `resume` when the producer is reported dead (default true in the hook). */
  resumeDead?: boolean;
}

export interface UseConversation {
  /** The stored transcript, then the live answer while its turn is not stored yet. */
  messages: ShownMessage[];
  /** The live answer's text ("" when no turn is in flight). */
  liveText: string;
  status: TurnState | null;
  connected: boolean;
  interrupts: PendingInterrupt[];
  /** The last failure (a refused action, a transcript that could not be read, a refused socket). */
  error: Error | null;
  /** Why the client stopped for good (4401, 4403, 4404, 4429, a refused ticket): show it, do not wait. */
  refused: RefusedError | null;
  snapshot: ConversationSnapshot | null;
  start: (content: unknown, options?: { agent?: string; messageId?: string }) => Promise<StartedFrame>;
  stop: () => Promise<StopRequestedFrame>;
  answer: (answers: InterruptAnswer[] | Record<string, unknown>) => Promise<AnsweredFrame>;
  resume: (messageId?: string) => Promise<ResumedFrame>;
  /** The underlying client (null until mounted). */
  client: ConversationClient | null;
}

function defaultSocketUrl(conversationId: string): string {
  const location = (globalThis as { location?: { origin: string } }).location;
  if (!location) throw new Error("useConversation needs a url option outside a browser.");
  return conversationUrl(location.origin, conversationId);
}

async function fetchStoredMessages(apiBase: string, conversationId: string): Promise<StoredMessage[]> {
  const response = await fetch(`${apiBase.replace(/\/?$/, "/")}conversations/${encodeURIComponent(conversationId)}/messages/`, {
    credentials: "same-origin",
    headers: { Accept: "application/json" },
  });
  // A new conversation (the socket's first start creates it) has no transcript yet. Were it one the
  // user may not read, the socket's refusal (4404) says so.
  if (response.status === 404) return [];
  if (!response.ok) throw new Error(`Reading the transcript failed: HTTP ${response.status}.`);
  return ((await response.json()) as { items: StoredMessage[] }).items;
}

/** Follows conversation `conversationId` over the websocket; null: nothing. */
export function useConversation(conversationId: string | null, options: UseConversationOptions = {}): UseConversation {
  const optionsRef = useRef(options);
  optionsRef.current = options;
  const [client, setClient] = useState<ConversationClient | null>(null);
  const [snapshot, setSnapshot] = useState<ConversationSnapshot | null>(null);
  const [stored, setStored] = useState<StoredMessage[]>([]);
  const [error, setError] = useState<Error | null>(null);

  useEffect(() => {
    if (!conversationId) return undefined;
    let active = true;
    const current = optionsRef.current;
    const read = () => {
      const fetcher = current.fetchMessages ?? ((id: string) => fetchStoredMessages(current.apiBase ?? "/api/", id));
      fetcher(conversationId).then(
        (messages) => active && setStored(messages),
        (failure: unknown) => active && setError(failure instanceof Error ? failure : new Error(String(failure))),
      );
    };
    const url = current.url;
    const clientOptions: ConversationClientOptions = {
      url: (attempt) => (typeof url === "function" ? url(conversationId, attempt) : url ?? defaultSocketUrl(conversationId)),
      WebSocket: current.WebSocket,
      webSocketOptions: current.webSocketOptions,
      reconnect: current.reconnect,
      resumeDead: current.resumeDead ?? true,
    };
    const conversation = new ConversationClient(clientOptions);
    const offs = [
      conversation.on("change", (next) => active && setSnapshot(next)),
      // A new turn stored its user message; a sealed turn stored its answer: read the transcript again.
      conversation.on("status", (frame) => {
        if (frame.message_id && frame.state === "alive") read();
      }),
      conversation.on("conversation_updated", read),
      conversation.on("final", read),
      conversation.on("refused", (refusal) => active && setError(refusal)),
    ];
    setClient(conversation);
    setStored([]);
    setError(null);
    read();
    conversation.connect().catch((failure: unknown) => active && setError(failure instanceof Error ? failure : new Error(String(failure))));
    return () => {
      active = false;
      for (const off of offs) off();
      conversation.close();
      setClient(null);
      setSnapshot(null);
    };
  }, [conversationId]);

  const act = useCallback(
    <T,>(action: (conversation: ConversationClient) => Promise<T>): Promise<T> => {
      if (!client) return Promise.reject(new Error("The conversation is not connected yet."));
      return action(client).catch((failure: Error) => {
        setError(failure);
        throw failure;
      });
    },
    [client],
  );

  const messages = useMemo<ShownMessage[]>(() => {
    const shown: ShownMessage[] = stored.map((message) => ({ id: message.id, role: message.role, content: message.content, live: false }));
    const liveId = snapshot?.messageId;
    if (liveId && snapshot && !stored.some((message) => message.id === liveId) && (snapshot.text || snapshot.state === "alive")) {
      shown.push({ id: liveId, role: "assistant", content: snapshot.text, live: true });
    }
    return shown;
  }, [stored, snapshot]);

  const liveId = snapshot?.messageId;
  const live = Boolean(liveId && !stored.some((message) => message.id === liveId));
  return {
    messages,
    liveText: live && snapshot ? snapshot.text : "",
    status: snapshot?.state ?? null,
    connected: snapshot?.connected ?? false,
    interrupts: snapshot?.interrupts ?? [],
    error,
    refused: snapshot?.refused ?? null,
    snapshot,
    start: (content, startOptions) => act((conversation) => conversation.start(content, startOptions)),
    stop: () => act((conversation) => conversation.stop()),
    answer: (answers) => act((conversation) => conversation.answer(answers)),
    resume: (messageId) => act((conversation) => conversation.resume(messageId)),
    client,
  };
}

// The websocket client: one ConversationClient follows, and can drive, one conversation.
//
// It keeps the client's position in the turn (message_id, the last index applied, the text held)
// and applies the server's frames by the protocol's rules (docs/reference/websocket.md, "Applying
// deltas"): text is appended from the frame's offset, so a repeated or overlapping frame adds
// nothing and nothing is lost; a status with another message_id starts a new turn; the final
// message is the authority. When the socket closes for any reason but a refusal (4401, 4403,
// 4404, 4429, or a url function that throws a RefusedError, e.g. a ticket request answered 404)
// or close(), it reconnects with exponential back-off and jitter and attaches from its position,
// so the server sends only what it lacks. A refusal ends the client: it emits `refused` and
// keeps the RefusedError in `state.refused`, for the app to show.

import { Emitter } from "./emitter.js";
import type {
  ActivityFrame,
  AnsweredFrame,
  ClientFrame,
  ConversationUpdatedFrame,
  DeltaFrame,
  ErrorFrame,
  FinalFrame,
  InterruptAnswer,
  InterruptFrame,
  PendingInterrupt,
  ResumedFrame,
  ServerFrame,
  StartedFrame,
  StatusFrame,
  StopRequestedFrame,
  ToolCall,
  TurnState,
} from "./protocol.js";

/** The part of the WHATWG WebSocket the client uses (browsers, Node 22+, the `ws` package). */
export interface WebSocketLike {
  readonly readyState: number;
  onopen: ((event: unknown) => void) | null;
  onmessage: ((event: { data: unknown }) => void) | null;
  onclose: ((event: { code: number; reason: string }) => void) | null;
  onerror: ((event: unknown) => void) | null;
  send(data: string): void;
  close(code?: number, reason?: string): void;
}

export type WebSocketConstructor = new (url: string, protocols?: string | string[], options?: unknown) => WebSocketLike;

export interface ReconnectOptions {
  /** Milliseconds before the first reconnect (default 250). */
  initialDelay?: number;
  /** The longest wait between attempts, in milliseconds (default 10 000). */
  maxDelay?: number;
  /** How much each failed attempt multiplies the wait by (default 2). */
  factor?: number;
  /** The share of the wait drawn at random, 0 to 1 (default 0.5): the wait is in [delay * (1 - jitter), delay]. */
  jitter?: number;
  /** Attempts in a row before giving up (default: never give up). */
  maxAttempts?: number;
}

export interface ConversationClientOptions {
  /**
   * The socket's URL (`wss://host/ws/conversations/<id>/`), or a function of the attempt number
   * (0 for the first connection) that returns it, e.g. to go to another replica on reconnect.
   * The function may return a promise, e.g. to fetch a fresh single-use ticket for every attempt
   * (`?ticket=`); a rejected promise counts as a failed attempt.
   */
  url: string | ((attempt: number) => string | Promise<string>);
  /** The WebSocket implementation; defaults to `globalThis.WebSocket` (Node 20 has none: pass `ws`). */
  WebSocket?: WebSocketConstructor;
  /** Passed as the constructor's third argument, e.g. `{ headers: { Cookie: "sessionid=..." } }` for `ws`. */
  webSocketOptions?: unknown;
  protocols?: string | string[];
  /** Reconnect settings, or false to never reconnect. */
  reconnect?: ReconnectOptions | false;
  /** Attach as soon as the socket opens (default true). Without it, call attach() yourself. */
  attach?: boolean;
  /** Send `resume` when the turn's producer is reported dead (default false). */
  resumeDead?: boolean;
  /** Reject an action (start, stop, answer, resume) whose reply has not come after this long (default 30 000 ms). */
  replyTimeout?: number;
  /** Random numbers in [0, 1) for the jitter (tests). */
  random?: () => number;
}

/** What the client knows of the conversation's turn. */
export interface ConversationSnapshot {
  /** Whether the socket is open. */
  connected: boolean;
  /** The turn's state as last reported (null before the first status). */
  state: TurnState | null;
  messageId: string | null;
  runId: string | null;
  epoch: number;
  /** The index of the last delta applied. */
  index: number;
  /** The answer so far (after the final frame: the stored answer). */
  text: string;
  toolCalls: ToolCall[] | null;
  final: FinalFrame | null;
  /** The interrupts that wait for an answer. */
  interrupts: PendingInterrupt[];
  /** Why the client stopped for good on a refusal (4401, 4403, 4404, 4429, a refused ticket); null otherwise. */
  refused: RefusedError | null;
}

export interface TextEvent {
  messageId: string;
  text: string;
  /** What this update added (empty when the final message replaced the text). */
  appended: string;
  index: number;
}

export interface CloseEvent {
  code: number;
  reason: string;
  /** Whether the client will reconnect. */
  willReconnect: boolean;
}

export interface ReconnectEvent {
  attempt: number;
  delay: number;
}

export interface ConversationEvents {
  open: { attempt: number };
  close: CloseEvent;
  reconnecting: ReconnectEvent;
  /** Every frame from the server, before the client applies it. */
  frame: ServerFrame;
  status: StatusFrame;
  delta: DeltaFrame;
  /** The text changed. */
  text: TextEvent;
  /** A turn was sealed: once per turn, even when a reattach replays it. */
  final: FinalFrame;
  interrupt: InterruptFrame;
  conversation_updated: ConversationUpdatedFrame;
  /** An error frame that is no reply to an action of this client (e.g. index_ahead). */
  error: ErrorFrame;
  /** The snapshot changed. */
  change: ConversationSnapshot;
  /** An activity row (e.g. a search progress card), live and on attach: replace the row with its id. */
  activity: ActivityFrame;
  /** A refusal reconnecting cannot help (the client stops; also in `state.refused`). */
  refused: RefusedError;
}

/** A refused action: `code` is the error frame's (e.g. `conversation_busy`), or `connection_lost`, `timeout`, `closed`. */
export class ProtocolError extends Error {
  readonly code: string;
  readonly field?: string;
  readonly details?: Record<string, unknown>;
  readonly frame?: ErrorFrame;

  constructor(code: string, message: string, frame?: ErrorFrame) {
    super(message);
    this.name = "ProtocolError";
    this.code = code;
    this.frame = frame;
    this.field = frame?.field;
    this.details = frame?.details as Record<string, unknown> | undefined;
  }
}

/** Close codes after which reconnecting cannot help (4403: a refused ticket). */
export const FATAL_CLOSE_CODES: ReadonlySet<number> = new Set([4401, 4403, 4404, 4429]);

/** The `code` of a RefusedError for each refusing close code. */
export const REFUSAL_CODES: Readonly<Record<number, string>> = {
  4401: "not_authenticated",
  4403: "ticket_refused",
  4404: "not_found",
  4429: "too_many_sockets",
};

/**
 * A refusal that reconnecting cannot help: the server closed the socket with a refusing code
 * (`closeCode`), or the `url` function threw it (e.g. the ticket request was answered 404:
 * `status`). `code` is `not_authenticated`, `ticket_refused`, `not_found`, `too_many_sockets`,
 * or what the url function chose. Throw one from a `url` function to stop the client.
 */
export class RefusedError extends ProtocolError {
  readonly closeCode?: number;
  readonly status?: number;

  constructor(code: string, message: string, options: { closeCode?: number; status?: number } = {}) {
    super(code, message);
    this.name = "RefusedError";
    this.closeCode = options.closeCode;
    this.status = options.status;
  }
}

/** The RefusedError of a refusing close code. */
export function refusalOf(closeCode: number, reason = ""): RefusedError {
  const code = REFUSAL_CODES[closeCode] ?? "refused";
  const detail = reason ? `: ${reason}` : "";
  return new RefusedError(code, `The server refused the socket (${closeCode} ${code})${detail}.`, { closeCode });
}

export interface TicketUrlOptions {
  /** Where the app's API is mounted, e.g. `https://example.com/api/agents/` (the ticket is `POST <api>conversations/<id>/ws-ticket/`). */
  api: string;
  /** The site the socket goes to (`conversationUrl(site, id)`), e.g. `https://example.com` or the page's origin. */
  site: string;
  conversationId: string;
  /** The request's options (credentials, headers such as Authorization or X-CSRFToken); the method is POST. */
  init?: RequestInit;
  fetch?: typeof fetch;
  /** The route prefix of the sockets under `site` (default `ws/conversations/`). */
  path?: string;
}

/**
 * A `url` function that fetches a fresh single-use ticket for every attempt. A ticket request
 * answered 401, 403 or 404 (the user may not open that conversation) throws a RefusedError, so
 * the client stops and surfaces it; any other failure (429, 5xx, the network) is retried.
 */
export function ticketUrl(options: TicketUrlOptions): () => Promise<string> {
  const api = options.api.endsWith("/") ? options.api : `${options.api}/`;
  const endpoint = `${api}conversations/${encodeURIComponent(options.conversationId)}/ws-ticket/`;
  return async () => {
    const request = options.fetch ?? globalThis.fetch;
    const response = await request(endpoint, { credentials: "same-origin", ...options.init, method: "POST" });
    if (response.status === 401 || response.status === 403 || response.status === 404) {
      const code = response.status === 404 ? "not_found" : "not_authenticated";
      throw new RefusedError(code, `The ticket request was refused: HTTP ${response.status}.`, { status: response.status });
    }
    if (!response.ok) throw new ProtocolError("ticket_failed", `The ticket request failed: HTTP ${response.status}.`);
    const { ticket } = (await response.json()) as { ticket: string };
    return `${conversationUrl(options.site, options.conversationId, options.path)}?ticket=${encodeURIComponent(ticket)}`;
  };
}

const REPLIES = {
  start: "started",
  resume: "resumed",
  stop: "stop_requested",
  answer: "answered",
} as const;

type Action = keyof typeof REPLIES;
type Reply<A extends Action> = Extract<ServerFrame, { type: (typeof REPLIES)[A] }>;

interface Pending {
  reply: string;
  resolve: (frame: ServerFrame) => void;
  reject: (error: ProtocolError) => void;
  timer: ReturnType<typeof setTimeout>;
}

const OPEN = 1;

/** The delay before reconnect `attempt` (1, 2, ...): exponential, capped, with jitter. */
export function backoffDelay(attempt: number, options: ReconnectOptions = {}, random: () => number = Math.random): number {
  const { initialDelay = 250, maxDelay = 10_000, factor = 2, jitter = 0.5 } = options;
  const delay = Math.min(maxDelay, initialDelay * factor ** Math.max(0, attempt - 1));
  return delay * (1 - jitter * random());
}

/** The socket URL of a conversation: `conversationUrl("https://example.com", id)` -> `wss://example.com/ws/conversations/<id>/`. */
export function conversationUrl(base: string, conversationId: string, path = "ws/conversations/"): string {
  const url = new URL(base);
  url.protocol = url.protocol === "https:" || url.protocol === "wss:" ? "wss:" : "ws:";
  const prefix = url.pathname.endsWith("/") ? url.pathname : `${url.pathname}/`;
  url.pathname = `${prefix}${path}${encodeURIComponent(conversationId)}/`;
  url.search = "";
  url.hash = "";
  return url.toString();
}

export class ConversationClient extends Emitter<ConversationEvents> implements AsyncIterable<ServerFrame> {
  private readonly options: ConversationClientOptions;
  private socket: WebSocketLike | null = null;
  private attempt = 0;
  private failures = 0;
  private closedByUser = false;
  private reconnectTimer: ReturnType<typeof setTimeout> | null = null;
  private opening = false;
  private pending: Pending[] = [];
  private finalized = new Set<string>();
  private resumeSent: string | null = null;
  private iterators = new Set<FrameQueue>();
  private snapshot: ConversationSnapshot = {
    connected: false,
    state: null,
    messageId: null,
    runId: null,
    epoch: 0,
    index: 0,
    text: "",
    toolCalls: null,
    final: null,
    interrupts: [],
    refused: null,
  };

  constructor(options: ConversationClientOptions) {
    super();
    this.options = options;
  }

  /** What the client knows now (a fresh object at every change). */
  get state(): ConversationSnapshot {
    return this.snapshot;
  }

  get text(): string {
    return this.snapshot.text;
  }

  /** Opens the socket (and attaches, unless `attach: false`); resolves once it is open. */
  connect(): Promise<void> {
    this.closedByUser = false;
    if (this.snapshot.refused) this.update({ refused: null }); // a new try, e.g. after the user logged in again
    if (this.socket?.readyState === OPEN) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const offOpen = this.once("open", () => {
        offClose();
        resolve();
      });
      const offClose = this.on("close", (event) => {
        if (!event.willReconnect) {
          offOpen();
          offClose();
          reject(this.snapshot.refused ?? new ProtocolError("closed", `The socket closed (${event.code}) before it opened.`));
        }
      });
      try {
        if (!this.socket && !this.opening) this.open();
      } catch (error) {
        offOpen();
        offClose();
        reject(error);
      }
    });
  }

  /** Closes the socket for good: no reconnect; pending actions are rejected, iterators end. */
  close(code = 1000, reason = ""): void {
    this.closedByUser = true;
    if (this.reconnectTimer) clearTimeout(this.reconnectTimer);
    this.reconnectTimer = null;
    const socket = this.socket;
    this.socket = null;
    if (socket) {
      socket.onopen = socket.onmessage = socket.onclose = null;
      // Keep an error handler: the ws package reports closing a socket that is still connecting
      // as an error event, which would be an uncaught exception without one.
      socket.onerror = () => {};
      try {
        socket.close(code, reason);
      } catch {
        // already closed
      }
    }
    this.rejectPending("closed", "The client was closed.");
    this.update({ connected: false });
    this.emit("close", { code, reason, willReconnect: false });
    for (const queue of this.iterators) queue.end();
    this.iterators.clear();
  }

  /** Closes the current socket as a lost network would, and reconnects (with back-off) from the position held. */
  reconnect(): void {
    this.socket?.close(4000, "reconnect");
  }

  /** (Re)attaches from the position held: the server sends status, then only the text the client lacks. */
  attach(): void {
    this.send(this.attachFrame());
  }

  /** The attach frame for the position held. */
  attachFrame(): ClientFrame {
    const { messageId, index, text } = this.snapshot;
    return messageId ? { type: "attach", message_id: messageId, last_index: index, offset: text.length } : { type: "attach" };
  }

  /** Starts a turn with the user's message; resolves with the `started` reply. */
  start(content: unknown, options: { agent?: string; messageId?: string } = {}): Promise<StartedFrame> {
    const frame: ClientFrame = { type: "start", content };
    if (options.agent !== undefined) frame.agent = options.agent;
    if (options.messageId !== undefined) frame.message_id = options.messageId;
    return this.request("start", frame);
  }

  /** Stops the turn (it ends cancelled, keeping its partial answer). */
  stop(): Promise<StopRequestedFrame> {
    return this.request("stop", { type: "stop" });
  }

  /** Answers pending interrupts, all or nothing. */
  answer(answers: InterruptAnswer[] | Record<string, unknown>): Promise<AnsweredFrame> {
    const list = Array.isArray(answers) ? answers : Object.entries(answers).map(([id, response]) => ({ id, response }));
    if (!list.length) return Promise.reject(new ProtocolError("invalid_frame", "answer needs at least one answer."));
    return this.request("answer", { type: "answer", answers: list as [InterruptAnswer, ...InterruptAnswer[]] });
  }

  /** Resumes a turn whose producer is dead, in the server this socket is connected to. */
  resume(messageId?: string): Promise<ResumedFrame> {
    return this.request("resume", messageId ? { type: "resume", message_id: messageId } : { type: "resume" });
  }

  /** Resolves with the next final frame of a turn (the current one when it has ended already and `current` is true). */
  untilFinal(options: { timeout?: number; current?: boolean } = {}): Promise<FinalFrame> {
    if (options.current !== false && this.snapshot.final) return Promise.resolve(this.snapshot.final);
    return this.waitFor("final", () => true, options.timeout);
  }

  /** Resolves with the next `event` whose value satisfies `predicate`. */
  waitFor<K extends keyof ConversationEvents>(
    event: K,
    predicate: (value: ConversationEvents[K]) => boolean = () => true,
    timeout = 60_000,
  ): Promise<ConversationEvents[K]> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        off();
        reject(new ProtocolError("timeout", `No ${String(event)} within ${timeout} ms.`));
      }, timeout);
      const off = this.on(event, (value) => {
        if (!predicate(value)) return;
        clearTimeout(timer);
        off();
        resolve(value);
      });
    });
  }

  /** The server's frames from now on, until close(). */
  frames(): AsyncIterableIterator<ServerFrame> {
    const queue = new FrameQueue(() => this.iterators.delete(queue));
    this.iterators.add(queue);
    return queue;
  }

  [Symbol.asyncIterator](): AsyncIterator<ServerFrame> {
    return this.frames();
  }

  // -- the socket --------------------------------------------------------------------------------

  private open(): void {
    const Implementation = this.options.WebSocket ?? (globalThis as { WebSocket?: WebSocketConstructor }).WebSocket;
    if (!Implementation) {
      throw new Error("No WebSocket implementation: pass one as the WebSocket option (e.g. the ws package's).");
    }
    const url = typeof this.options.url === "function" ? this.options.url(this.attempt) : this.options.url;
    if (typeof url !== "string") {
      const attempt = this.attempt;
      this.opening = true;
      Promise.resolve(url).then(
        (resolved) => {
          this.opening = false;
          if (!this.closedByUser && this.attempt === attempt) this.openAt(Implementation, resolved);
        },
        (error: unknown) => {
          this.opening = false;
          if (!this.closedByUser && this.attempt === attempt) {
            this.onClosed(1006, String(error), error instanceof RefusedError ? error : null);
          }
        },
      );
      return;
    }
    this.openAt(Implementation, url);
  }

  private openAt(Implementation: WebSocketConstructor, url: string): void {
    const attempt = this.attempt;
    let socket: WebSocketLike;
    try {
      socket =
        this.options.webSocketOptions === undefined
          ? new Implementation(url, this.options.protocols)
          : new Implementation(url, this.options.protocols, this.options.webSocketOptions);
    } catch (error) {
      this.onClosed(1006, String(error));
      return;
    }
    this.socket = socket;
    socket.onopen = () => {
      this.update({ connected: true });
      this.emit("open", { attempt });
      if (this.options.attach !== false) this.attach();
    };
    socket.onmessage = (event) => this.onMessage(event.data);
    socket.onerror = () => {
      // The close event follows and decides what to do.
    };
    socket.onclose = (event) => {
      if (this.socket !== socket) return;
      this.socket = null;
      this.onClosed(event.code, event.reason);
    };
  }

  private onClosed(code: number, reason: string, refusal: RefusedError | null = null): void {
    if (!refusal && FATAL_CLOSE_CODES.has(code)) refusal = refusalOf(code, reason);
    this.rejectPending(
      refusal ? refusal.code : "connection_lost",
      refusal ? refusal.message : `The socket closed (${code}) before the reply came; the action may or may not have happened.`,
    );
    const reconnect = this.options.reconnect;
    const maxAttempts = reconnect ? (reconnect.maxAttempts ?? Infinity) : Infinity;
    const willReconnect = !this.closedByUser && reconnect !== false && !refusal && this.failures < maxAttempts;
    this.update(refusal ? { connected: false, refused: refusal } : { connected: false });
    this.emit("close", { code, reason, willReconnect });
    if (refusal) this.emit("refused", refusal);
    if (!willReconnect) {
      for (const queue of this.iterators) queue.end();
      this.iterators.clear();
      return;
    }
    this.failures += 1;
    this.attempt += 1;
    const delay = backoffDelay(this.failures, reconnect || {}, this.options.random);
    this.emit("reconnecting", { attempt: this.attempt, delay });
    this.reconnectTimer = setTimeout(() => {
      this.reconnectTimer = null;
      if (!this.closedByUser) this.open();
    }, delay);
  }

  private send(frame: ClientFrame): void {
    if (!this.socket || this.socket.readyState !== OPEN) {
      throw new ProtocolError("not_connected", "The socket is not open.");
    }
    this.socket.send(JSON.stringify(frame));
  }

  private request<A extends Action>(action: A, frame: ClientFrame): Promise<Reply<A>> {
    return new Promise((resolve, reject) => {
      try {
        this.send(frame);
      } catch (error) {
        reject(error);
        return;
      }
      const timeout = this.options.replyTimeout ?? 30_000;
      const entry: Pending = {
        reply: REPLIES[action],
        resolve: resolve as (frame: ServerFrame) => void,
        reject,
        timer: setTimeout(() => {
          this.pending = this.pending.filter((item) => item !== entry);
          reject(new ProtocolError("timeout", `No reply to ${action} within ${timeout} ms.`));
        }, timeout),
      };
      this.pending.push(entry);
    });
  }

  private rejectPending(code: string, message: string): void {
    const pending = this.pending;
    this.pending = [];
    for (const entry of pending) {
      clearTimeout(entry.timer);
      entry.reject(new ProtocolError(code, message));
    }
  }

  // -- applying frames ---------------------------------------------------------------------------

  private onMessage(data: unknown): void {
    let frame: ServerFrame;
    try {
      frame = JSON.parse(typeof data === "string" ? data : String(data)) as ServerFrame;
    } catch {
      return; // the server sends JSON text only
    }
    if (!frame || typeof frame !== "object" || typeof frame.type !== "string") return;
    this.failures = 0; // a frame arrived: the connection works, the back-off starts over next time
    this.emit("frame", frame);
    for (const queue of this.iterators) queue.push(frame);
    this.apply(frame);
  }

  /** Applies one server frame to the snapshot (exposed for clients that bring their own transport). */
  apply(frame: ServerFrame): void {
    switch (frame.type) {
      case "status":
        return this.applyStatus(frame);
      case "delta":
        return this.applyDelta(frame);
      case "final":
        return this.applyFinal(frame);
      case "interrupt":
        if (frame.message_id === this.snapshot.messageId) this.update({ interrupts: frame.interrupts });
        this.emit("interrupt", frame);
        return;
      case "conversation_updated":
        this.emit("conversation_updated", frame);
        return;
      case "activity":
        this.emit("activity", frame);
        return;
      case "error":
        return this.applyError(frame);
      default:
        this.settle(frame);
    }
  }

  private applyStatus(frame: StatusFrame): void {
    const changes: Partial<ConversationSnapshot> = { state: frame.state, runId: frame.run_id, epoch: frame.epoch };
    if (frame.message_id !== this.snapshot.messageId) {
      // Another turn: start it from nothing.
      Object.assign(changes, { messageId: frame.message_id, index: 0, text: "", toolCalls: null, final: null, interrupts: [] });
      this.resumeSent = null;
    } else if (frame.state !== "interrupted") {
      changes.interrupts = [];
    }
    this.update(changes);
    this.emit("status", frame);
    if (frame.state === "dead" && this.options.resumeDead && frame.message_id && this.resumeSent !== frame.message_id) {
      this.resumeSent = frame.message_id;
      this.resume(frame.message_id).catch((error: ProtocolError) => {
        if (this.resumeSent === frame.message_id) this.resumeSent = null;
        void error;
      });
    }
  }

  private applyDelta(frame: DeltaFrame): void {
    const held = this.snapshot;
    if (frame.message_id !== held.messageId || held.final || frame.index <= held.index) {
      return; // another turn's (a status comes first), after the final, or already applied
    }
    if (frame.offset > held.text.length) {
      // A gap: the client lacks text before this frame's. Reattach from the position held.
      if (this.socket?.readyState === OPEN) this.attach();
      return;
    }
    const appended = frame.text.slice(held.text.length - frame.offset);
    const changes: Partial<ConversationSnapshot> = { index: frame.index, text: held.text + appended };
    if (frame.tool_calls !== undefined) changes.toolCalls = frame.tool_calls ?? null;
    this.update(changes);
    this.emit("delta", frame);
    if (appended) this.emit("text", { messageId: frame.message_id, text: this.snapshot.text, appended, index: frame.index });
  }

  private applyFinal(frame: FinalFrame): void {
    if (frame.message_id !== this.snapshot.messageId) return;
    const content = typeof frame.message.content === "string" ? frame.message.content : JSON.stringify(frame.message.content);
    const replaced = content !== this.snapshot.text;
    this.update({
      final: frame,
      text: content,
      index: Math.max(this.snapshot.index, frame.index),
      toolCalls: frame.message.tool_calls ?? this.snapshot.toolCalls,
      interrupts: [],
    });
    if (replaced) this.emit("text", { messageId: frame.message_id, text: content, appended: "", index: frame.index });
    if (!this.finalized.has(frame.message_id)) {
      this.finalized.add(frame.message_id);
      this.emit("final", frame);
    }
  }

  private applyError(frame: ErrorFrame): void {
    if (frame.code === "index_ahead") {
      // The server holds us at nothing and sends the whole answer: take its indexes from 0.
      // Text is still assembled by offset, so what we hold is not duplicated.
      this.update({ index: 0 });
      this.emit("error", frame);
      return;
    }
    const entry = this.pending.shift();
    if (!entry) {
      this.emit("error", frame);
      return;
    }
    clearTimeout(entry.timer);
    entry.reject(new ProtocolError(frame.code, frame.message, frame));
  }

  private settle(frame: ServerFrame): void {
    const at = this.pending.findIndex((entry) => entry.reply === frame.type);
    if (at < 0) return;
    const [entry] = this.pending.splice(at, 1);
    clearTimeout(entry.timer);
    entry.resolve(frame);
  }

  private update(changes: Partial<ConversationSnapshot>): void {
    const next = { ...this.snapshot, ...changes };
    const keys = Object.keys(changes) as (keyof ConversationSnapshot)[];
    if (keys.every((key) => next[key] === this.snapshot[key])) return;
    this.snapshot = next;
    this.emit("change", next);
  }
}

/** An async iterator over frames pushed to it. */
class FrameQueue implements AsyncIterableIterator<ServerFrame> {
  private buffer: ServerFrame[] = [];
  private waiting: ((result: IteratorResult<ServerFrame>) => void) | null = null;
  private done = false;

  constructor(private readonly onReturn: () => void) {}

  push(frame: ServerFrame): void {
    if (this.done) return;
    if (this.waiting) {
      const resolve = this.waiting;
      this.waiting = null;
      resolve({ value: frame, done: false });
    } else {
      this.buffer.push(frame);
    }
  }

  end(): void {
    this.done = true;
    if (this.waiting) {
      const resolve = this.waiting;
      this.waiting = null;
      resolve({ value: undefined, done: true });
    }
  }

  next(): Promise<IteratorResult<ServerFrame>> {
    const frame = this.buffer.shift();
    if (frame) return Promise.resolve({ value: frame, done: false });
    if (this.done) return Promise.resolve({ value: undefined, done: true });
    return new Promise((resolve) => (this.waiting = resolve));
  }

  return(): Promise<IteratorResult<ServerFrame>> {
    this.end();
    this.buffer = [];
    this.onReturn();
    return Promise.resolve({ value: undefined, done: true });
  }

  [Symbol.asyncIterator](): AsyncIterableIterator<ServerFrame> {
    return this;
  }
}

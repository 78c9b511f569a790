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
/** A refused action: `code` is the error frame's (e.g. `conversation_busy`), or `connection_lost`, `timeout`, `closed`. */
export class ProtocolError extends Error {
    code;
    field;
    details;
    frame;
    constructor(code, message, frame) {
        super(message);
        this.name = "ProtocolError";
        this.code = code;
        this.frame = frame;
        this.field = frame?.field;
        this.details = frame?.details;
    }
}
/** Close codes after which reconnecting cannot help (4403: a refused ticket). */
export const FATAL_CLOSE_CODES = new Set([4401, 4403, 4404, 4429]);
/** The `code` of a RefusedError for each refusing close code. */
export const REFUSAL_CODES = {
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
    closeCode;
    status;
    constructor(code, message, options = {}) {
        super(code, message);
        this.name = "RefusedError";
        this.closeCode = options.closeCode;
        this.status = options.status;
    }
}
/** The RefusedError of a refusing close code. */
export function refusalOf(closeCode, reason = "") {
    const code = REFUSAL_CODES[closeCode] ?? "refused";
    const detail = reason ? `: ${reason}` : "";
    return new RefusedError(code, `The server refused the socket (${closeCode} ${code})${detail}.`, { closeCode });
}
/**
 * A `url` function that fetches a fresh single-use ticket for every attempt. A ticket request
 * answered 401, 403 or 404 (the user may not open that conversation) throws a RefusedError, so
 * the client stops and surfaces it; any other failure (429, 5xx, the network) is retried.
 */
export function ticketUrl(options) {
    const api = options.api.endsWith("/") ? options.api : `${options.api}/`;
    const endpoint = `${api}conversations/${encodeURIComponent(options.conversationId)}/ws-ticket/`;
    return async () => {
        const request = options.fetch ?? globalThis.fetch;
        const response = await request(endpoint, { credentials: "same-origin", ...options.init, method: "POST" });
        if (response.status === 401 || response.status === 403 || response.status === 404) {
            const code = response.status === 404 ? "not_found" : "not_authenticated";
            throw new RefusedError(code, `The ticket request was refused: HTTP ${response.status}.`, { status: response.status });
        }
        if (!response.ok)
            throw new ProtocolError("ticket_failed", `The ticket request failed: HTTP ${response.status}.`);
        const { ticket } = (await response.json());
        return `${conversationUrl(options.site, options.conversationId, options.path)}?ticket=${encodeURIComponent(ticket)}`;
    };
}
const REPLIES = {
    start: "started",
    resume: "resumed",
    stop: "stop_requested",
    answer: "answered",
};
const OPEN = 1;
/** The delay before reconnect `attempt` (1, 2, ...): exponential, capped, with jitter. */
export function backoffDelay(attempt, options = {}, random = Math.random) {
    const { initialDelay = 250, maxDelay = 10_000, factor = 2, jitter = 0.5 } = options;
    const delay = Math.min(maxDelay, initialDelay * factor ** Math.max(0, attempt - 1));
    return delay * (1 - jitter * random());
}
/** The socket URL of a conversation: `conversationUrl("https://example.com", id)` -> `wss://example.com/ws/conversations/<id>/`. */
export function conversationUrl(base, conversationId, path = "ws/conversations/") {
    const url = new URL(base);
    url.protocol = url.protocol === "https:" || url.protocol === "wss:" ? "wss:" : "ws:";
    const prefix = url.pathname.endsWith("/") ? url.pathname : `${url.pathname}/`;
    url.pathname = `${prefix}${path}${encodeURIComponent(conversationId)}/`;
    url.search = "";
    url.hash = "";
    return url.toString();
}
export class ConversationClient extends Emitter {
    options;
    socket = null;
    attempt = 0;
    failures = 0;
    closedByUser = false;
    reconnectTimer = null;
    opening = false;
    pending = [];
    finalized = new Set();
    resumeSent = null;
    iterators = new Set();
    snapshot = {
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
    constructor(options) {
        super();
        this.options = options;
    }
    /** What the client knows now (a fresh object at every change). */
    get state() {
        return this.snapshot;
    }
    get text() {
        return this.snapshot.text;
    }
    /** Opens the socket (and attaches, unless `attach: false`); resolves once it is open. */
    connect() {
        this.closedByUser = false;
        if (this.snapshot.refused)
            this.update({ refused: null }); // a new try, e.g. after the user logged in again
        if (this.socket?.readyState === OPEN)
            return Promise.resolve();
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
                if (!this.socket && !this.opening)
                    this.open();
            }
            catch (error) {
                offOpen();
                offClose();
                reject(error);
            }
        });
    }
    /** Closes the socket for good: no reconnect; pending actions are rejected, iterators end. */
    close(code = 1000, reason = "") {
        this.closedByUser = true;
        if (this.reconnectTimer)
            clearTimeout(this.reconnectTimer);
        this.reconnectTimer = null;
        const socket = this.socket;
        this.socket = null;
        if (socket) {
            socket.onopen = socket.onmessage = socket.onclose = null;
            // Keep an error handler: the ws package reports closing a socket that is still connecting
            // as an error event, which would be an uncaught exception without one.
            socket.onerror = () => { };
            try {
                socket.close(code, reason);
            }
            catch {
                // already closed
            }
        }
        this.rejectPending("closed", "The client was closed.");
        this.update({ connected: false });
        this.emit("close", { code, reason, willReconnect: false });
        for (const queue of this.iterators)
            queue.end();
        this.iterators.clear();
    }
    /** Closes the current socket as a lost network would, and reconnects (with back-off) from the position held. */
    reconnect() {
        this.socket?.close(4000, "reconnect");
    }
    /** (Re)attaches from the position held: the server sends status, then only the text the client lacks. */
    attach() {
        this.send(this.attachFrame());
    }
    /** The attach frame for the position held. */
    attachFrame() {
        const { messageId, index, text } = this.snapshot;
        return messageId ? { type: "attach", message_id: messageId, last_index: index, offset: text.length } : { type: "attach" };
    }
    /** Starts a turn with the user's message; resolves with the `started` reply. */
    start(content, options = {}) {
        const frame = { type: "start", content };
        if (options.agent !== undefined)
            frame.agent = options.agent;
        if (options.messageId !== undefined)
            frame.message_id = options.messageId;
        return this.request("start", frame);
    }
    /** Stops the turn (it ends cancelled, keeping its partial answer). */
    stop() {
        return this.request("stop", { type: "stop" });
    }
    /** Answers pending interrupts, all or nothing. */
    answer(answers) {
        const list = Array.isArray(answers) ? answers : Object.entries(answers).map(([id, response]) => ({ id, response }));
        if (!list.length)
            return Promise.reject(new ProtocolError("invalid_frame", "answer needs at least one answer."));
        return this.request("answer", { type: "answer", answers: list });
    }
    /** Resumes a turn whose producer is dead, in the server this socket is connected to. */
    resume(messageId) {
        return this.request("resume", messageId ? { type: "resume", message_id: messageId } : { type: "resume" });
    }
    /** Resolves with the next final frame of a turn (the current one when it has ended already and `current` is true). */
    untilFinal(options = {}) {
        if (options.current !== false && this.snapshot.final)
            return Promise.resolve(this.snapshot.final);
        return this.waitFor("final", () => true, options.timeout);
    }
    /** Resolves with the next `event` whose value satisfies `predicate`. */
    waitFor(event, predicate = () => true, timeout = 60_000) {
        return new Promise((resolve, reject) => {
            const timer = setTimeout(() => {
                off();
                reject(new ProtocolError("timeout", `No ${String(event)} within ${timeout} ms.`));
            }, timeout);
            const off = this.on(event, (value) => {
                if (!predicate(value))
                    return;
                clearTimeout(timer);
                off();
                resolve(value);
            });
        });
    }
    /** The server's frames from now on, until close(). */
    frames() {
        const queue = new FrameQueue(() => this.iterators.delete(queue));
        this.iterators.add(queue);
        return queue;
    }
    [Symbol.asyncIterator]() {
        return this.frames();
    }
    // -- the socket --------------------------------------------------------------------------------
    open() {
        const Implementation = this.options.WebSocket ?? globalThis.WebSocket;
        if (!Implementation) {
            throw new Error("No WebSocket implementation: pass one as the WebSocket option (e.g. the ws package's).");
        }
        const url = typeof this.options.url === "function" ? this.options.url(this.attempt) : this.options.url;
        if (typeof url !== "string") {
            const attempt = this.attempt;
            this.opening = true;
            Promise.resolve(url).then((resolved) => {
                this.opening = false;
                if (!this.closedByUser && this.attempt === attempt)
                    this.openAt(Implementation, resolved);
            }, (error) => {
                this.opening = false;
                if (!this.closedByUser && this.attempt === attempt) {
                    this.onClosed(1006, String(error), error instanceof RefusedError ? error : null);
                }
            });
            return;
        }
        this.openAt(Implementation, url);
    }
    openAt(Implementation, url) {
        const attempt = this.attempt;
        let socket;
        try {
            socket =
                this.options.webSocketOptions === undefined
                    ? new Implementation(url, this.options.protocols)
                    : new Implementation(url, this.options.protocols, this.options.webSocketOptions);
        }
        catch (error) {
            this.onClosed(1006, String(error));
            return;
        }
        this.socket = socket;
        socket.onopen = () => {
            this.update({ connected: true });
            this.emit("open", { attempt });
            if (this.options.attach !== false)
                this.attach();
        };
        socket.onmessage = (event) => this.onMessage(event.data);
        socket.onerror = () => {
            // The close event follows and decides what to do.
        };
        socket.onclose = (event) => {
            if (this.socket !== socket)
                return;
            this.socket = null;
            this.onClosed(event.code, event.reason);
        };
    }
    onClosed(code, reason, refusal = null) {
        if (!refusal && FATAL_CLOSE_CODES.has(code))
            refusal = refusalOf(code, reason);
        this.rejectPending(refusal ? refusal.code : "connection_lost", refusal ? refusal.message : `The socket closed (${code}) before the reply came; the action may or may not have happened.`);
        const reconnect = this.options.reconnect;
        const maxAttempts = reconnect ? (reconnect.maxAttempts ?? Infinity) : Infinity;
        const willReconnect = !this.closedByUser && reconnect !== false && !refusal && this.failures < maxAttempts;
        this.update(refusal ? { connected: false, refused: refusal } : { connected: false });
        this.emit("close", { code, reason, willReconnect });
        if (refusal)
            this.emit("refused", refusal);
        if (!willReconnect) {
            for (const queue of this.iterators)
                queue.end();
            this.iterators.clear();
            return;
        }
        this.failures += 1;
        this.attempt += 1;
        const delay = backoffDelay(this.failures, reconnect || {}, this.options.random);
        this.emit("reconnecting", { attempt: this.attempt, delay });
        this.reconnectTimer = setTimeout(() => {
            this.reconnectTimer = null;
            if (!this.closedByUser)
                this.open();
        }, delay);
    }
    send(frame) {
        if (!this.socket || this.socket.readyState !== OPEN) {
            throw new ProtocolError("not_connected", "The socket is not open.");
        }
        this.socket.send(JSON.stringify(frame));
    }
    request(action, frame) {
        return new Promise((resolve, reject) => {
            try {
                this.send(frame);
            }
            catch (error) {
                reject(error);
                return;
            }
            const timeout = this.options.replyTimeout ?? 30_000;
            const entry = {
                reply: REPLIES[action],
                resolve: resolve,
                reject,
                timer: setTimeout(() => {
                    this.pending = this.pending.filter((item) => item !== entry);
                    reject(new ProtocolError("timeout", `No reply to ${action} within ${timeout} ms.`));
                }, timeout),
            };
            this.pending.push(entry);
        });
    }
    rejectPending(code, message) {
        const pending = this.pending;
        this.pending = [];
        for (const entry of pending) {
            clearTimeout(entry.timer);
            entry.reject(new ProtocolError(code, message));
        }
    }
    // -- applying frames ---------------------------------------------------------------------------
    onMessage(data) {
        let frame;
        try {
            frame = JSON.parse(typeof data === "string" ? data : String(data));
        }
        catch {
            return; // the server sends JSON text only
        }
        if (!frame || typeof frame !== "object" || typeof frame.type !== "string")
            return;
        this.failures = 0; // a frame arrived: the connection works, the back-off starts over next time
        this.emit("frame", frame);
        for (const queue of this.iterators)
            queue.push(frame);
        this.apply(frame);
    }
    /** Applies one server frame to the snapshot (exposed for clients that bring their own transport). */
    apply(frame) {
        switch (frame.type) {
            case "status":
                return this.applyStatus(frame);
            case "delta":
                return this.applyDelta(frame);
            case "final":
                return this.applyFinal(frame);
            case "interrupt":
                if (frame.message_id === this.snapshot.messageId)
                    this.update({ interrupts: frame.interrupts });
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
    applyStatus(frame) {
        const changes = { state: frame.state, runId: frame.run_id, epoch: frame.epoch };
        if (frame.message_id !== this.snapshot.messageId) {
            // Another turn: start it from nothing.
            Object.assign(changes, { messageId: frame.message_id, index: 0, text: "", toolCalls: null, final: null, interrupts: [] });
            this.resumeSent = null;
        }
        else if (frame.state !== "interrupted") {
            changes.interrupts = [];
        }
        this.update(changes);
        this.emit("status", frame);
        if (frame.state === "dead" && this.options.resumeDead && frame.message_id && this.resumeSent !== frame.message_id) {
            this.resumeSent = frame.message_id;
            this.resume(frame.message_id).catch((error) => {
                if (this.resumeSent === frame.message_id)
                    this.resumeSent = null;
                void error;
            });
        }
    }
    applyDelta(frame) {
        const held = this.snapshot;
        if (frame.message_id !== held.messageId || held.final || frame.index <= held.index) {
            return; // another turn's (a status comes first), after the final, or already applied
        }
        if (frame.offset > held.text.length) {
            // A gap: the client lacks text before this frame's. Reattach from the position held.
            if (this.socket?.readyState === OPEN)
                this.attach();
            return;
        }
        const appended = frame.text.slice(held.text.length - frame.offset);
        const changes = { index: frame.index, text: held.text + appended };
        if (frame.tool_calls !== undefined)
            changes.toolCalls = frame.tool_calls ?? null;
        this.update(changes);
        this.emit("delta", frame);
        if (appended)
            this.emit("text", { messageId: frame.message_id, text: this.snapshot.text, appended, index: frame.index });
    }
    applyFinal(frame) {
        if (frame.message_id !== this.snapshot.messageId)
            return;
        const content = typeof frame.message.content === "string" ? frame.message.content : JSON.stringify(frame.message.content);
        const replaced = content !== this.snapshot.text;
        this.update({
            final: frame,
            text: content,
            index: Math.max(this.snapshot.index, frame.index),
            toolCalls: frame.message.tool_calls ?? this.snapshot.toolCalls,
            interrupts: [],
        });
        if (replaced)
            this.emit("text", { messageId: frame.message_id, text: content, appended: "", index: frame.index });
        if (!this.finalized.has(frame.message_id)) {
            this.finalized.add(frame.message_id);
            this.emit("final", frame);
        }
    }
    applyError(frame) {
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
    settle(frame) {
        const at = this.pending.findIndex((entry) => entry.reply === frame.type);
        if (at < 0)
            return;
        const [entry] = this.pending.splice(at, 1);
        clearTimeout(entry.timer);
        entry.resolve(frame);
    }
    update(changes) {
        const next = { ...this.snapshot, ...changes };
        const keys = Object.keys(changes);
        if (keys.every((key) => next[key] === this.snapshot[key]))
            return;
        this.snapshot = next;
        this.emit("change", next);
    }
}
/** An async iterator over frames pushed to it. */
class FrameQueue {
    onReturn;
    buffer = [];
    waiting = null;
    done = false;
    constructor(onReturn) {
        this.onReturn = onReturn;
    }
    push(frame) {
        if (this.done)
            return;
        if (this.waiting) {
            const resolve = this.waiting;
            this.waiting = null;
            resolve({ value: frame, done: false });
        }
        else {
            this.buffer.push(frame);
        }
    }
    end() {
        this.done = true;
        if (this.waiting) {
            const resolve = this.waiting;
            this.waiting = null;
            resolve({ value: undefined, done: true });
        }
    }
    next() {
        const frame = this.buffer.shift();
        if (frame)
            return Promise.resolve({ value: frame, done: false });
        if (this.done)
            return Promise.resolve({ value: undefined, done: true });
        return new Promise((resolve) => (this.waiting = resolve));
    }
    return() {
        this.end();
        this.buffer = [];
        this.onReturn();
        return Promise.resolve({ value: undefined, done: true });
    }
    [Symbol.asyncIterator]() {
        return this;
    }
}

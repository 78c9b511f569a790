// @vitest-environment happy-dom
// Refusals without a server: 4401/4403/4404/4429 and a refused ticket stop the client and are surfaced
// (the `refused` event, `state.refused`, the hook's `error`); a transient close still reconnects.
import { act, cleanup, renderHook, waitFor } from "@testing-library/react";
import { afterEach, describe, expect, it } from "vitest";
import { ConversationClient, ProtocolError, RefusedError, ticketUrl, type WebSocketLike } from "../src/index.js";
import { useConversation } from "../src/react.js";

(globalThis as { IS_REACT_ACT_ENVIRONMENT?: boolean }).IS_REACT_ACT_ENVIRONMENT = true;

const ID = "33333333-3333-4333-8333-333333333333";
const FAST = { initialDelay: 5, maxDelay: 10 };

/** A socket that opens, then closes with the next code of `closes` (none left: stays open). */
function fakeSockets(closes: number[]) {
  const opened: string[] = [];
  class FakeSocket implements WebSocketLike {
    readyState = 0;
    onopen: ((event: unknown) => void) | null = null;
    onmessage: ((event: { data: unknown }) => void) | null = null;
    onclose: ((event: { code: number; reason: string }) => void) | null = null;
    onerror: ((event: unknown) => void) | null = null;
    constructor(url: string) {
      opened.push(url);
      const code = closes.shift();
      setTimeout(() => {
        this.readyState = 1;
        this.onopen?.({});
        if (code !== undefined) {
          this.readyState = 3;
          this.onclose?.({ code, reason: "" });
        }
      }, 1);
    }
    send(): void {}
    close(): void {
      this.readyState = 3;
    }
  }
  return { FakeSocket, opened };
}

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

afterEach(() => cleanup());

describe("refusing close codes", () => {
  it.each([
    [4404, "not_found"],
    [4403, "ticket_refused"],
    [4401, "not_authenticated"],
    [4429, "too_many_sockets"],
  ])("%i stops the client and surfaces a RefusedError (%s) once", async (closeCode, code) => {
    const { FakeSocket, opened } = fakeSockets([closeCode]);
    const client = new ConversationClient({ url: `ws://x/ws/conversations/${ID}/`, WebSocket: FakeSocket, reconnect: FAST });
    const refusals: RefusedError[] = [];
    client.on("refused", (refusal) => refusals.push(refusal));
    await client.connect();
    await pause(100);
    expect(opened).toHaveLength(1); // no reconnect
    expect(refusals).toHaveLength(1);
    expect(refusals[0]).toBeInstanceOf(RefusedError);
    expect(refusals[0]).toMatchObject({ code, closeCode });
    expect(client.state.refused).toBe(refusals[0]);
    expect(client.state.connected).toBe(false);
  });

  it("a pending action is rejected with the refusal's code", async () => {
    const { FakeSocket } = fakeSockets([]);
    const client = new ConversationClient({ url: "ws://x/", WebSocket: FakeSocket, reconnect: FAST });
    await client.connect();
    const started = client.start("go").catch((error: ProtocolError) => error);
    (client as unknown as { socket: WebSocketLike }).socket.onclose?.({ code: 4404, reason: "" });
    expect(await started).toMatchObject({ code: "not_found" });
  });

  it("a transient close still reconnects, and refuses nothing", async () => {
    const { FakeSocket, opened } = fakeSockets([1006]);
    const client = new ConversationClient({ url: "ws://x/", WebSocket: FakeSocket, reconnect: FAST });
    await client.connect();
    await pause(100);
    expect(opened).toHaveLength(2);
    expect(client.state.refused).toBeNull();
    expect(client.state.connected).toBe(true);
    client.close();
  });
});

describe("ticketUrl", () => {
  function answering(statuses: number[]) {
    const calls: { url: string; init?: RequestInit }[] = [];
    const fetcher = (async (url: string, init?: RequestInit) => {
      calls.push({ url, init });
      const status = statuses.shift() ?? 201;
      return new Response(JSON.stringify({ ticket: "t:k=" }), { status, headers: { "Content-Type": "application/json" } });
    }) as unknown as typeof fetch;
    return { calls, fetcher };
  }

  it("a ticket answered 404 stops the client at once, surfaced (before: retried forever, no error)", async () => {
    const { calls, fetcher } = answering([404, 404, 404]);
    const { FakeSocket, opened } = fakeSockets([]);
    const url = ticketUrl({ api: "https://example.com/api/agents/", site: "https://example.com", conversationId: ID, fetch: fetcher });
    const client = new ConversationClient({ url, WebSocket: FakeSocket, reconnect: FAST });
    const refusals: RefusedError[] = [];
    client.on("refused", (refusal) => refusals.push(refusal));
    const failure = await client.connect().catch((error: unknown) => error);
    await pause(100);
    expect(failure).toBeInstanceOf(RefusedError);
    expect(failure).toMatchObject({ code: "not_found", status: 404 });
    expect(calls).toHaveLength(1);
    expect(calls[0].url).toBe(`https://example.com/api/agents/conversations/${ID}/ws-ticket/`);
    expect(calls[0].init?.method).toBe("POST");
    expect(opened).toHaveLength(0);
    expect(refusals).toEqual([failure]);
    expect(client.state.refused).toBe(failure);
  });

  it("a transient ticket failure (503) is retried, then the socket opens with the ticket", async () => {
    const { calls, fetcher } = answering([503]);
    const { FakeSocket, opened } = fakeSockets([]);
    const url = ticketUrl({ api: "https://example.com/api/agents", site: "https://example.com", conversationId: ID, fetch: fetcher,
      init: { headers: { Authorization: "Basic x" } } });
    const client = new ConversationClient({ url, WebSocket: FakeSocket, reconnect: FAST });
    const open = client.waitFor("open", () => true, 5_000);
    client.connect().catch(() => undefined);
    await open;
    expect(calls).toHaveLength(2);
    expect(opened).toEqual([`wss://example.com/ws/conversations/${ID}/?ticket=t%3Ak%3D`]);
    expect(client.state.refused).toBeNull();
    client.close();
  });

  it("a url function that throws a RefusedError of its own stops the client too", async () => {
    let attempts = 0;
    const client = new ConversationClient({
      url: async () => {
        attempts += 1;
        throw new RefusedError("logged_out", "Log in again.");
      },
      WebSocket: fakeSockets([]).FakeSocket,
      reconnect: FAST,
    });
    await expect(client.connect()).rejects.toMatchObject({ code: "logged_out" });
    await pause(100);
    expect(attempts).toBe(1);
  });
});

describe("useConversation", () => {
  it("shows a refused socket in error and refused, and stops", async () => {
    const { FakeSocket, opened } = fakeSockets([4404]);
    const { result } = renderHook(() =>
      useConversation(ID, { url: "ws://x/", WebSocket: FakeSocket, reconnect: FAST, fetchMessages: async () => [] }),
    );
    await waitFor(() => expect(result.current.refused).toBeInstanceOf(RefusedError));
    expect(result.current.error).toBe(result.current.refused);
    expect(result.current.refused?.code).toBe("not_found");
    await act(() => pause(100));
    expect(opened).toHaveLength(1);
  });

  it("reads the transcript under the apiBase it is given; a new conversation's 404 is an empty transcript, no error", async () => {
    const requested: string[] = [];
    const saved = globalThis.fetch;
    globalThis.fetch = (async (url: string) => {
      requested.push(String(url));
      return new Response("{}", { status: 404 });
    }) as unknown as typeof fetch;
    try {
      const { FakeSocket } = fakeSockets([]);
      const { result } = renderHook(() =>
        useConversation(ID, { url: "ws://x/", WebSocket: FakeSocket, reconnect: FAST, apiBase: "/api/agents/" }),
      );
      await waitFor(() => expect(result.current.connected).toBe(true));
      await act(() => pause(50));
      expect(requested).toEqual([`/api/agents/conversations/${ID}/messages/`]);
      expect(result.current.messages).toEqual([]);
      expect(result.current.error).toBeNull();
    } finally {
      globalThis.fetch = saved;
    }
  });
});

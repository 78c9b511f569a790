// An async url (a fresh ticket per attempt) and the ticket refusal 4403, with a scripted socket.
import { describe, expect, it } from "vitest";
import { ConversationClient, FATAL_CLOSE_CODES, type WebSocketConstructor, type WebSocketLike } from "../src/index.js";

class ScriptedSocket implements WebSocketLike {
  static opened: ScriptedSocket[] = [];
  readyState = 0;
  onopen: ((event: unknown) => void) | null = null;
  onmessage: ((event: { data: unknown }) => void) | null = null;
  onclose: ((event: { code: number; reason: string }) => void) | null = null;
  onerror: ((event: unknown) => void) | null = null;
  sent: string[] = [];

  constructor(readonly url: string) {
    ScriptedSocket.opened.push(this);
    setTimeout(() => {
      this.readyState = 1;
      this.onopen?.({});
    }, 0);
  }

  send(data: string): void {
    this.sent.push(data);
  }

  close(code = 1000, reason = ""): void {
    this.readyState = 3;
    this.onclose?.({ code, reason });
  }
}

const Scripted = ScriptedSocket as unknown as WebSocketConstructor;
const tick = () => new Promise((resolve) => setTimeout(resolve, 5));

describe("tickets", () => {
  it("awaits an async url for every attempt, so each connection gets a fresh ticket", async () => {
    ScriptedSocket.opened = [];
    let issued = 0;
    const client = new ConversationClient({
      url: async () => `ws://example.test/ws/conversations/c/?ticket=t${++issued}`,
      WebSocket: Scripted,
      reconnect: { initialDelay: 1, maxDelay: 1, jitter: 0 },
    });
    await client.connect();
    expect(ScriptedSocket.opened.map((socket) => socket.url)).toEqual(["ws://example.test/ws/conversations/c/?ticket=t1"]);
    expect(JSON.parse(ScriptedSocket.opened[0].sent[0])).toEqual({ type: "attach" });
    ScriptedSocket.opened[0].close(1006); // the network drops: reconnect with a new ticket
    await client.waitFor("open", () => true, 1000);
    expect(ScriptedSocket.opened.map((socket) => socket.url.split("=")[1])).toEqual(["t1", "t2"]);
    client.close();
  });

  it("a rejected url promise is a failed attempt: the client backs off and asks again", async () => {
    ScriptedSocket.opened = [];
    let calls = 0;
    const client = new ConversationClient({
      url: async () => {
        calls += 1;
        if (calls === 1) throw new Error("ws-ticket: HTTP 503");
        return "ws://example.test/ws/conversations/c/?ticket=ok";
      },
      WebSocket: Scripted,
      reconnect: { initialDelay: 1, maxDelay: 1, jitter: 0 },
    });
    const closes: number[] = [];
    client.on("close", (event) => closes.push(event.code));
    await client.connect();
    expect(calls).toBe(2);
    expect(closes).toEqual([1006]);
    expect(ScriptedSocket.opened).toHaveLength(1);
    client.close();
  });

  it("4403 (ticket refused) is a refusal: no reconnect with a spent ticket", async () => {
    ScriptedSocket.opened = [];
    expect(FATAL_CLOSE_CODES.has(4403)).toBe(true);
    const client = new ConversationClient({ url: "ws://example.test/?ticket=spent", WebSocket: Scripted, reconnect: { initialDelay: 1 } });
    const closes: { code: number; willReconnect: boolean }[] = [];
    client.on("close", (event) => closes.push({ code: event.code, willReconnect: event.willReconnect }));
    await client.connect();
    ScriptedSocket.opened[0].close(4403);
    await tick();
    await tick();
    expect(closes).toEqual([{ code: 4403, willReconnect: false }]);
    expect(ScriptedSocket.opened).toHaveLength(1);
  });

  it("close() while the url is still resolving opens nothing", async () => {
    ScriptedSocket.opened = [];
    let release: (url: string) => void = () => {};
    const client = new ConversationClient({ url: () => new Promise<string>((resolve) => (release = resolve)), WebSocket: Scripted });
    const connecting = client.connect().catch((error: Error) => error);
    client.close();
    release("ws://example.test/?ticket=late");
    await tick();
    expect(ScriptedSocket.opened).toHaveLength(0);
    expect(await connecting).toBeInstanceOf(Error);
  });
});

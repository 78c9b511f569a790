// The client's rules without a server: text assembled by offset, turns, finals, back-off, URLs, generated types.
import { execFileSync } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { ConversationClient, backoffDelay, conversationUrl, type ServerFrame, type TextEvent } from "../src/index.js";

const M1 = "11111111-1111-4111-8111-111111111111";
const M2 = "22222222-2222-4222-8222-222222222222";

function status(messageId: string | null, state = "alive"): ServerFrame {
  return { type: "status", state: state as "alive", message_id: messageId, run_id: null, epoch: 1, index: 0 };
}

function delta(index: number, offset: number, text: string, messageId = M1): ServerFrame {
  return { type: "delta", message_id: messageId, index, offset, text };
}

function offline(): ConversationClient {
  return new ConversationClient({ url: "ws://127.0.0.1:9/", reconnect: false });
}

describe("applying frames", () => {
  it("appends by offset: repeated and overlapping frames add nothing, nothing is lost", () => {
    const client = offline();
    const appended: string[] = [];
    client.on("text", (event: TextEvent) => appended.push(event.appended));
    client.apply(status(M1));
    client.apply(delta(1, 0, "Hel"));
    client.apply(delta(1, 0, "Hel")); // repeated
    client.apply(delta(2, 1, "ello")); // overlaps what is held
    client.apply(delta(3, 5, " world"));
    expect(client.text).toBe("Hello world");
    expect(appended).toEqual(["Hel", "lo", " world"]);
    expect(client.state.index).toBe(3);
  });

  it("does not apply a frame past a gap (it reattaches instead)", () => {
    const client = offline();
    client.apply(status(M1));
    client.apply(delta(1, 0, "abc"));
    client.apply(delta(3, 6, "ghi"));
    expect(client.text).toBe("abc");
    expect(client.attachFrame()).toEqual({ type: "attach", message_id: M1, last_index: 1, offset: 3 });
  });

  it("a status with another message_id starts a new turn; the final message is the authority, announced once", () => {
    const client = offline();
    let finals = 0;
    client.on("final", () => (finals += 1));
    client.apply(status(M1));
    client.apply(delta(1, 0, "old"));
    const final: ServerFrame = {
      type: "final", message_id: M1, index: 1, message: { role: "assistant", content: "old!" }, stop_reason: "completed",
    };
    client.apply(final);
    client.apply(final); // replayed on a reattach
    expect(client.text).toBe("old!");
    expect(finals).toBe(1);
    client.apply(delta(2, 4, "late")); // after the final: ignored
    expect(client.text).toBe("old!");
    client.apply(status(M2));
    expect(client.text).toBe("");
    expect(client.state.final).toBeNull();
    client.apply(delta(1, 0, "new", M2));
    client.apply(delta(2, 0, "ignored", M1)); // another turn's frame
    expect(client.text).toBe("new");
  });

  it("index_ahead makes the client take the server's indexes from 0, keeping its text", () => {
    const client = offline();
    client.apply(status(M1));
    client.apply(delta(5, 0, "abc"));
    client.apply({ type: "error", code: "index_ahead", message: "ahead", field: "last_index" });
    client.apply(delta(2, 0, "abcdef"));
    expect(client.text).toBe("abcdef");
  });
});

describe("reconnecting", () => {
  it("backs off exponentially up to the cap, with jitter", () => {
    const options = { initialDelay: 100, maxDelay: 1000, factor: 2, jitter: 0.5 };
    expect([1, 2, 3, 4, 5, 6].map((attempt) => backoffDelay(attempt, options, () => 0))).toEqual([100, 200, 400, 800, 1000, 1000]);
    expect(backoffDelay(3, options, () => 0.999)).toBeCloseTo(200.2, 0);
    const drawn = Array.from({ length: 50 }, () => backoffDelay(2, options));
    expect(Math.min(...drawn)).toBeGreaterThanOrEqual(100);
    expect(Math.max(...drawn)).toBeLessThanOrEqual(200);
    expect(new Set(drawn).size).toBeGreaterThan(1);
  });

  it("builds socket URLs from a page's origin", () => {
    expect(conversationUrl("https://example.com/app/", "abc")).toBe("wss://example.com/app/ws/conversations/abc/");
    expect(conversationUrl("http://127.0.0.1:8000", "abc")).toBe("ws://127.0.0.1:8000/ws/conversations/abc/");
  });
});

describe("the generated types", () => {
  it("are up to date with agent_persistence/realtime/protocol.schema.json", () => {
    const root = join(dirname(fileURLToPath(import.meta.url)), "..");
    execFileSync(process.execPath, [join(root, "scripts", "generate-types.mjs"), "--check"], { cwd: root, stdio: "pipe" });
  });
});

describe("connecting", () => {
  it("rejects connect() with a clear error when there is no WebSocket implementation", async () => {
    const saved = (globalThis as { WebSocket?: unknown }).WebSocket;
    delete (globalThis as { WebSocket?: unknown }).WebSocket;
    try {
      await expect(offline().connect()).rejects.toThrow(/No WebSocket implementation/);
    } finally {
      if (saved) (globalThis as { WebSocket?: unknown }).WebSocket = saved;
    }
  });
});

describe("closing", () => {
  it("close() while the socket is still connecting raises nothing (the ws package reports it as an error event)", async () => {
    const { createRequire } = await import("node:module");
    const WebSocket = createRequire(import.meta.url)("ws");
    const client = new ConversationClient({ url: "ws://10.255.255.1:9/", WebSocket, reconnect: false });
    const connecting = client.connect().catch((error: Error) => error);
    client.close();
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(await connecting).toBeInstanceOf(Error);
  });
});

describe("activity frames", () => {
  it("are emitted as they come, and change neither the text nor the snapshot", () => {
    const client = offline();
    const rows: ServerFrame[] = [];
    client.on("activity", (frame) => rows.push(frame));
    client.apply(status(M1));
    client.apply(delta(1, 0, "Searching"));
    const activity: ServerFrame = {
      type: "activity", id: M2, activity_type: "web_search", content: { found: 3 }, metadata: {},
      message_id: M1, run_id: null, position: 0, revision: 2,
    };
    client.apply(activity);
    expect(rows).toEqual([activity]);
    expect(client.text).toBe("Searching");
    expect(client.state.index).toBe(1);
  });
});

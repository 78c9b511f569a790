// The client against two real server processes (tests/clients/serve.py): every scenario ends with
// the assembled text equal to the answer stored in the database (read over the REST API).
import { afterEach, describe, expect, it } from "vitest";
import type { DeltaFrame, ServerFrame } from "../src/index.js";
import { ProtocolError } from "../src/index.js";
import {
  ANSWER,
  checkFrame,
  clientOf,
  closeClients,
  control,
  info,
  newConversation,
  recordAppends,
  storedAnswer,
  untilText,
  violations,
} from "./helpers.js";

afterEach(async () => {
  closeClients();
  expect(violations.splice(0)).toEqual([]); // every frame, both ways, matched the schema
  // A scenario that stopped a server leaves it running again for the next one.
  await control("/servers/a/start");
  await control("/servers/b/start");
});

describe("the frame check", () => {
  it("records frames the schema refuses, both ways", () => {
    checkFrame("client", JSON.stringify({ type: "attach", colour: "red" }));
    checkFrame("server", JSON.stringify({ type: "status", state: "idle" }));
    checkFrame("server", JSON.stringify({ type: "status", state: "idle", message_id: null, run_id: null, epoch: 0, index: 0 }));
    expect(violations.splice(0).map((violation) => violation.split(":")[0])).toEqual(["client", "server"]);
  });
});

describe(`two servers (${info.database}${info.redis ? " + Redis" : ", in-memory layers"})`, () => {
  it("follows a turn started on the other server, exactly", async () => {
    const conversation = await newConversation();
    const producer = clientOf(conversation, "a");
    const follower = clientOf(conversation, "b");
    const appended = recordAppends(follower);
    const attached = follower.waitFor("status");
    await Promise.all([producer.connect(), follower.connect()]);
    await attached;
    const started = await producer.start("go");
    const [final] = await Promise.all([follower.untilFinal(), producer.untilFinal()]);
    expect(final.message_id).toBe(started.message_id);
    expect(final.stop_reason).toBe("completed");
    expect(follower.text).toBe(ANSWER);
    expect(producer.text).toBe(ANSWER);
    expect(appended.text).toBe(ANSWER);
    expect(await storedAnswer(conversation, started.message_id)).toBe(ANSWER);
    expect(follower.state.toolCalls?.[0]).toMatchObject({ name: "lookup" });
  });

  it("a second tab joining mid-answer catches up and ends with the stored answer", async () => {
    const conversation = await newConversation();
    const first = clientOf(conversation, "a");
    await first.connect();
    const started = await first.start("go");
    await untilText(first, ANSWER.length / 3);
    const tab = clientOf(conversation, "b");
    const frames: ServerFrame[] = [];
    tab.on("frame", (frame) => frames.push(frame));
    await tab.connect();
    await Promise.all([tab.untilFinal(), first.untilFinal()]);
    const catchUp = frames.find((frame): frame is DeltaFrame => frame.type === "delta");
    expect(catchUp?.offset).toBe(0);
    expect(catchUp!.text.length).toBeGreaterThan(0);
    expect(tab.text).toBe(ANSWER);
    expect(await storedAnswer(conversation, started.message_id)).toBe(ANSWER);
  });

  it("the follower's server is killed mid-answer: the client reconnects to the other server and resumes from its offset", async () => {
    const conversation = await newConversation();
    const producer = clientOf(conversation, "a");
    await producer.connect();
    // First connection to b; every reconnect to a (b is gone).
    const follower = clientOf(conversation, (attempt) => (attempt === 0 ? "b" : "a"));
    const appended = recordAppends(follower);
    const frames: ServerFrame[] = [];
    follower.on("frame", (frame) => frames.push(frame));
    await follower.connect();
    const started = await producer.start("go");
    await untilText(follower, ANSWER.length / 3);
    const closed = follower.waitFor("close");
    await control("/servers/b/kill");
    const close = await closed;
    expect(close.willReconnect).toBe(true);
    const held = follower.text.length;
    const seen = frames.length;
    await follower.waitFor("open");
    await follower.untilFinal();
    const resumed = frames.slice(seen).find((frame): frame is DeltaFrame => frame.type === "delta");
    if (resumed) expect(resumed.offset).toBe(held); // only what it lacked (none when the turn ended meanwhile)
    expect(follower.text).toBe(ANSWER);
    expect(appended.text).toBe(ANSWER);
    expect(appended.reconnects).toBeGreaterThanOrEqual(1);
    expect(await storedAnswer(conversation, started.message_id)).toBe(ANSWER);
  });

  it("the server stops mid-answer and comes back on its port: the client retries with back-off and resumes", async () => {
    const conversation = await newConversation();
    const producer = clientOf(conversation, "a");
    await producer.connect();
    const follower = clientOf(conversation, "b");
    const appended = recordAppends(follower);
    const delays: number[] = [];
    follower.on("reconnecting", (event) => delays.push(event.delay));
    await follower.connect();
    const started = await producer.start("go");
    await untilText(follower, ANSWER.length / 4);
    await control("/servers/b/stop");
    await new Promise((resolve) => setTimeout(resolve, 700)); // a few failed attempts while b is down
    await control("/servers/b/start");
    await follower.untilFinal();
    expect(delays.length).toBeGreaterThanOrEqual(2);
    expect(follower.text).toBe(ANSWER);
    expect(appended.text).toBe(ANSWER);
    expect(await storedAnswer(conversation, started.message_id)).toBe(ANSWER);
  });

  it("an interrupt is shown and answered; the turn goes on to the stored answer", async () => {
    const conversation = await newConversation("approval");
    const client = clientOf(conversation, "a");
    const watcher = clientOf(conversation, "b");
    await Promise.all([client.connect(), watcher.connect()]);
    const started = await client.start("go");
    const interrupt = await client.waitFor("interrupt");
    expect(client.state.state).toBe("interrupted");
    expect(client.state.interrupts[0]).toMatchObject({ kind: "tool_approval", payload: { name: "lookup" } });
    const answered = await client.answer({ [interrupt.interrupts[0].id]: { approved: true } });
    expect(answered.continued).toBe(true);
    expect(answered.interrupts).toEqual([interrupt.interrupts[0].id]);
    await Promise.all([client.untilFinal(), watcher.untilFinal()]);
    expect(client.state.interrupts).toEqual([]);
    expect(client.text).toBe(ANSWER);
    expect(watcher.text).toBe(ANSWER);
    expect(await storedAnswer(conversation, started.message_id)).toBe(ANSWER);
  });

  it("stop ends the turn cancelled; the partial answer is the stored one", async () => {
    const conversation = await newConversation();
    const client = clientOf(conversation, "a");
    const follower = clientOf(conversation, "b");
    await Promise.all([client.connect(), follower.connect()]);
    const started = await client.start("go");
    await untilText(client, 40);
    const stopped = await client.stop();
    expect(stopped.message_id).toBe(started.message_id);
    const [final] = await Promise.all([client.untilFinal(), follower.untilFinal()]);
    expect(final.stop_reason).toBe("cancelled");
    const stored = await storedAnswer(conversation, started.message_id);
    expect(stored.length).toBeGreaterThan(0);
    expect(stored.length).toBeLessThan(ANSWER.length);
    expect(ANSWER.startsWith(stored)).toBe(true);
    expect(client.text).toBe(stored);
    expect(follower.text).toBe(stored);
  });

  it("the producer's server is SIGKILLed mid-answer: a follower resumes the dead turn and every client ends with the stored answer", async () => {
    const conversation = await newConversation();
    const follower = clientOf(conversation, "b", { resumeDead: true });
    const appended = recordAppends(follower);
    // The producer's own client reconnects to b once a is gone.
    const producer = clientOf(conversation, (attempt) => (attempt === 0 ? "a" : "b"));
    await Promise.all([follower.connect(), producer.connect()]);
    const started = await producer.start("go");
    await untilText(follower, ANSWER.length / 2);
    await control("/servers/a/kill");
    await follower.waitFor("status", (status) => status.state === "dead", 30_000);
    await Promise.all([follower.untilFinal({ timeout: 60_000 }), producer.untilFinal({ timeout: 60_000 })]);
    expect(follower.state.final?.stop_reason).toBe("completed");
    expect(follower.state.epoch).toBeGreaterThan(1);
    expect(follower.text).toBe(ANSWER);
    expect(appended.text).toBe(ANSWER);
    expect(producer.text).toBe(ANSWER);
    expect(await storedAnswer(conversation, started.message_id, "b")).toBe(ANSWER);
  });

  it("refusals are typed errors and the socket carries on; the async iterator yields the frames", async () => {
    const conversation = await newConversation();
    const client = clientOf(conversation, "a");
    await client.connect();
    await expect(client.stop()).rejects.toMatchObject({ code: "no_turn_running" });
    await expect(client.start("go", { agent: "nobody" })).rejects.toMatchObject({ code: "unknown_agent" });
    const frames = client.frames();
    const started = await client.start("go");
    const busy = await client.start("again").catch((error: unknown) => error);
    expect(busy).toBeInstanceOf(ProtocolError);
    expect((busy as ProtocolError).code).toBe("conversation_busy");
    expect((busy as ProtocolError).details).toHaveProperty("occupant");
    const types = new Set<string>();
    for await (const frame of frames) {
      types.add(frame.type);
      if (frame.type === "final") break;
    }
    expect([...types]).toEqual(expect.arrayContaining(["started", "delta", "final"]));
    expect(client.text).toBe(ANSWER);
    expect(await storedAnswer(conversation, started.message_id)).toBe(ANSWER);
  });

  it("a reloaded page (a new client after the end) gets the answer once, without a replayed final", async () => {
    const conversation = await newConversation();
    const client = clientOf(conversation, "a");
    await client.connect();
    const started = await client.start("go");
    await client.untilFinal();
    let finals = 0;
    client.on("final", () => (finals += 1));
    client.reconnect(); // the server replays the final frame on attach: applied, not announced again
    await client.waitFor("status");
    const reloaded = clientOf(conversation, "b");
    await reloaded.connect();
    const final = await reloaded.untilFinal();
    expect(final.message.content).toBe(ANSWER);
    expect(reloaded.text).toBe(ANSWER);
    expect(client.text).toBe(ANSWER);
    expect(finals).toBe(0);
    expect(await storedAnswer(conversation, started.message_id)).toBe(ANSWER);
  });

  it("a refused socket (no session) is not retried", async () => {
    const conversation = await newConversation();
    const client = clientOf(conversation, "a", { webSocketOptions: { headers: {} } });
    const closed = client.waitFor("close");
    await expect(client.connect()).resolves.toBeUndefined(); // the server accepts, then closes with 4401
    const close = await closed;
    expect(close.code).toBe(4401);
    expect(close.willReconnect).toBe(false);
    expect(client.state.refused?.code).toBe("not_authenticated");
  });

  it("start() on a brand-new id creates the conversation and streams its first turn (before: closed 4404)", async () => {
    const conversation = crypto.randomUUID();
    const client = clientOf(conversation, "a");
    await client.connect();
    await client.waitFor("status", (frame) => frame.state === "idle");
    const started = await client.start("go", { agent: "scripted" });
    const final = await client.untilFinal(); // a new conversation has no earlier final
    expect(final.message.content).toBe(ANSWER);
    expect(client.text).toBe(ANSWER);
    expect(client.state.refused).toBeNull();
    expect(await storedAnswer(conversation, started.message_id, "b")).toBe(ANSWER);
  });

  it("a socket the server refuses with 4404 stops and surfaces a RefusedError", async () => {
    const client = clientOf("not-a-uuid", "a");
    const refused = client.waitFor("refused");
    await client.connect();
    const refusal = await refused;
    expect(refusal).toMatchObject({ code: "not_found", closeCode: 4404 });
    expect(client.state.refused).toBe(refusal);
  });
});

// @ag-ui/client's HttpAgent follows a durable turn over AG-UI server-sent events, on two real servers.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { HttpAgent } from "@ag-ui/client";

import {
  authHeaders, base, control, fetchKeepingEventIds, newConversation, resumeTurn, startServers, startTurn, storedMessages,
  untilReleased,
} from "../servers.mjs";

let info;

before(async () => {
  info = await startServers();
}, { timeout: 120_000 });

after(async () => {
  await info?.stop();
});

function agent(server, conversationId, { headers = {}, fetch, initialMessages } = {}) {
  return new HttpAgent({
    url: `${base(info, server)}/api/conversations/${conversationId}/agui/`,
    threadId: conversationId,
    headers: { ...authHeaders(info), ...headers },
    fetch,
    initialMessages,
  });
}

/** What the client ends with must be exactly what the server stored: the answer's text, its tool calls and results. */
async function assertEndsWithTheStoredTurn(messages, conversationId, messageId, { server = "a", tools = true } = {}) {
  const stored = (await storedMessages(info, conversationId, server)).find((message) => message.id === messageId);
  assert.ok(stored, `turn ${messageId} has a stored message`);
  const answer = messages.filter((message) => message.id === messageId);
  assert.equal(answer.length, 1, "the answer is one message");
  assert.equal(answer[0].role, "assistant");
  assert.equal(answer[0].content, stored.content);
  const storedCalls = stored.tool_calls ?? [];
  assert.deepEqual(
    (answer[0].toolCalls ?? []).map((call) => ({ id: call.id, name: call.function.name, arguments: JSON.parse(call.function.arguments) })),
    storedCalls.map((call) => ({ id: call.id, name: call.name, arguments: call.arguments })),
  );
  const results = messages.filter((message) => message.role === "tool");
  assert.deepEqual(
    results.map((message) => ({ id: message.toolCallId, result: JSON.parse(message.content) })),
    storedCalls.map((call) => ({ id: call.id, result: call.result })),
  );
  if (tools) assert.ok(storedCalls.length > 0, "the scripted turn calls a tool");
}

test("HttpAgent follows a turn produced on server a from server b, to exactly the stored answer", { timeout: 60_000 }, async () => {
  const conversationId = await newConversation(info);
  const turn = await startTurn(info, "a", conversationId);
  const follower = agent("b", conversationId);
  const types = [];
  const { newMessages } = await follower.runAgent({}, { onEvent: ({ event }) => void types.push(event.type) });
  assert.equal(types[0], "RUN_STARTED");
  assert.equal(types.at(-1), "RUN_FINISHED");
  assert.ok(types.includes("TOOL_CALL_RESULT") && types.includes("STATE_SNAPSHOT"));
  assert.ok(newMessages.some((message) => message.id === turn.message_id));
  await assertEndsWithTheStoredTurn(follower.messages, conversationId, turn.message_id);
});

test("cut mid-answer on server a, HttpAgent resumes on server b with Last-Event-ID: nothing twice, nothing lost", { timeout: 60_000 }, async () => {
  const conversationId = await newConversation(info);
  const turn = await startTurn(info, "a", conversationId);
  const keeping = fetchKeepingEventIds();
  const first = agent("a", conversationId, { fetch: keeping.fetch });
  let received = "";
  await first.runAgent({}, {
    onTextMessageContentEvent: ({ event }) => {
      received += event.delta;
      if (received.length > 60) first.abortRun(); // the network goes away mid-answer
    },
  });
  const held = first.messages.find((message) => message.id === turn.message_id);
  assert.ok(held && held.content.length > 60, "the first connection got part of the answer");
  assert.ok(keeping.lastEventId, "an event id was kept");
  await untilReleased(info, "a"); // the client went away: its stream let go of everything
  // The cut left the client short of the answer (the turn may have gone on, or even ended, meanwhile).
  assert.ok(held.content.length < 420, "the first connection was cut before the whole answer");

  const second = agent("b", conversationId, {
    headers: { "Last-Event-ID": keeping.lastEventId },
    initialMessages: first.messages.filter((message) => message.role !== "activity"),
  });
  const types = [];
  await second.runAgent({}, { onEvent: ({ event }) => void types.push(event.type) });
  assert.equal(types.at(-1), "RUN_FINISHED");
  await assertEndsWithTheStoredTurn(second.messages, conversationId, turn.message_id);
  await untilReleased(info, "b");
});

test("a Last-Event-ID that is not ours is a 400 with a JSON body, not a stream", { timeout: 30_000 }, async () => {
  const conversationId = await newConversation(info);
  await startTurn(info, "a", conversationId);
  const response = await fetch(`${base(info, "b")}/api/conversations/${conversationId}/agui/`, {
    headers: { ...authHeaders(info), Accept: "text/event-stream", "Last-Event-ID": "-1" },
  });
  assert.equal(response.status, 400);
  assert.match(response.headers.get("content-type"), /application\/json/);
  assert.equal((await response.json()).code, "invalid_last_event_id");
});

test("an approval ends the run with AG-UI's interrupt outcome; the next run's resume entry approves it and streams the rest", { timeout: 60_000 }, async () => {
  const conversationId = await newConversation(info, "approval");
  const turn = await startTurn(info, "a", conversationId);
  const client = agent("b", conversationId);
  let outcome;
  await client.runAgent({}, { onRunFinishedEvent: ({ event }) => void (outcome = event.outcome) });
  assert.equal(outcome?.type, "interrupt");
  const [interrupt] = outcome.interrupts;
  assert.equal(interrupt.reason, "tool_approval");
  assert.equal(interrupt.toolCallId, "call-1");
  const heldBefore = client.messages.find((message) => message.id === turn.message_id).content;
  let finished;
  await client.runAgent(
    { resume: [{ interruptId: interrupt.id, status: "resolved", payload: { approved: true } }] },
    { onRunFinishedEvent: ({ event }) => void (finished = event.outcome) },
  );
  assert.equal(finished?.type ?? "success", "success");
  const answer = client.messages.find((message) => message.id === turn.message_id);
  assert.ok(answer.content.startsWith(heldBefore) && answer.content.length > heldBefore.length);
  await assertEndsWithTheStoredTurn(client.messages, conversationId, turn.message_id);
  await untilReleased(info, "b");
});

// Last: it kills server a (and starts it again at the end).
test("the producer's server is SIGKILLed mid-answer: the AG-UI run on the other server goes on through the takeover", { timeout: 90_000 }, async () => {
  // The paced agent: 300 chunks of 6 characters, one every 0.1 s, so the kill lands mid-answer.
  const conversationId = await newConversation(info, "paced");
  const turn = await startTurn(info, "a", conversationId, JSON.stringify({ chunks: 300, every: 0.1 }));
  const client = agent("b", conversationId);
  let text = "";
  let killed;
  let resumed;
  const epochs = [];
  try {
    await client.runAgent({}, {
      onTextMessageContentEvent: ({ event }) => {
        text += event.delta;
        if (text.length > 100 && !killed) killed = control(info, "/servers/a/kill");
      },
      onStateSnapshotEvent: ({ event }) => {
        const { state, epoch } = event.snapshot.turn;
        epochs.push(epoch);
        if (state === "dead" && !resumed) resumed = killed.then(() => resumeTurn(info, "b", conversationId));
      },
    });
    assert.ok(killed && resumed, "the producer was killed and the turn resumed mid-run");
    assert.ok((await resumed).epoch > 1 && Math.max(...epochs) > 1, "the stream showed the takeover");
    await assertEndsWithTheStoredTurn(client.messages, conversationId, turn.message_id, { server: "b", tools: false });
    assert.equal(text, client.messages.find((message) => message.id === turn.message_id).content, "no text twice");
    await untilReleased(info, "b");
  } finally {
    await control(info, "/servers/a/start");
  }
});

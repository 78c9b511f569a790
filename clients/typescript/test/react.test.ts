// @vitest-environment happy-dom
// useConversation against the real servers, rendered by @testing-library/react under happy-dom.
import { act, cleanup, renderHook, waitFor } from "@testing-library/react";
import { afterEach, describe, expect, it } from "vitest";
import { useConversation, type StoredMessage, type UseConversationOptions } from "../src/react.js";
import { ANSWER, WebSocket, info, newConversation, socketUrl, storedMessages, violations, type ServerName } from "./helpers.js";

(globalThis as { IS_REACT_ACT_ENVIRONMENT?: boolean }).IS_REACT_ACT_ENVIRONMENT = true;

afterEach(() => {
  cleanup();
  expect(violations.splice(0)).toEqual([]); // every frame, both ways, matched the schema
});

function options(server: ServerName): UseConversationOptions {
  return {
    url: (conversationId) => socketUrl(server, conversationId),
    WebSocket,
    webSocketOptions: { headers: { Cookie: info.cookie } },
    reconnect: { initialDelay: 100, maxDelay: 1000 },
    fetchMessages: (conversationId): Promise<StoredMessage[]> => storedMessages(conversationId, server),
  };
}

const WAIT = { timeout: 30_000, interval: 50 };

function answersShown(messages: { role: string; content: unknown }[]): number {
  return messages.filter((message) => message.role === "assistant" && message.content === ANSWER).length;
}

describe("useConversation", () => {
  it("starts a turn, shows the live text, then the stored transcript with the answer once", async () => {
    const conversation = await newConversation();
    const { result } = renderHook(() => useConversation(conversation, options("a")));
    await waitFor(() => expect(result.current.status).toBe("idle"), WAIT);
    expect(result.current.connected).toBe(true);
    let started!: Awaited<ReturnType<typeof result.current.start>>;
    await act(async () => {
      started = await result.current.start("go");
    });
    await waitFor(() => expect(result.current.liveText.length).toBeGreaterThan(20), WAIT);
    expect(result.current.messages.at(-1)).toMatchObject({ id: started.message_id, live: true });
    await waitFor(() => expect(result.current.status).toBe("done"), WAIT);
    await waitFor(() => expect(result.current.messages.some((message) => message.id === started.message_id && !message.live)).toBe(true), WAIT);
    expect(result.current.messages.map((message) => message.role)).toEqual(["user", "assistant"]);
    expect(answersShown(result.current.messages)).toBe(1);
    expect(result.current.liveText).toBe("");
  });

  it("a reloaded page (mounted after the end, on the other server) shows the answer once", async () => {
    const conversation = await newConversation();
    const first = renderHook(() => useConversation(conversation, options("a")));
    await waitFor(() => expect(first.result.current.connected).toBe(true), WAIT);
    await act(async () => {
      await first.result.current.start("go");
    });
    await waitFor(() => expect(first.result.current.status).toBe("done"), WAIT);
    first.unmount();
    const reloaded = renderHook(() => useConversation(conversation, options("b")));
    await waitFor(() => expect(reloaded.result.current.snapshot?.final).toBeTruthy(), WAIT);
    await waitFor(() => expect(reloaded.result.current.messages.length).toBe(2), WAIT);
    await act(() => new Promise((resolve) => setTimeout(resolve, 300))); // any late frame or read would show here
    expect(answersShown(reloaded.result.current.messages)).toBe(1);
    expect(reloaded.result.current.messages.every((message) => !message.live)).toBe(true);
  });

  it("shows a pending interrupt and answers it; a reload mid-answer shows the answer once", async () => {
    const conversation = await newConversation("approval");
    const { result, unmount } = renderHook(() => useConversation(conversation, options("a")));
    await waitFor(() => expect(result.current.connected).toBe(true), WAIT);
    await act(async () => {
      await result.current.start("go");
    });
    await waitFor(() => expect(result.current.interrupts).toHaveLength(1), WAIT);
    expect(result.current.status).toBe("interrupted");
    const [interrupt] = result.current.interrupts;
    expect(interrupt).toMatchObject({ kind: "tool_approval", payload: { name: "lookup" } });
    await act(async () => {
      await result.current.answer({ [interrupt.id]: { approved: true } });
    });
    await waitFor(() => expect(result.current.liveText.length).toBeGreaterThan(ANSWER.length / 2), WAIT);
    unmount();
    const reloaded = renderHook(() => useConversation(conversation, options("b")));
    await waitFor(() => expect(reloaded.result.current.status).toBe("done"), WAIT);
    await waitFor(() => expect(answersShown(reloaded.result.current.messages)).toBe(1), WAIT);
    expect(reloaded.result.current.interrupts).toEqual([]);
    expect(reloaded.result.current.messages.filter((message) => message.role === "assistant")).toHaveLength(1);
  });
});

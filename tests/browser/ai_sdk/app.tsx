// A page on useChat (@ai-sdk/react) against agent_persistence's AI SDK endpoints: the stored transcript,
// then the chat with resume: true (a reload mid-answer replays the turn in flight), Approve / Deny for a
// tool approval, Send, and Stop (the SDK's stop() plus POST turns/cancel/, which ends the turn).
// `index.html?c=<conversation id>&agent=<agent>`; tests/browser/test_ai_sdk.py drives it in headless Chromium.

import { useChat } from "@ai-sdk/react";
import { DefaultChatTransport, lastAssistantMessageIsCompleteWithApprovalResponses, type UIMessage } from "ai";
import { useEffect, useMemo, useState } from "react";
import { createRoot } from "react-dom/client";

const API = "/api/";

// Django's CSRF check for session-authenticated writes: the same token in the cookie and the header.
function csrfToken(): string {
  const found = document.cookie.match(/(?:^|; )csrftoken=([^;]+)/);
  if (found) return found[1];
  const token = Array.from(crypto.getRandomValues(new Uint8Array(16)), (byte) => byte.toString(16).padStart(2, "0")).join("");
  document.cookie = `csrftoken=${token}; path=/; SameSite=Lax`;
  return token;
}

type StoredMessage = { id: string; role: string; content: unknown; tool_calls?: { id: string; name: string; arguments: unknown; result?: unknown }[] };

// The stored transcript as UI messages: the same ids as the stream's (the assistant message id is the turn's).
function uiMessages(items: StoredMessage[]): UIMessage[] {
  return items
    .filter((item) => item.role === "user" || item.role === "assistant")
    .map((item) => ({
      id: item.id,
      role: item.role as "user" | "assistant",
      parts: [
        { type: "text" as const, text: typeof item.content === "string" ? item.content : JSON.stringify(item.content) },
        ...(item.tool_calls ?? []).map((call) => ({
          type: `tool-${call.name}` as `tool-${string}`, toolCallId: call.id, state: "output-available" as const,
          input: call.arguments, output: call.result,
        })),
      ],
    })) as UIMessage[];
}

function textOf(message: UIMessage): string {
  return message.parts.map((part) => (part.type === "text" ? part.text : "")).join("");
}

function Chat({ id, agent, initial }: { id: string; agent: string; initial: UIMessage[] }) {
  const csrf = useMemo(csrfToken, []);
  const transport = useMemo(
    () => new DefaultChatTransport({ api: `${API}aisdk/chat`, headers: { "X-CSRFToken": csrf }, body: { agent } }),
    [csrf, agent],
  );
  const { messages, sendMessage, status, error, stop, addToolApprovalResponse } = useChat({
    id, messages: initial, transport, resume: true, sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
  });
  const stopTurn = async () => {
    await stop();
    await fetch(`${API}conversations/${id}/turns/cancel/`, { method: "POST", headers: { "X-CSRFToken": csrf } });
  };
  return (
    <main>
      <p>
        <span id="status">{status}</span> <span id="error">{error ? error.message : ""}</span>
      </p>
      <div id="transcript">
        {messages.map((message) => (
          <div key={message.id} className={`msg ${message.role}`} data-id={message.id} data-metadata={JSON.stringify(message.metadata ?? null)}>
            <span className="text">{textOf(message)}</span>
            {message.parts.map((part, index) =>
              part.type.startsWith("tool-") ? (
                <div key={index} className="tool" data-state={(part as { state: string }).state}>
                  {part.type.slice(5)}
                  {(part as { state: string }).state === "approval-requested" && (
                    <>
                      <button id="approve" onClick={() => addToolApprovalResponse({ id: (part as { approval: { id: string } }).approval.id, approved: true })}>
                        Approve
                      </button>
                      <button id="deny" onClick={() => addToolApprovalResponse({ id: (part as { approval: { id: string } }).approval.id, approved: false })}>
                        Deny
                      </button>
                    </>
                  )}
                </div>
              ) : null,
            )}
          </div>
        ))}
      </div>
      <button id="send" onClick={() => sendMessage({ text: "Plan my evening" })}>
        Send
      </button>
      <button id="stop" onClick={() => void stopTurn()}>
        Stop
      </button>
    </main>
  );
}

function Page({ id, agent }: { id: string; agent: string }) {
  const [initial, setInitial] = useState<UIMessage[] | null>(null);
  useEffect(() => {
    fetch(`${API}conversations/${id}/messages/`)
      .then((response) => (response.ok ? response.json() : { items: [] }))
      .then((page: { items: StoredMessage[] }) => setInitial(uiMessages(page.items)));
  }, [id]);
  return initial === null ? <p id="loading">loading</p> : <Chat id={id} agent={agent} initial={initial} />;
}

const params = new URLSearchParams(location.search);
const conversationId = params.get("c") ?? crypto.randomUUID();
createRoot(document.getElementById("root")!).render(<Page id={conversationId} agent={params.get("agent") ?? "demo"} />);

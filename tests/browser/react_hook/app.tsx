// A page on useConversation (@agent-persistence/client/react): the transcript with the live answer,
// the turn's status, pending interrupts with an Approve button, and a Send button.
// `index.html?c=<conversation id>`; tests/browser/test_react_hook.py drives it in headless Chromium.

import { createRoot } from "react-dom/client";
import { useConversation } from "../../../clients/typescript/src/react.js";

function text(content: unknown): string {
  return typeof content === "string" ? content : JSON.stringify(content);
}

function Conversation({ conversationId }: { conversationId: string }) {
  const { messages, liveText, status, connected, interrupts, error, start, answer } = useConversation(conversationId);
  const approve = () => answer(interrupts.map((interrupt) => ({ id: interrupt.id, response: { approved: true } }))).catch(() => undefined);
  return (
    <main>
      <p>
        <span id="status">{connected ? (status ?? "idle") : "connecting"}</span> <span id="error">{error ? error.message : ""}</span>
      </p>
      <div id="transcript">
        {messages.map((message) =>
          message.live ? (
            <div key={message.id} id="live" className="msg assistant live">
              {liveText}
            </div>
          ) : (
            <div key={message.id} className={`msg ${message.role}`}>
              {text(message.content)}
            </div>
          ),
        )}
      </div>
      <div id="interrupts">
        {interrupts.map((interrupt) => (
          <p key={interrupt.id} className="interrupt">
            {interrupt.kind}: {text(interrupt.payload)}
          </p>
        ))}
        {interrupts.length > 0 && (
          <button id="approve" onClick={approve}>
            Approve
          </button>
        )}
      </div>
      <button id="send" onClick={() => start("Plan my evening", { agent: "demo" }).catch(() => undefined)}>
        Send
      </button>
    </main>
  );
}

const conversationId = new URLSearchParams(location.search).get("c");
createRoot(document.getElementById("root")!).render(conversationId ? <Conversation conversationId={conversationId} /> : <p>No ?c=</p>);

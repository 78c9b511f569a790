// Reads the raw bodies of UI message stream responses (a JSON array of strings) on stdin and reads each
// with the real `ai` package as useChat does: DefaultChatTransport's response parsing (SSE, and every
// chunk validated against uiMessageChunkSchema), then readUIMessageStream (the chunk order rules: a
// text-delta needs its text-start, a tool output its tool call ...). Prints, per body, the message it
// builds and the errors it raised: {"message": UIMessage | null, "error": string | null}.
// `message` beside a body is the message the client holds (a continuation). Used by tests/api/test_aisdk_sdk.py.

import { DefaultChatTransport, readUIMessageStream } from "ai";

const describe = (error) => String(error?.message ?? error).slice(0, 500);

async function read(body, lastMessage) {
  const bytes = new ReadableStream({
    start(controller) {
      controller.enqueue(new TextEncoder().encode(body));
      controller.close();
    },
  });
  const chunks = new DefaultChatTransport().processResponseStream(bytes);
  let message = null;
  const errors = [];
  try {
    for await (const built of readUIMessageStream({ stream: chunks, message: lastMessage ?? undefined, terminateOnError: true, onError: (error) => errors.push(describe(error)) })) {
      message = built;
    }
  } catch (error) {
    errors.push(describe(error));
  }
  return { message, error: errors.length ? [...new Set(errors)].join("; ") : null };
}

let input = "";
for await (const part of process.stdin) input += part;
const out = [];
for (const { body, message } of JSON.parse(input)) out.push(await read(body, message));
process.stdout.write(JSON.stringify(out));

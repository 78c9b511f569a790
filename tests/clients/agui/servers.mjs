// Two real agent_persistence servers (tests/clients/serve.py) and what the tests need of them.
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

const repository = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
// Any 32 letters: Django compares the CSRF cookie with the header, both ours.
const CSRF_TOKEN = "aguiclienttestsaguiclienttests00";

function python() {
  if (process.env.AP_PYTHON) return process.env.AP_PYTHON;
  const venv = join(repository, ".venv", "bin", "python");
  return existsSync(venv) ? venv : "python3";
}

/** Starts serve.py; resolves with its JSON line ({servers: {a, b}, control, cookie, ...}) and a stop(). */
export async function startServers() {
  const launcher = spawn(python(), ["-m", "tests.clients.serve"], { cwd: repository, stdio: ["ignore", "pipe", "inherit"] });
  const info = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("tests/clients/serve.py did not start within 90 s")), 90_000);
    launcher.once("exit", (code) => reject(new Error(`tests/clients/serve.py exited with ${code}`)));
    createInterface({ input: launcher.stdout }).once("line", (line) => {
      clearTimeout(timer);
      resolve(JSON.parse(line));
    });
  });
  const stop = async () => {
    if (launcher.exitCode !== null) return;
    const exited = new Promise((resolve) => launcher.once("exit", resolve));
    launcher.kill("SIGTERM");
    await exited;
  };
  return { ...info, stop };
}

/** The headers of a logged-in request that may write (session cookie, CSRF cookie and token). */
export function authHeaders(info) {
  return { Cookie: `${info.cookie}; csrftoken=${CSRF_TOKEN}`, "X-CSRFToken": CSRF_TOKEN };
}

export function base(info, server) {
  return `http://127.0.0.1:${info.servers[server]}`;
}

async function json(response, what) {
  const text = await response.text();
  if (!response.ok) throw new Error(`${what}: ${response.status} ${text}`);
  return JSON.parse(text);
}

/** A new conversation of the test user (serve.py's control port). */
export async function newConversation(info, agent = "scripted") {
  const response = await fetch(`http://127.0.0.1:${info.control}/conversations?agent=${agent}`, { method: "POST" });
  return (await json(response, "new conversation")).id;
}

/** Starts a turn on `server` over the REST API: {message_id, run_id, ...}. */
export async function startTurn(info, server, conversationId, content = "go") {
  const response = await fetch(`${base(info, server)}/api/conversations/${conversationId}/turns/`, {
    method: "POST",
    headers: { ...authHeaders(info), "Content-Type": "application/json" },
    body: JSON.stringify({ content }),
  });
  return json(response, "start turn");
}

/** The conversation's stored messages, read on `server`. */
export async function storedMessages(info, conversationId, server = "a") {
  const response = await fetch(`${base(info, server)}/api/conversations/${conversationId}/messages/`, { headers: authHeaders(info) });
  return (await json(response, "messages")).items;
}

/**
 * A fetch for HttpAgent that remembers the `id:` of the last whole SSE event it passed on
 * (HttpAgent's parser reads only `data:` lines): what a browser's EventSource keeps as lastEventId.
 */
export function fetchKeepingEventIds() {
  const state = { lastEventId: undefined };
  state.fetch = async (url, init) => {
    const response = await fetch(url, init);
    if (!response.body) return response;
    const decoder = new TextDecoder();
    let buffer = "";
    const watch = new TransformStream({
      transform(chunk, controller) {
        buffer += decoder.decode(chunk, { stream: true });
        const blocks = buffer.split("\n\n");
        buffer = blocks.pop() ?? "";
        for (const block of blocks) {
          const line = block.split("\n").find((candidate) => candidate.startsWith("id: "));
          if (line) state.lastEventId = line.slice(4);
        }
        controller.enqueue(chunk);
      },
    });
    return new Response(response.body.pipeThrough(watch), { status: response.status, headers: response.headers });
  };
  return state;
}

/** Resolves once `server` holds no follower, hub subscription or relay count (each stream released all). */
export async function untilReleased(info, server, timeout = 30_000) {
  const deadline = Date.now() + timeout;
  let stats;
  while (Date.now() < deadline) {
    stats = await (await fetch(`${base(info, server)}/_realtime/stats`)).json();
    if (stats.follower_tasks === 0 && stats.hub_subscriptions === 0 && stats.relay_followers === 0) return stats;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error(`server ${server} still holds what a finished stream took: ${JSON.stringify(stats)}`);
}

/** serve.py's control port: POST /servers/<name>/kill, /stop, /start. */
export async function control(info, path) {
  const response = await fetch(`http://127.0.0.1:${info.control}${path}`, { method: "POST" });
  return json(response, `control ${path}`);
}

/** Resumes the conversation's dead turn on `server` (POST turns/resume/). */
export async function resumeTurn(info, server, conversationId) {
  const response = await fetch(`${base(info, server)}/api/conversations/${conversationId}/turns/resume/`, {
    method: "POST",
    headers: { ...authHeaders(info), "Content-Type": "application/json" },
    body: "{}",
  });
  return json(response, "resume turn");
}

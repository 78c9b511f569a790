// Helpers of the server scenarios: the servers of tests/clients/serve.py, clients, the stored answer.
import { readFileSync } from "node:fs";
import { request } from "node:http";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { inject } from "vitest";
import { ConversationClient, type ConversationClientOptions, type WebSocketConstructor } from "../src/index.js";

export const info = inject("servers");

const require = createRequire(import.meta.url);

// Every frame the client sends and receives is validated against the protocol's schema (the one
// the server's tests validate against): the violations are collected and each test checks none.
const Ajv2020 = require("ajv/dist/2020").default;
const schemaPath = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "agent_persistence", "realtime", "protocol.schema.json");
const schema = JSON.parse(readFileSync(schemaPath, "utf8"));
const ajv = new Ajv2020({ strict: false, allErrors: true });
ajv.addFormat("date-time", /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$/i);
ajv.addSchema(schema, "protocol");
const validClient = ajv.getSchema("protocol#/$defs/ClientFrame");
const validServer = ajv.getSchema("protocol#/$defs/ServerFrame");
export const violations: string[] = [];

/** Records a violation when `text` is not a valid frame of `direction` ("client" or "server"). */
export function checkFrame(direction: "client" | "server", text: string): void {
  check(direction === "client" ? validClient : validServer, direction, text);
}

function check(valid: any, direction: string, text: string): void {
  let frame: unknown;
  try {
    frame = JSON.parse(text);
  } catch {
    violations.push(`${direction}: not JSON: ${text.slice(0, 200)}`);
    return;
  }
  if (!valid(frame)) violations.push(`${direction}: ${ajv.errorsText(valid.errors)}: ${text.slice(0, 300)}`);
}

// Node's own ws and HTTP, also under a DOM environment (happy-dom replaces fetch; ws's browser build throws).
const NodeWebSocket = require("ws");

/** The ws package's WebSocket, validating every frame against the schema. */
export class CheckedWebSocket extends NodeWebSocket {
  constructor(url: string, protocols?: string | string[], options?: unknown) {
    super(url, protocols, options);
    this.on("message", (data: Buffer, isBinary: boolean) => {
      if (isBinary) violations.push("server: a binary frame");
      else check(validServer, "server", data.toString("utf8"));
    });
  }

  send(data: string, ...rest: unknown[]): void {
    check(validClient, "client", String(data));
    super.send(data, ...rest);
  }
}

export const WebSocket = CheckedWebSocket as unknown as WebSocketConstructor;

/** A JSON request over node:http. */
export function http(method: string, url: string, headers: Record<string, string> = {}): Promise<{ status: number; body: any }> {
  return new Promise((resolve, reject) => {
    const outgoing = request(url, { method, headers: { Accept: "application/json", ...headers } }, (response) => {
      let text = "";
      response.setEncoding("utf8");
      response.on("data", (chunk: string) => (text += chunk));
      response.on("end", () => {
        try {
          resolve({ status: response.statusCode ?? 0, body: text ? JSON.parse(text) : null });
        } catch (error) {
          reject(new Error(`${method} ${url}: ${response.statusCode} ${text.slice(0, 500)}`));
        }
      });
    });
    outgoing.on("error", reject);
    outgoing.end();
  });
}

/** tests/agents.py's ANSWER: "word00 word01 ... word59 ". */
export const ANSWER = Array.from({ length: 60 }, (_, i) => `word${String(i).padStart(2, "0")} `).join("");

export type ServerName = "a" | "b";

export function socketUrl(server: ServerName, conversationId: string): string {
  return `ws://127.0.0.1:${info.servers[server]}/ws/conversations/${conversationId}/`;
}

export async function control(path: string): Promise<Record<string, unknown>> {
  const response = await http("POST", `http://127.0.0.1:${info.control}${path}`);
  if (response.status !== 200) throw new Error(`control ${path}: ${JSON.stringify(response.body)}`);
  return response.body as Record<string, unknown>;
}

export async function newConversation(agent = "scripted"): Promise<string> {
  return (await control(`/conversations?agent=${agent}`)).id as string;
}

const clients: ConversationClient[] = [];

/** A client of `conversationId` on `server` (or on the server `server(attempt)` names), closed after the test. */
export function clientOf(
  conversationId: string,
  server: ServerName | ((attempt: number) => ServerName),
  options: Partial<ConversationClientOptions> = {},
): ConversationClient {
  const client = new ConversationClient({
    url: (attempt) => socketUrl(typeof server === "function" ? server(attempt) : server, conversationId),
    WebSocket,
    webSocketOptions: { headers: { Cookie: info.cookie } },
    reconnect: { initialDelay: 100, maxDelay: 1000 },
    ...options,
  });
  clients.push(client);
  return client;
}

export function closeClients(): void {
  for (const client of clients.splice(0)) client.close();
}

interface StoredMessage {
  id: string;
  role: string;
  content: unknown;
  [field: string]: unknown;
}

/** The conversation's messages, read over the REST API with the session cookie. */
export async function storedMessages(conversationId: string, server: ServerName = "a"): Promise<StoredMessage[]> {
  const url = `http://127.0.0.1:${info.servers[server]}/api/conversations/${conversationId}/messages/`;
  const response = await http("GET", url, { Cookie: info.cookie });
  if (response.status !== 200) throw new Error(`GET messages: ${response.status} ${JSON.stringify(response.body)}`);
  return (response.body as { items: StoredMessage[] }).items;
}

/** The stored assistant message of turn `messageId`. */
export async function storedAnswer(conversationId: string, messageId: string, server: ServerName = "a"): Promise<string> {
  const message = (await storedMessages(conversationId, server)).find((item) => item.id === messageId);
  if (!message) throw new Error(`turn ${messageId} has no stored message`);
  if (message.role !== "assistant") throw new Error(`message ${messageId} is a ${message.role} message`);
  return message.content as string;
}

/** Resolves once `client` holds at least `length` characters of the answer. */
export function untilText(client: ConversationClient, length: number, timeout = 30_000): Promise<unknown> {
  if (client.text.length >= length) return Promise.resolve();
  return client.waitFor("text", (event) => event.text.length >= length, timeout);
}

/** Every text event's `appended`, joined: what the client appended, in order (must equal the answer, nothing twice). */
export function recordAppends(client: ConversationClient): { text: string; reconnects: number } {
  const record = { text: "", reconnects: 0 };
  client.on("text", (event) => {
    if (event.appended) record.text += event.appended;
  });
  client.on("reconnecting", () => {
    record.reconnects += 1;
  });
  return record;
}

// Starts tests/clients/serve.py (two real uvicorn servers on a fresh database) for the whole run.
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import type { TestProject } from "vitest/node";

export interface ServersInfo {
  servers: Record<"a" | "b", number>;
  control: number;
  cookie: string;
  database: string;
  redis: boolean;
  logs: string;
}

declare module "vitest" {
  export interface ProvidedContext {
    servers: ServersInfo;
  }
}

const repository = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");

function python(): string {
  if (process.env.AP_PYTHON) return process.env.AP_PYTHON;
  const venv = join(repository, ".venv", "bin", "python");
  return existsSync(venv) ? venv : "python3";
}

let launcher: ChildProcess | undefined;

export async function setup(project: TestProject): Promise<void> {
  launcher = spawn(python(), ["-m", "tests.clients.serve"], { cwd: repository, stdio: ["ignore", "pipe", "inherit"] });
  const info = await new Promise<ServersInfo>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("tests/clients/serve.py did not start within 90 s")), 90_000);
    launcher!.once("exit", (code) => reject(new Error(`tests/clients/serve.py exited with ${code}`)));
    createInterface({ input: launcher!.stdout! }).once("line", (line) => {
      clearTimeout(timer);
      resolve(JSON.parse(line) as ServersInfo);
    });
  });
  project.provide("servers", info);
}

export async function teardown(): Promise<void> {
  if (!launcher || launcher.exitCode !== null) return;
  const exited = new Promise((resolve) => launcher!.once("exit", resolve));
  launcher.kill("SIGTERM");
  await exited;
}

// A real `spacewake serve` for the tests: the binary cargo built (or
// $SPACEWAKE_BIN), on a free port, in a temporary data directory.

import { spawn, spawnSync } from "node:child_process";
import type { ChildProcess } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import WebSocket from "ws";
import { connect } from "@spacewake/client";
import type { ConnectOptions, Identity, Session } from "@spacewake/client";

/** clients/typescript (this file runs from dist-test/). */
export const PACKAGE_DIR = resolve(dirname(fileURLToPath(import.meta.url)), "..");
export const REPO_DIR = resolve(PACKAGE_DIR, "../..");
export const BIN = process.env.SPACEWAKE_BIN ? resolve(process.env.SPACEWAKE_BIN) : join(REPO_DIR, "target/release/spacewake");

export const COUNTER = readFileSync(join(REPO_DIR, "fixtures/patterns/counter.tsx"), "utf8");

/** The environment for the binary, without the variables that would
 * point it at another server, space or key. */
export function cleanEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env = { ...process.env };
  for (const k of Object.keys(env)) if (k.startsWith("SPACEWAKE_")) delete env[k];
  return { ...env, ...extra };
}

export function tempDir(prefix = "spacewake-ts-"): string {
  return mkdtempSync(join(tmpdir(), prefix));
}

export class Server {
  private constructor(
    readonly process: ChildProcess,
    /** `127.0.0.1:PORT` */
    readonly addr: string,
    readonly data: string,
    readonly log: string[],
  ) {}

  get url(): string {
    return `ws://${this.addr}/ws`;
  }

  get http(): string {
    return `http://${this.addr}`;
  }

  /** `serve` on `data` (a new temporary directory by default), on `listen`
   * (a free port by default), with a short idle time before parking. */
  static async start(options: { data?: string; listen?: string; extra?: string[] } = {}): Promise<Server> {
    const data = options.data ?? tempDir();
    const args = ["serve", "--listen", options.listen ?? "127.0.0.1:0", "--data", data, "--idle-park-ms", "150", ...(options.extra ?? [])];
    // The port a killed server held may take a moment to be free again.
    for (let attempt = 0; ; attempt++) {
      const child = spawn(BIN, args, { env: cleanEnv({ SPACEWAKE_LOG: "warn" }), stdio: ["ignore", "pipe", "pipe"] });
      const log: string[] = [];
      createInterface({ input: child.stderr! }).on("line", (l) => log.push(l));
      const lines = createInterface({ input: child.stdout! });
      const first = await new Promise<string | null>((res) => {
        lines.once("line", res);
        child.once("exit", () => res(null));
        child.once("error", () => res(null));
      });
      lines.on("line", (l) => log.push(l));
      if (first?.startsWith("listening on ")) return new Server(child, first.slice("listening on ".length), data, log);
      await new Promise((r) => child.exitCode === null ? child.once("exit", r) : r(null));
      if (attempt >= 20) throw new Error(`serve did not start (${BIN} ${args.join(" ")}):\n${log.join("\n")}`);
      await sleep(250);
    }
  }

  /** Stops the process with `signal` and waits until it is gone. */
  async stop(signal: NodeJS.Signals = "SIGTERM"): Promise<void> {
    if (this.process.exitCode !== null || this.process.signalCode !== null) return;
    const gone = new Promise((r) => this.process.once("exit", r));
    this.process.kill(signal);
    await gone;
  }

  /** Stops the process with SIGSTOP and waits until every one of its
   * threads is stopped: `kill` only queues the signal, and a thread still
   * running could read what is sent right after (Linux's /proc). */
  async freeze(): Promise<void> {
    const pid = this.process.pid!;
    this.process.kill("SIGSTOP");
    const stopped = () =>
      readdirSync(`/proc/${pid}/task`).every((tid) => {
        const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, "utf8");
        const state = stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3);
        return state === "T" || state === "t";
      });
    await eventually("the server stopped", stopped, 5_000);
  }

  /** A new server on the same data directory and address (after `stop`). */
  restart(): Promise<Server> {
    return Server.start({ data: this.data, listen: this.addr });
  }

  async stats(): Promise<any> {
    return (await fetch(`${this.http}/api/health/stats`)).json();
  }

  /** Stops the server and removes its data directory. */
  async dispose(): Promise<void> {
    await this.stop("SIGKILL");
    rmSync(this.data, { recursive: true, force: true });
  }
}

/** `connect` with the `ws` package's WebSocket and this server's URL. */
export function open(server: Server, identity: Identity, space: string, options: Partial<ConnectOptions> = {}): Promise<Session> {
  return connect({ url: server.url, space, identity, WebSocket, ...options });
}

/** Runs the CLI; `{status, stdout, stderr}`. */
export function cli(args: string[], env: Record<string, string> = {}): { status: number | null; stdout: string; stderr: string } {
  const r = spawnSync(BIN, args, { env: cleanEnv(env), encoding: "utf8", timeout: 60_000 });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** Polls `f` until it holds, failing after `ms`. */
export async function eventually(what: string, f: () => boolean | Promise<boolean>, ms = 15_000): Promise<void> {
  const start = Date.now();
  while (!(await f())) {
    if (Date.now() - start > ms) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

/** Runs `sql` on a space's SQLite file (the server must not hold it):
 * through python3's sqlite3 module, which this kind of machine has. */
export function sqlite(file: string, sql: string, params: unknown[] = []): void {
  const script = "import sqlite3,sys,json; c=sqlite3.connect(sys.argv[1]); c.execute(sys.argv[2], json.loads(sys.argv[3])); c.commit(); c.close()";
  const r = spawnSync("python3", ["-c", script, file, sql, JSON.stringify(params)], { encoding: "utf8" });
  if (r.status !== 0) throw new Error(`python3 sqlite3 failed: ${r.error?.message ?? r.stderr}`);
}

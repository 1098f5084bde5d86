// One WebSocket connection and the session it opens: read the challenge,
// sign it for the space, send `open`, wait for `opened`; then pass every
// message up, and say once, with why, when it has ended.

import { signOpen } from "./auth.js";
import { ConnectionClosedError, ProtocolError, refusal, SpacewakeError, TimeoutError } from "./errors.js";
import type { Identity } from "./identity.js";
import { parseServerMessage, PROTOCOL } from "./messages.js";
import type { ClientMessage, OpenedMessage, ServerMessage } from "./messages.js";

/** The part of the WebSocket API this client uses: the browser's global
 * `WebSocket` and the `ws` package's both have it. */
export interface WebSocketLike {
  readonly readyState: number;
  send(data: string): void;
  close(code?: number, reason?: string): void;
  onopen: ((event: any) => void) | null;
  onmessage: ((event: any) => void) | null;
  onclose: ((event: any) => void) | null;
  onerror: ((event: any) => void) | null;
}

export type WebSocketConstructor = new (url: string) => WebSocketLike;

export interface ConnectionOptions {
  url: string;
  WebSocket: WebSocketConstructor;
  identity: Identity;
  space: string;
  create: boolean;
  /** How long the whole opening handshake may take. */
  timeoutMs: number;
  /** After this long with nothing received, send a `ping`; with still
   * nothing after as long again, take the connection for dead. 0: never.
   * (A network that vanishes without a close, a sleeping laptop's, would
   * otherwise leave the client waiting forever.) */
  heartbeatMs: number;
}

/** Why a connection ended. */
export interface Ended {
  error: SpacewakeError;
  /** True when `close()` ended it. */
  byClient: boolean;
}

export class Connection {
  /** What the server said when the session opened. */
  opened!: OpenedMessage;
  private onMessage: ((message: ServerMessage) => void) | null = null;
  private onEnd: ((ended: Ended) => void) | null = null;
  /** What arrived between `opened` and `listen`. */
  private early: ServerMessage[] = [];

  private ended: Ended | null = null;
  /** An id-less `error` after open: the server says why it is about to
   * close (a failed tenure, a revoked grant, shutdown). */
  private lastWord: SpacewakeError | null = null;
  private lastHeard = Date.now();
  private heartbeat: ReturnType<typeof setInterval> | null = null;
  private pingId = 0;

  private constructor(private readonly ws: WebSocketLike) {}

  /** Connects and opens the session; rejects with the server's refusal
   * (a `RefusedError`), or a `ConnectionClosedError` / `TimeoutError`. */
  static open(options: ConnectionOptions): Promise<Connection> {
    let ws: WebSocketLike;
    try {
      ws = new options.WebSocket(options.url);
    } catch (e) {
      return Promise.reject(new ConnectionClosedError(`cannot connect to ${options.url}: ${(e as Error).message}`));
    }
    const conn = new Connection(ws);
    return new Promise<Connection>((resolve, reject) => {
      let opened = false;
      let refused: SpacewakeError | null = null;
      const timer = setTimeout(() => {
        fail(new TimeoutError(`no session opened on ${options.url} within ${options.timeoutMs} ms`));
        conn.kill();
      }, options.timeoutMs);
      const fail = (e: SpacewakeError) => {
        clearTimeout(timer);
        if (!opened) {
          opened = true; // settle once
          reject(e);
        }
      };
      ws.onmessage = (event: { data: unknown }) => {
        conn.lastHeard = Date.now();
        let msg: ServerMessage;
        try {
          if (typeof event.data !== "string") throw new Error("a binary frame");
          msg = parseServerMessage(event.data);
        } catch (e) {
          const err = new ProtocolError(`the server sent something that is not a spacewake/1 message: ${(e as Error).message}`);
          if (!opened) fail(err);
          conn.end(err, false);
          conn.kill();
          return;
        }
        if (opened) return conn.deliver(msg);
        if (msg.type === "challenge") {
          if (msg.protocol !== PROTOCOL) {
            fail(new ProtocolError(`the server speaks ${msg.protocol}; this client speaks ${PROTOCOL}`));
            conn.kill();
            return;
          }
          signOpen(options.identity, msg.nonce, options.space).then(
            (signature) => {
              const open: ClientMessage = { type: "open", space: options.space, did: options.identity.did, signature };
              if (options.create) open.create = true;
              // No `resume`: it would become the default `since` of every
              // track, and the session gives each target its own.
              ws.send(JSON.stringify(open));
            },
            (e: Error) => {
              fail(new SpacewakeError(`cannot sign the challenge: ${e.message}`));
              conn.kill();
            },
          );
        } else if (msg.type === "opened") {
          clearTimeout(timer);
          opened = true;
          conn.opened = msg;
          conn.startHeartbeat(options.heartbeatMs);
          resolve(conn);
        } else if (msg.type === "error") {
          // The server closes after a refused open; the refusal says why.
          refused = refusal(msg.code, msg.message, msg.details);
          fail(refused);
        } else {
          fail(new ProtocolError(`expected challenge or opened, got ${msg.type}`));
          conn.kill();
        }
      };
      ws.onerror = () => {}; // the close event that follows says it
      ws.onclose = (event: { code?: number; reason?: string }) => {
        const code = event.code;
        const reason = event.reason ?? "";
        const closed = new ConnectionClosedError(
          `the connection to ${options.url} closed${code ? ` (code ${code}${reason ? `: ${reason}` : ""})` : ""}`,
          code,
          reason,
        );
        fail(refused ?? closed);
        conn.end(conn.lastWord ?? closed, false);
      };
    });
  }

  /** Passes every message after `opened` to `onMessage` (those that came
   * meanwhile first), and the end, once, to `onEnd`. */
  listen(onMessage: (message: ServerMessage) => void, onEnd: (ended: Ended) => void): void {
    this.onMessage = onMessage;
    this.onEnd = onEnd;
    for (const m of this.early.splice(0)) onMessage(m);
    if (this.ended) onEnd(this.ended);
  }

  private deliver(message: ServerMessage): void {
    if (this.onMessage) this.onMessage(message);
    else this.early.push(message);
  }

  get isOpen(): boolean {
    return this.ended === null;
  }

  send(message: ClientMessage): void {
    if (this.ended) return; // the end is being reported; the session resends
    this.ws.send(JSON.stringify(message));
  }

  /** Closes politely (code 1000). */
  close(): void {
    this.end(new SpacewakeError("closed by the client"), true);
    try {
      this.ws.close(1000);
    } catch {}
  }

  /** Marks an id-less error as the reason the coming close will carry. */
  noteLastWord(error: SpacewakeError): void {
    this.lastWord = error;
  }

  private startHeartbeat(ms: number): void {
    if (!ms) return;
    let pingedAfter = -1; // the `lastHeard` a ping was already sent after
    this.heartbeat = setInterval(() => {
      const silent = Date.now() - this.lastHeard;
      if (silent >= 2 * ms) {
        this.end(new ConnectionClosedError(`nothing received from the server for ${silent} ms`, 1006, "heartbeat"), false);
        this.kill();
      } else if (silent >= ms && pingedAfter !== this.lastHeard) {
        // Its `pong` (or anything else) moves `lastHeard` on.
        pingedAfter = this.lastHeard;
        this.send({ type: "ping", id: `heartbeat-${++this.pingId}` });
      }
    }, Math.max(50, Math.floor(ms / 4)));
    // A heartbeat alone must not keep a Node process alive.
    (this.heartbeat as { unref?: () => void }).unref?.();
  }

  private end(error: SpacewakeError, byClient: boolean): void {
    if (this.ended) return;
    this.ended = { error, byClient };
    if (this.heartbeat) clearInterval(this.heartbeat);
    this.ws.onmessage = null;
    this.onEnd?.(this.ended);
  }

  /** Drops the socket without waiting for a close handshake (a dead
   * network would never answer it). */
  private kill(): void {
    const ws = this.ws as WebSocketLike & { terminate?: () => void };
    try {
      if (ws.terminate) ws.terminate();
      else ws.close(4000, "the client gave up on this connection");
    } catch {}
  }
}

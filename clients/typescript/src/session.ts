// A session on one space that outlives its connections: requests matched
// to replies by id, tracked targets, and a reconnect after a drop that
// re-tracks every target from the last seq it delivered and resends what
// is safe to resend.

import { Connection } from "./connection.js";
import type { Ended, WebSocketConstructor } from "./connection.js";
import {
  ConnectionLostError,
  ProtocolError,
  RefusedError,
  refusal,
  SessionClosedError,
  SpacewakeError,
  TimeoutError,
} from "./errors.js";
import { base64urlEncode } from "./encoding.js";
import type { Identity } from "./identity.js";
import { toPath } from "./messages.js";
import type { ClientMessage, OpenedAccess, OpenedMessage, Path, Request, ServerMessage, Update } from "./messages.js";
import { Backoff, isRetryable, sleep } from "./reconnect.js";
import type { ReconnectOptions } from "./reconnect.js";
import { Tracker } from "./tracker.js";
import type { TrackOptions } from "./tracker.js";

export type SessionState = "connecting" | "open" | "reconnecting" | "closed";

export interface StateDetail {
  /** Why the connection dropped or the last attempt failed; for
   * `closed`, what ended the session (none when `close()` did). */
  error?: Error;
  /** Which attempt failed (1 for the first). */
  attempt?: number;
  /** How long the session waits before the next attempt. */
  delayMs?: number;
}

export interface ConnectOptions {
  /** The server's WebSocket endpoint: `ws://127.0.0.1:8080/ws`. */
  url: string;
  /** The space to open. */
  space: string;
  /** Who signs the session's `open`. */
  identity: Identity;
  /** Create the space, owned by `identity`, if it does not exist. Without
   * it a space that does not exist is an `UnknownSpaceError`. */
  create?: boolean;
  /** A WebSocket constructor: the global one by default (browsers, Node
   * 22+); in Node 20 pass the `ws` package's (`import WebSocket from "ws"`). */
  WebSocket?: WebSocketConstructor;
  /** How long a request waits for its reply once sent, in ms (default 30,000). */
  requestTimeoutMs?: number;
  /** Ping the server after this long without a frame from it, and drop the
   * connection after twice as long, in ms (default 25,000; 0: never). */
  heartbeatMs?: number;
  /** How to reconnect after a drop (`false`: never; the session then
   * fails with the drop). */
  reconnect?: ReconnectOptions | false;
  /** Told of every change of state, and of every failed attempt to
   * reconnect (with its error and the wait before the next). */
  onStateChange?: (state: SessionState, detail: StateDetail) => void;
}

export interface ReadResult {
  value: unknown;
  /** The newest commit the value was read from. */
  seq: number;
}

export interface SendResult {
  /** The commit that appended the event (for a duplicate, the one that
   * first appended it). */
  seq: number;
  /** True when the space already had an event with this `eventId`:
   * nothing was appended. */
  duplicate: boolean;
  /** The event's idempotency key (the one given, or the one made up). */
  eventId: string;
}

export interface DeployOptions {
  /** File name → TypeScript/TSX source (and data files the pattern attaches). */
  files: Record<string, string>;
  /** The file whose export is the pattern; may be left out when `files` has one. */
  entry?: string;
  /** The export to run (the default export when absent). */
  export?: string;
  /** The piece's argument (its `Default`s fill what is absent). */
  argument?: unknown;
}

/** An unanswered request. */
interface Pending {
  message: Request;
  /** Safe to send again after a reconnect (the server's answer would be
   * the same, or for a `send` its `eventId` makes it a duplicate). */
  resend: boolean;
  /** Its id on the current connection; null while not sent on it. */
  id: number | null;
  timer?: ReturnType<typeof setTimeout>;
  eventId?: string;
  resolve: (reply: ServerMessage) => void;
  reject: (error: Error) => void;
}

/** The trackers of one piece and path (the server tracks each once). */
interface Target {
  piece: string;
  path: Path;
  trackers: Set<Tracker>;
}

const targetKey = (piece: string, path: Path) => JSON.stringify([piece, path]);

/** Opens a session on `options.space`; resolves once it is open. */
export async function connect(options: ConnectOptions): Promise<Session> {
  const session = new Session(options);
  await session._start();
  return session;
}

/**
 * An open session on one space. Requests may be issued at any time,
 * pipelined; while the session reconnects they wait and go out once it
 * is open again.
 *
 * Across a reconnect: every tracker is tracked again from the last seq it
 * delivered, so it sees each update once and misses none; `send`, `read`,
 * `ping`, `track` and `untrack` in flight are sent again (a `send` keeps
 * its `eventId`, so the server never appends it twice); `deploy` and
 * `delete` in flight fail with `ConnectionLostError`, as whether they
 * happened is unknown.
 */
export class Session {
  private state_: SessionState = "connecting";
  private conn: Connection | null = null;
  private readonly queue: Pending[] = [];
  private readonly byId = new Map<number, Pending>();
  private readonly targets = new Map<string, Target>();
  private nextId = 1;
  private lastSeq_: number | undefined;
  private opened_: OpenedMessage | undefined;
  private failure_: Error | undefined;
  private wait: { cancel: () => void } | null = null;
  private readonly options: Required<Omit<ConnectOptions, "onStateChange" | "reconnect" | "create">> & {
    reconnect: ReconnectOptions | false;
  };
  private resolveDone!: (failure: Error | undefined) => void;
  /** Settles when the session ends: with the error that ended it, or
   * `undefined` after `close()`. Never rejects. */
  readonly done: Promise<Error | undefined> = new Promise((resolve) => (this.resolveDone = resolve));

  /** @internal Use `connect()`. */
  constructor(private readonly connectOptions: ConnectOptions) {
    const WebSocket = connectOptions.WebSocket ?? (globalThis as { WebSocket?: WebSocketConstructor }).WebSocket;
    if (!WebSocket) {
      throw new SpacewakeError("no WebSocket: this platform has no global WebSocket; pass one as `WebSocket` (in Node 20: `import WebSocket from \"ws\"`)");
    }
    this.options = {
      url: connectOptions.url,
      space: connectOptions.space,
      identity: connectOptions.identity,
      WebSocket,
      requestTimeoutMs: connectOptions.requestTimeoutMs ?? 30_000,
      heartbeatMs: connectOptions.heartbeatMs ?? 25_000,
      reconnect: connectOptions.reconnect ?? {},
    };
  }

  /** The space this session is on. */
  get space(): string {
    return this.options.space;
  }

  /** What the server said when the session (last) opened. */
  get opened(): OpenedMessage {
    if (!this.opened_) throw new SpacewakeError("the session has not opened");
    return this.opened_;
  }

  /** This identity's access to the space, as of the last open. */
  get access(): OpenedAccess {
    return this.opened.access;
  }

  get state(): SessionState {
    return this.state_;
  }

  /** The highest update seq received, on any target. */
  get lastSeq(): number | undefined {
    return this.lastSeq_;
  }

  /** What ended the session, if it failed. */
  get failure(): Error | undefined {
    return this.failure_;
  }

  /** @internal The first open: only a refusal that passes (the space held
   * elsewhere, backing off, …) is waited out. A connection that cannot be
   * made fails at once, so a wrong URL is said at once. */
  async _start(): Promise<void> {
    try {
      this.attach(await this.openWithRetry(true));
    } catch (e) {
      this.end(e as Error);
      throw e;
    }
  }

  // ---------------------------------------------------------------- requests

  /** Reads a piece's result, or the value at `path` in it (`"items.0"` or
   * `["items", 0]`), once; a path that does not exist reads as `null`. */
  async read(piece: string, path?: string | Path): Promise<ReadResult> {
    const reply = await this.request({ type: "read", piece, path: toPath(path) }, true);
    return this.valueOf(reply);
  }

  /** Reads a raw stored document (no link resolution, no computation). */
  async readDoc(doc: string, path?: string | Path): Promise<ReadResult> {
    const reply = await this.request({ type: "read", doc, path: toPath(path) }, true);
    return this.valueOf(reply);
  }

  /**
   * Tracks a piece's result, or the value at `path` in it: resolves once
   * the server has taken the demand, with a `Tracker` whose first update
   * is the current value (unless `since` says the app has it already).
   * Track the paths you need: the whole result computes display outputs too.
   */
  async track(piece: string, path?: string | Path, options: TrackOptions = {}): Promise<Tracker> {
    const wirePath = toPath(path);
    const key = targetKey(piece, wirePath);
    let target = this.targets.get(key);
    if (!target) {
      target = { piece, path: wirePath, trackers: new Set() };
      this.targets.set(key, target);
    }
    const tracker = new Tracker(piece, wirePath, options.since, options.onUpdate, (t) => this.untrack(t));
    target.trackers.add(tracker);
    try {
      const reply = await this.request({ type: "track", piece, path: wirePath, since: options.since }, true);
      this.expect(reply, "ack");
    } catch (e) {
      target.trackers.delete(tracker);
      if (target.trackers.size === 0) this.targets.delete(key);
      tracker._finish();
      throw e;
    }
    return tracker;
  }

  /**
   * Sends an event to the stream at `stream` in the piece's result
   * (`"increment"` or `["increment"]`). `eventId` is its idempotency key:
   * one the space already has is acknowledged as a `duplicate` and not
   * appended again. Without one a random key is made, so the session can
   * resend the event after a reconnect without doubling it.
   */
  async send(piece: string, stream: string | Path, payload: unknown = {}, options: { eventId?: string } = {}): Promise<SendResult> {
    const eventId = options.eventId ?? randomEventId();
    const message: Request = { type: "send", piece, stream: toPath(stream), payload, eventId };
    const reply = await this.request(message, true, eventId);
    const ack = this.expect(reply, "ack");
    if (ack.seq === undefined) throw new ProtocolError("the ack of a send carries no seq");
    return { seq: ack.seq, duplicate: ack.duplicate ?? false, eventId };
  }

  /** Compiles a pattern and runs it as a new piece; resolves with the piece
   * id. Refusals: `InvalidPatternError` (with the compiler's
   * `diagnostics`), `InvalidArgumentError`. */
  async deploy(options: DeployOptions): Promise<string> {
    const names = Object.keys(options.files);
    const entry = options.entry ?? (names.length === 1 ? names[0] : undefined);
    if (!entry) throw new SpacewakeError("deploy: name the `entry` file (files has more than one)");
    const message: Request = { type: "deploy", entry, files: options.files };
    if (options.export !== undefined) message.export = options.export;
    if (options.argument !== undefined) message.argument = options.argument;
    const reply = await this.request(message, false);
    return this.expect(reply, "deployed").piece;
  }

  /** Deletes a piece (needs OWNER access). */
  async delete(piece: string): Promise<void> {
    this.expect(await this.request({ type: "delete", piece }, false), "ack");
  }

  /** A round trip to the server. */
  async ping(): Promise<void> {
    this.expect(await this.request({ type: "ping" }, true), "pong");
  }

  /** Ends the session: the connection closes, requests still waiting fail
   * with `SessionClosedError`, trackers' iterations end. */
  close(): void {
    this.end(undefined);
  }

  // ---------------------------------------------------------------- internals

  private valueOf(reply: ServerMessage): ReadResult {
    const v = this.expect(reply, "value");
    return { value: v.value, seq: v.seq };
  }

  private expect<T extends ServerMessage["type"]>(reply: ServerMessage, type: T): Extract<ServerMessage, { type: T }> {
    if (reply.type !== type) throw new ProtocolError(`expected ${type}, got ${reply.type}`);
    return reply as Extract<ServerMessage, { type: T }>;
  }

  private async untrack(tracker: Tracker): Promise<void> {
    const key = targetKey(tracker.piece, tracker.path);
    const target = this.targets.get(key);
    if (!target?.trackers.delete(tracker) || target.trackers.size > 0) return;
    this.targets.delete(key);
    if (this.state_ === "closed") return;
    this.expect(await this.request({ type: "untrack", piece: tracker.piece, path: tracker.path }, true), "ack");
  }

  /** Sends `message` (now, or once the session is open again) and resolves
   * with its reply; a refusal rejects with its error class. */
  private request(message: Request, resend: boolean, eventId?: string): Promise<ServerMessage> {
    if (this.state_ === "closed") {
      return Promise.reject(this.failure_ ?? new SessionClosedError("the session is closed"));
    }
    return new Promise((resolve, reject) => {
      const p: Pending = { message, resend, id: null, eventId, resolve, reject };
      this.queue.push(p);
      if (this.state_ === "open") this.transmit(p);
    });
  }

  private transmit(p: Pending): void {
    const conn = this.conn;
    if (!conn) return;
    p.id = this.nextId++;
    this.byId.set(p.id, p);
    clearTimeout(p.timer);
    const ms = this.options.requestTimeoutMs;
    p.timer = setTimeout(
      () => this.settle(p, new TimeoutError(`no answer to \`${p.message.type}\` within ${ms} ms`, p.eventId)),
      ms,
    );
    conn.send({ ...p.message, id: p.id } as ClientMessage);
  }

  private settle(p: Pending, outcome: ServerMessage | Error): void {
    const at = this.queue.indexOf(p);
    if (at < 0) return; // settled already
    this.queue.splice(at, 1);
    if (p.id !== null) this.byId.delete(p.id);
    clearTimeout(p.timer);
    if (outcome instanceof Error) p.reject(outcome);
    else p.resolve(outcome);
  }

  private onMessage(msg: ServerMessage): void {
    switch (msg.type) {
      case "update": {
        const u: Update = { seq: msg.seq, piece: msg.piece, path: msg.path, value: msg.value };
        this.lastSeq_ = Math.max(this.lastSeq_ ?? 0, u.seq);
        const target = this.targets.get(targetKey(u.piece, u.path));
        for (const t of target?.trackers ?? []) t._deliver(u);
        return;
      }
      case "error":
        if (msg.id === undefined) {
          // Id-less after open: the server's reason for the close to come.
          this.conn?.noteLastWord(refusal(msg.code, msg.message, msg.details));
          return;
        }
        break;
      case "challenge":
      case "opened":
        return;
    }
    const p = typeof msg.id === "number" ? this.byId.get(msg.id) : undefined;
    if (!p) return; // a heartbeat's pong, or a reply to a request that timed out
    this.settle(p, msg.type === "error" ? refusal(msg.code, msg.message, msg.details) : msg);
  }

  /** Makes `conn` the session's connection: re-tracks every target, then
   * sends whatever waits, in the order it was asked. */
  private attach(conn: Connection): void {
    if (this.state_ === "closed") {
      conn.close(); // close() ran while this connection was being opened
      return;
    }
    this.conn = conn;
    this.opened_ = conn.opened;
    conn.listen(
      (m) => this.onMessage(m),
      (ended) => this.onEnd(conn, ended),
    );
    if (!conn.isOpen) return; // ended before it was listened to: onEnd runs
    this.setState("open", {});
    for (const target of this.targets.values()) this.retrack(target);
    for (const p of [...this.queue]) if (p.id === null) this.transmit(p);
  }

  /** Tracks `target` again from the oldest seq any of its trackers has
   * delivered (none: its current value), so each of them gets what it
   * missed and, thanks to its own seq filter, nothing twice. */
  private retrack(target: Target): void {
    let since: number | undefined = Infinity;
    for (const t of target.trackers) {
      const s = t._since();
      since = s === undefined || since === undefined ? undefined : Math.min(since, s);
    }
    if (since === Infinity) return;
    const message: Request = { type: "track", piece: target.piece, path: target.path, since };
    this.request(message, false).catch((e: Error) => {
      if (e instanceof ConnectionLostError || e instanceof SessionClosedError || this.state_ === "closed") return;
      if (e instanceof TimeoutError) return; // the next reconnect tracks it again
      // The piece is gone (deleted while away), or access changed.
      for (const t of target.trackers) t._finish(e);
      this.targets.delete(targetKey(target.piece, target.path));
    });
  }

  private onEnd(conn: Connection, ended: Ended): void {
    if (this.conn !== conn) return;
    this.conn = null;
    if (ended.byClient || this.state_ === "closed") return;
    for (const p of [...this.queue]) {
      if (p.id === null) continue;
      this.byId.delete(p.id);
      p.id = null;
      clearTimeout(p.timer);
      if (!p.resend) {
        this.settle(p, new ConnectionLostError(`the connection dropped before \`${p.message.type}\` was answered; it may or may not have been done (${ended.error.message})`));
      }
    }
    if (this.options.reconnect === false) {
      this.end(ended.error);
      return;
    }
    this.setState("reconnecting", { error: ended.error });
    this.openWithRetry(false).then(
      (c) => this.attach(c),
      (e: Error) => this.end(e),
    );
  }

  /** Connects and opens, trying again while the failure may pass (after a
   * drop: any network failure too), with bounded back-off. */
  private async openWithRetry(first: boolean): Promise<Connection> {
    const policy = this.options.reconnect;
    const backoff = new Backoff(policy || {});
    const started = Date.now();
    for (let attempt = 1; ; attempt++) {
      try {
        return await Connection.open({
          url: this.options.url,
          WebSocket: this.options.WebSocket,
          identity: this.options.identity,
          space: this.options.space,
          // Only the first open creates: a space deleted while the session
          // was away is not silently made again.
          create: first && (this.connectOptions.create ?? false),
          timeoutMs: this.options.requestTimeoutMs,
          heartbeatMs: this.options.heartbeatMs,
        });
      } catch (e) {
        const retryable = first ? e instanceof RefusedError && e.retryable : isRetryable(e);
        if (!retryable || policy === false) throw e;
        const delayMs = backoff.next(e);
        if (Date.now() - started + delayMs > backoff.giveUpAfterMs) throw e;
        if (this.state_ === "closed") throw new SessionClosedError("the session is closed");
        this.notify(first ? "connecting" : "reconnecting", { error: e as Error, attempt, delayMs });
        const w = sleep(delayMs);
        this.wait = w;
        await w.done;
        this.wait = null;
        // close() may have run during the wait.
        if ((this.state_ as SessionState) === "closed") throw new SessionClosedError("the session is closed");
      }
    }
  }

  /** Ends the session: `error` is what failed it, none for `close()`. */
  private end(error: Error | undefined): void {
    if (this.state_ === "closed") return;
    this.failure_ = error;
    this.state_ = "closed";
    this.wait?.cancel();
    const conn = this.conn;
    this.conn = null;
    conn?.close();
    for (const p of [...this.queue]) this.settle(p, error ?? new SessionClosedError("the session was closed"));
    for (const target of this.targets.values()) for (const t of target.trackers) t._finish(error);
    this.targets.clear();
    this.notify("closed", error ? { error } : {});
    this.resolveDone(error);
  }

  private setState(state: SessionState, detail: StateDetail): void {
    this.state_ = state;
    this.notify(state, detail);
  }

  private notify(state: SessionState, detail: StateDetail): void {
    try {
      this.connectOptions.onStateChange?.(state, detail);
    } catch (e) {
      reportLater(e);
    }
  }
}

/** Reports an app callback's exception as an uncaught error, after the
 * session has finished its own bookkeeping: thrown in place, it would
 * leave the session half-updated (and in Node, escape from the socket). */
function reportLater(error: unknown): void {
  setTimeout(() => {
    throw error;
  }, 0);
}

/** 128 random bits, unpadded base64url: an event id no other client picks. */
function randomEventId(): string {
  return base64urlEncode(globalThis.crypto.getRandomValues(new Uint8Array(16)));
}

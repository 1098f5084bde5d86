// When to try a connection again, and how long to wait first.

import { ConnectionClosedError, RefusedError, TimeoutError } from "./errors.js";

export interface ReconnectOptions {
  /** The first wait after a drop, in ms (default 100). */
  initialDelayMs?: number;
  /** The longest wait between two attempts, in ms (default 5,000): waits
   * double from `initialDelayMs` up to this. */
  maxDelayMs?: number;
  /** Give up (the session fails with the last error) when no attempt has
   * succeeded this long after the drop, in ms (default 300,000; `Infinity`
   * to keep trying). */
  giveUpAfterMs?: number;
}

/** The longest wait a server's own `retryInMs` hint is followed for in one
 * step: a lease expires within its TTL (15 s by default). */
const MAX_HINT_MS = 30_000;

export class Backoff {
  readonly initialDelayMs: number;
  readonly maxDelayMs: number;
  readonly giveUpAfterMs: number;
  private attempt = 0;

  constructor(options: ReconnectOptions = {}) {
    this.initialDelayMs = options.initialDelayMs ?? 100;
    this.maxDelayMs = options.maxDelayMs ?? 5_000;
    this.giveUpAfterMs = options.giveUpAfterMs ?? 300_000;
  }

  reset(): void {
    this.attempt = 0;
  }

  /**
   * The wait before the next attempt after `error`: the server's
   * `retryInMs` when it gave one (it knows when a lease can expire or a
   * back-off ends), else an exponential step with jitter, so clients
   * dropped together by one restart do not all return in the same
   * millisecond.
   */
  next(error?: unknown): number {
    const hint = error instanceof RefusedError ? error.retryInMs : undefined;
    if (hint !== undefined) return Math.min(Math.max(hint, 50), MAX_HINT_MS);
    const step = Math.min(this.maxDelayMs, this.initialDelayMs * 2 ** this.attempt);
    this.attempt++;
    return Math.round(step / 2 + (Math.random() * step) / 2);
  }
}

/** Whether reconnecting may help after `error`: the network or the server
 * went away, or the server refused for a reason that passes (the space
 * is held elsewhere, backing off, the host full or restarting). Not a
 * refusal that only a change fixes: an unknown space, no access, a bad
 * signature, a quota. */
export function isRetryable(error: unknown): boolean {
  if (error instanceof RefusedError) return error.retryable;
  return error instanceof ConnectionClosedError || error instanceof TimeoutError;
}

/** A wait that `cancel()` ends early (a session closed while it waits). */
export function sleep(ms: number): { done: Promise<void>; cancel: () => void } {
  let cancel = () => {};
  const done = new Promise<void>((resolve) => {
    const t = setTimeout(resolve, ms);
    cancel = () => {
      clearTimeout(t);
      resolve();
    };
  });
  return { done, cancel };
}

// One tracked value (a piece's result, or a path in it): its updates as an
// async iterator or a callback, each delivered once.

import type { Path, Update } from "./messages.js";

export interface TrackOptions {
  /** Deliver only values changed after this seq (one the app saw before,
   * say in an earlier page load); without it the current value comes at once. */
  since?: number;
  /** Called with each update. A tracker with a callback keeps no queue
   * and cannot also be iterated. */
  onUpdate?: (update: Update) => void;
}

/**
 * Updates of one tracked target. Each update carries the whole value as of
 * commit `seq`; seqs only grow, and an update already delivered is never
 * delivered again, across reconnects too. Several quick commits may be
 * seen as one update with the latest value (the protocol sends snapshots,
 * not every change).
 *
 * Iterate it (`for await (const u of tracker)`) or give `onUpdate`.
 * Leaving a `for await` loop stops the tracking, as `stop()` does; the
 * iteration ends when the session is closed, and throws the error that
 * ended the session if it failed.
 */
export class Tracker implements AsyncIterable<Update> {
  private lastSeq: number | undefined;
  private lastValue: unknown = undefined;
  private readonly queue: Update[] = [];
  private waiter: { resolve: (r: IteratorResult<Update>) => void; reject: (e: Error) => void } | null = null;
  private finished: { error?: Error } | null = null;

  /** @internal */
  constructor(
    readonly piece: string,
    readonly path: Path,
    since: number | undefined,
    private readonly onUpdate: ((update: Update) => void) | undefined,
    private readonly stopper: (tracker: Tracker) => Promise<void>,
  ) {
    this.lastSeq = since;
  }

  /** The seq of the last update delivered (or the `since` given). */
  get seq(): number | undefined {
    return this.lastSeq;
  }

  /** The last value delivered (`undefined` before the first). */
  get value(): unknown {
    return this.lastValue;
  }

  get stopped(): boolean {
    return this.finished !== null;
  }

  /** Stops tracking (the server drops the demand when no other tracker of
   * the session wants the same target) and ends the iteration. */
  async stop(): Promise<void> {
    if (this.finished) return;
    this._finish();
    await this.stopper(this);
  }

  /** @internal Delivers `update` unless it is not newer than the last one. */
  _deliver(update: Update): void {
    if (this.finished) return;
    if (this.lastSeq !== undefined && update.seq <= this.lastSeq) return;
    this.lastSeq = update.seq;
    this.lastValue = update.value;
    if (this.onUpdate) {
      try {
        this.onUpdate(update);
      } catch (e) {
        // Not thrown here: the other trackers of this update still get it.
        setTimeout(() => {
          throw e;
        }, 0);
      }
    } else if (this.waiter) {
      this.waiter.resolve({ value: update, done: false });
      this.waiter = null;
    } else {
      this.queue.push(update);
    }
  }

  /** @internal Ends the iteration: normally, or with `error`. */
  _finish(error?: Error): void {
    if (this.finished) return;
    this.finished = error ? { error } : {};
    if (this.waiter) {
      if (error) this.waiter.reject(error);
      else this.waiter.resolve({ value: undefined, done: true });
      this.waiter = null;
    }
  }

  /** @internal The `since` to re-track with after a reconnect. */
  _since(): number | undefined {
    return this.lastSeq;
  }

  [Symbol.asyncIterator](): AsyncIterator<Update> {
    if (this.onUpdate) throw new Error("this tracker delivers to its onUpdate callback; it cannot also be iterated");
    return {
      next: () => {
        const next = this.queue.shift();
        if (next) return Promise.resolve({ value: next, done: false });
        if (this.finished?.error) return Promise.reject(this.finished.error);
        if (this.finished) return Promise.resolve({ value: undefined, done: true });
        return new Promise((resolve, reject) => (this.waiter = { resolve, reject }));
      },
      return: async () => {
        await this.stop();
        return { value: undefined, done: true };
      },
    };
  }
}

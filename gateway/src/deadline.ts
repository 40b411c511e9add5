/**
 * One time-to-answer per request. Every attempt, backoff and tier switch is cut to what is left,
 * so no request answers later than its time-to-answer. Measured on the monotonic clock: the wall
 * clock set back (an NTP step, a virtual machine resumed) would give requests in flight the time
 * it went back, and set forward would end them at once.
 */
import type { CancelSignal } from './cancel';

export type Clock = () => number;

const STORE_WAIT_FLOOR_MS = 20;

export class Deadline {
  readonly at: number;
  constructor(
    readonly budgetMs: number,
    private readonly now: Clock = () => performance.now(),
  ) {
    this.at = now() + budgetMs;
  }
  remaining(): number {
    return Math.max(0, this.at - this.now());
  }
  /**
   * How long a write to a shared store (Redis) may hold the answer: the time left, but never under
   * STORE_WAIT_FLOOR_MS, which a Redis that is well answers well within, so only a slow one is passed by.
   */
  storeWaitMs(): number {
    return Math.max(this.remaining(), STORE_WAIT_FLOOR_MS);
  }
  expired(): boolean {
    return this.remaining() <= 0;
  }
}

/** Waits `ms`, or less if `signal` aborts first. */
export function sleep(ms: number, signal?: CancelSignal): Promise<void> {
  return new Promise((resolve) => {
    if (ms <= 0 || signal?.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal?.removeListener('abort', done);
      resolve();
    }
    signal?.once('abort', done);
  });
}

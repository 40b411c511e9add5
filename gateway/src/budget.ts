/**
 * The budget guardrail: the pause flag `pause_ai_tasks` (`1` = paused, missing = not
 * paused) in the store, set by the budget webhook at `percentUsed >= BUDGET_PAUSE_AT_PERCENT` for
 * the capped provider or by an operator, cleared by /budget/resume. Requests read a local copy
 * refreshed every 100 ms (one read at a time: while Redis does not answer, the value last read stays
 * in force and no reads pile up behind it); the worker reads the store itself when it picks up a job (at most 2 s,
 * then the local copy: worker.ts).
 */
import type { Redis } from 'ioredis';
import { z } from 'zod';

const PAUSE_KEY = 'pause_ai_tasks';
export const PAUSED_MESSAGE = 'paused by budget guardrail';

export interface PauseFlag {
  /** The local copy (at most 100 ms old). */
  paused(): boolean;
  /** Reads the store now. */
  refresh(): Promise<boolean>;
  /** Sets the flag; true when it was not set before (so the pause notice goes out once). */
  set(): Promise<boolean>;
  clear(): Promise<void>;
  close(): void;
}

export class MemoryPause implements PauseFlag {
  private value = false;
  paused() {
    return this.value;
  }
  async refresh() {
    return this.value;
  }
  async set() {
    const was = this.value;
    this.value = true;
    return !was;
  }
  async clear() {
    this.value = false;
  }
  close() {}
}

export class RedisPause implements PauseFlag {
  private value = false;
  /** The read sent and not yet answered: later ones join it rather than queue behind it. */
  private reading: Promise<boolean> | null = null;
  /** This instance's sets and clears so far: a read answers for Redis as it was when the read was sent. */
  private writes = 0;
  private readonly timer: NodeJS.Timeout;
  constructor(
    private readonly redis: Redis,
    refreshMs = 100,
    /** Tests use a key of their own; everything else the contract's `pause_ai_tasks`. */
    private readonly key = PAUSE_KEY,
  ) {
    this.timer = setInterval(() => void this.refresh().catch(() => undefined), refreshMs);
    this.timer.unref();
    void this.refresh().catch(() => undefined);
  }
  paused() {
    return this.value;
  }
  refresh() {
    // Commands wait for a reconnection or a stalled Redis: one read per tick would pile up (600 a
    // minute) and all be sent when it answers.
    const writes = this.writes;
    this.reading ??= this.redis
      .get(this.key)
      // A read sent before this instance's own set or clear says what Redis held before it: on a slow
      // Redis it answered "not paused" after the webhook, and the capped provider was called again.
      .then((v) => (writes === this.writes ? (this.value = v === '1') : this.value))
      .finally(() => (this.reading = null));
    return this.reading;
  }
  async set() {
    // In force here at once, before Redis has it (Redis away: this instance pauses all the same).
    this.value = true;
    this.writes++;
    // Read and set in one transaction: a value other than 1 (an operator's hand-written 0) was "not
    // paused", so this pause is new and its notice goes out.
    const [[, before]] = (await this.redis
      .multi()
      .get(this.key)
      .set(this.key, '1')
      .exec()
      .catch((error: Error) => this.undo(error))) as [[null, string | null], unknown];
    this.value = true; // a read sent before the set may have answered meanwhile
    return before !== '1';
  }
  async clear() {
    this.value = false;
    this.writes++;
    await this.redis.del(this.key).catch((error: Error) => this.undo(error));
    this.value = false;
  }
  /** Redis refused the write (full, read-only): what it holds stays in force here too, as on every other instance. */
  private async undo(error: Error): Promise<never> {
    await this.refresh().catch(() => undefined);
    throw error;
  }
  close() {
    clearInterval(this.timer);
  }
}

export const BudgetWebhook = z.strictObject({
  provider: z.string().min(1),
  percentUsed: z.number().finite().min(0),
});

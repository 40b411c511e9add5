/**
 * Spend per UTC day: what spend-cap routing adds to the meter's figure, or compares with the caps
 * when there is no meter. With Redis every instance (and every worker) adds to one counter per day,
 * so N instances route as one would and a restart keeps the day's spend; in process, only this
 * process's own calls count, and a restart forgets them.
 *
 * Redis: `<prefix>:spend:<YYYY-MM-DD>`, integer micro-dollars (INCRBY: no float drift; what is
 * below a micro-dollar is carried to the next add), kept 8 days (the 7-day figure needs today and
 * the 6 before); beside it `<prefix>:spend:s:<unix second>`, the same per second for 2 minutes (the
 * spend of the last seconds, which the meter may not have yet). Adds never wait: they are batched,
 * one batch in flight at a time, sent after the answer, and a batch that fails is kept and sent
 * again a second later, as the same batch: each instance numbers its batches, and a script adds a
 * batch only if its number is above the last one this instance added
 * (`<prefix>:spend:batch:<instance>`, kept as long as the day's counter), so a batch sent twice (ioredis sends
 * unanswered commands again after a reconnect; a reply lost after Redis applied it) counts once. Each batch's reply carries the last 8 days (one round trip: INCRBY and
 * EXPIRE of both keys, MGET), and a figure older than 250 ms is read again in the background, so
 * an instance routes on the fleet's spend as of its own last call or 250 ms ago, whichever is
 * newer, plus its own calls not yet counted there. A counter read below the last read was lost by
 * Redis, and that read is put back (PUT_BACK).
 */
import { randomUUID } from 'node:crypto';
import type { Redis } from 'ioredis';
import { within } from './within';

/** Waits for `work` at most `ms`; it goes on in the background, and its failure is handled there. */
const atMost = (work: Promise<void>, ms: number): Promise<void> => within(work, ms).catch(() => undefined);

const DAY_MS = 86_400_000;
export const dayOf = (ms: number): number => Math.floor(ms / DAY_MS);

const MICRO = 1_000_000;
/** Today and the 7 days before it: the 7-day figure, and a meter figure read late yesterday. */
const DAYS_KEPT = 8;
const KEY_TTL_S = (DAYS_KEPT + 1) * 86_400;
/** Per-second counters: how far back `recentSpend` can look. */
const SECOND_TTL_S = 120;
/**
 * Another instance's clock may be this far ahead: its seconds in this one's future are its latest
 * calls, which `recentSpend` counts too (the meter has them last).
 */
const CLOCK_AHEAD_S = 5;
/** A shared figure older than this is read again (in the background; the request does not wait). */
const FRESH_MS = 250;
/** A batch that failed is sent again this much later. */
const RETRY_MS = 1000;
/**
 * Adds wait this long after the last batch began: under load the calls of 20 ms share one round
 * trip instead of one each (the other instances' spend is then up to 20 ms later; this instance's
 * own is always counted; a read near a cap does not wait for it).
 */
const BATCH_GAP_MS = 20;
/** How long the first read, and the last send at shutdown, may take before going on without them. */
const WAIT_MS = 2000;

export interface SpendDays {
  /** True when other processes add to the same figures (a fresh read can tell something new). */
  readonly shared: boolean;
  /** Adds a call's cost (USD) to today's spend; never waits. */
  add(costUsd: number | null): void;
  /** USD spent from UTC day `from` to day `to` (day numbers, both included), as known now. */
  spentBetween(from: number, to: number): number;
  /** Resolves when the figures have been read once (at once in process; at most 2 s with Redis). */
  ready(): Promise<void>;
  /** Reads the shared figures now, waiting at most `maxWaitMs` (2 s): a meter figure's baseline is taken after it. */
  refresh(maxWaitMs?: number): Promise<void>;
  /** USD spent in the last `seconds` whole seconds (at most 120), this one included (in Redis, and the seconds of clocks a little ahead). */
  recentSpend(seconds: number): Promise<number>;
  /** Sends what is not yet counted (at most 2 s). */
  close(): Promise<void>;
}

/** In process: this process's own calls, per UTC day. */
export class MemorySpendDays implements SpendDays {
  readonly shared = false;
  private readonly byDay = new Map<number, number>();
  private readonly bySecond = new Map<number, number>();
  constructor(private readonly now: () => number = Date.now) {}
  add(costUsd: number | null): void {
    if (!costUsd || !(costUsd > 0) || !Number.isFinite(costUsd)) return;
    const [day, second] = [dayOf(this.now()), secondOf(this.now())];
    // Old days and seconds are dropped when a new one starts (not on every call).
    if (!this.byDay.has(day)) for (const d of this.byDay.keys()) if (d <= day - DAYS_KEPT) this.byDay.delete(d);
    if (!this.bySecond.has(second)) for (const x of this.bySecond.keys()) if (x <= second - SECOND_TTL_S) this.bySecond.delete(x);
    this.byDay.set(day, (this.byDay.get(day) ?? 0) + costUsd);
    this.bySecond.set(second, (this.bySecond.get(second) ?? 0) + costUsd);
  }
  async recentSpend(seconds: number): Promise<number> {
    const from = secondOf(this.now()) - seconds + 1;
    let sum = 0;
    for (const [s, usd] of this.bySecond) if (s >= from) sum += usd;
    return sum;
  }
  spentBetween(from: number, to: number): number {
    let sum = 0;
    for (const [d, usd] of this.byDay) if (d >= from && d <= to) sum += usd;
    return sum;
  }
  async ready(): Promise<void> {}
  async refresh(): Promise<void> {}
  async close(): Promise<void> {}
}

type Micros = Map<number, number>;

const addTo = (into: Micros, day: number, micros: number) => into.set(day, (into.get(day) ?? 0) + micros);

/** One batch of adds: its number (per instance, rising) and what it adds per day, at its second. */
interface Batch {
  n: number;
  days: Micros;
  second: number;
}

/**
 * How long an instance's last batch number is kept: as long as the counters it guards (one key per
 * instance; a Redis restored from disk after a long outage still knows what it added).
 */
const BATCH_MARK_TTL_S = KEY_TTL_S;

/**
 * KEYS[1]: the instance's last batch number; KEYS[2..]: counters. ARGV[1]: this batch's number,
 * ARGV[2]: the mark's TTL; then each counter's amount and TTL. A batch at or below the last number
 * was added already: nothing is added again.
 */
const ADD_BATCH = `
if tonumber(ARGV[1]) <= tonumber(redis.call('GET', KEYS[1]) or '0') then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
for i = 2, #KEYS do
  redis.call('INCRBY', KEYS[i], ARGV[2 * i - 1])
  redis.call('EXPIRE', KEYS[i], ARGV[2 * i])
end
return 1`;
/**
 * A day's counter read below what an instance last read of it was lost (Redis restarted without
 * its data, or from an older snapshot, or flushed): it is raised to that read, with what the
 * instance's own batch in the same round trip added. Raised, not added to: a snapshot's figure is
 * part of that read already. ARGV: the micro-dollars it is raised to, the TTL. Returns the counter.
 */
const PUT_BACK = `
local v = tonumber(redis.call('GET', KEYS[1]) or '0')
local floor = tonumber(ARGV[1])
if floor <= v then return v end
redis.call('SET', KEYS[1], floor, 'EX', ARGV[2])
return floor`;
const secondOf = (ms: number): number => Math.floor(ms / 1000);
const sum = (m: Micros): number => [...m.values()].reduce((a, b) => a + b, 0);

/** In Redis: the fleet's calls, per UTC day (see the top of this file). */
export class RedisSpendDays implements SpendDays {
  readonly shared = true;
  /** Micro-dollars per day as Redis last answered. */
  private known: Micros = new Map();
  /** When Redis last answered (monotonic ms). */
  private knownAt = -Infinity;
  /** After a failed batch, none before this (monotonic ms); the failure is logged once until one succeeds. */
  private holdUntil = 0;
  private failing = false;
  /** When the last batch began (monotonic ms). */
  private batchAt = -Infinity;
  /** Micro-dollars not yet in a batch, and the batches not yet answered (under way, or failed and kept). */
  private queued: Micros = new Map();
  private unanswered: Batch[] = [];
  private batches = 0;
  /** This instance's batch numbers are its own (a restart starts a new instance). */
  private readonly instance = randomUUID();
  private carry = 0;
  private syncing: Promise<void> | null = null;
  /** The next batch, waiting for the retry after a failure. */
  private next: NodeJS.Timeout | null = null;
  private readonly firstRead: Promise<void>;
  /** After close nothing more is sent (the connection is about to go). */
  private closed = false;

  constructor(
    private readonly redis: Redis,
    private readonly prefix: string,
    private readonly opts: { warn: (m: string) => void; now?: () => number },
  ) {
    this.firstRead = this.sync();
  }

  add(costUsd: number | null): void {
    if (!costUsd || !(costUsd > 0) || !Number.isFinite(costUsd)) return;
    const exact = costUsd * MICRO + this.carry;
    const whole = Math.floor(exact);
    this.carry = exact - whole;
    if (!whole) return;
    addTo(this.queued, dayOf(this.now()), whole);
    this.kick();
  }

  spentBetween(from: number, to: number): number {
    if (performance.now() - this.knownAt > FRESH_MS) this.kick();
    let micros = 0;
    for (const figures of [this.known, this.queued, ...this.unanswered.map((b) => b.days)]) {
      for (const [d, m] of figures) if (d >= from && d <= to) micros += m;
    }
    return micros / MICRO;
  }

  ready(): Promise<void> {
    return atMost(this.firstRead, WAIT_MS);
  }

  refresh(maxWaitMs = WAIT_MS): Promise<void> {
    // A read that starts now: a batch under way may have been sent before another instance's call.
    const fresh = (this.syncing ?? Promise.resolve()).then(() => this.sync());
    return atMost(fresh, maxWaitMs);
  }

  async close(): Promise<void> {
    if (this.next) clearTimeout(this.next);
    this.next = null;
    const drained = (async () => {
      for (let round = 0; round < 3 && (this.syncing || this.queued.size || this.unanswered.length); round++) await this.sync();
    })();
    this.closed = true;
    if (!(await atMost(drained, WAIT_MS).then(() => !this.queued.size && !this.unanswered.length))) {
      this.opts.warn(`spend not yet counted in Redis at shutdown: $${this.pendingUsd().toFixed(6)} (Redis did not answer in time)`);
    }
  }

  private now(): number {
    return this.opts.now?.() ?? Date.now();
  }

  private pendingUsd(): number {
    return (sum(this.queued) + this.unanswered.reduce((all, b) => all + sum(b.days), 0)) / MICRO;
  }

  private key(day: number): string {
    return `${this.prefix}:spend:${new Date(day * DAY_MS).toISOString().slice(0, 10)}`;
  }

  private secondKey(second: number): string {
    return `${this.prefix}:spend:s:${second}`;
  }

  async recentSpend(seconds: number): Promise<number> {
    const now = secondOf(this.now()) + CLOCK_AHEAD_S;
    const keys = Array.from({ length: Math.min(seconds, SECOND_TTL_S) + CLOCK_AHEAD_S }, (_, i) => this.secondKey(now - i));
    const counted = await this.redis.mget(...keys);
    return (counted.reduce((sum, v) => sum + Number(v ?? 0), 0) + this.pendingUsd() * MICRO) / MICRO;
  }

  /** One batch at a time; the next starts when this one ends if calls came meanwhile. */
  private sync(): Promise<void> {
    this.syncing ??= this.send().finally(() => {
      this.syncing = null;
      if (this.queued.size || this.unanswered.length) this.kick();
    });
    return this.syncing;
  }

  /** A batch now, or once the gap after the last one (or the wait after a failed one) is over. */
  private kick(wait = Math.max(this.holdUntil, this.batchAt + BATCH_GAP_MS) - performance.now()): void {
    if (this.syncing || this.next || this.closed) return;
    if (wait <= 0) return void this.sync();
    this.next = setTimeout(() => {
      this.next = null;
      void this.sync();
    }, wait);
    this.next.unref();
  }

  /** Sends the queued micro-dollars as a batch (or the failed one again), and reads the last 8 days back, in one round trip. */
  private async send(): Promise<void> {
    this.batchAt = performance.now();
    // A failed batch is sent again alone (its number must add exactly what it added the first time);
    // what came since waits for the next batch.
    if (this.queued.size && !this.unanswered.length) {
      this.unanswered.push({ n: ++this.batches, days: this.queued, second: secondOf(this.now()) });
      this.queued = new Map();
    }
    const sent = this.unanswered;
    const today = dayOf(this.now());
    const days = Array.from({ length: DAYS_KEPT }, (_, i) => today - i);
    const pipeline = this.redis.pipeline();
    for (const b of sent) this.addBatch(pipeline, b);
    pipeline.mget(...days.map((d) => this.key(d)));
    try {
      const replies = (await pipeline.exec()) ?? [];
      const failed = replies.find(([error]) => error);
      if (failed || !replies.length) throw failed?.[0] ?? new Error('no reply');
      const values = replies.at(-1)![1] as Array<string | null>;
      this.known = await this.putBackLost(new Map(days.map((d, i) => [d, Number(values[i] ?? 0)])), sent);
      this.knownAt = performance.now();
      this.unanswered = this.unanswered.filter((b) => !sent.includes(b));
      this.holdUntil = 0;
      this.failing = false;
    } catch (error) {
      // Kept, not lost: sent again as they are with the next batch (added once, whatever Redis got).
      if (!this.failing) this.opts.warn(`spend not counted in Redis yet (${(error as Error).message}); kept and sent again`);
      this.failing = true;
      this.holdUntil = performance.now() + RETRY_MS;
    }
  }

  /**
   * The figures read, with the days whose counter fell below the last read put back (PUT_BACK):
   * counters only grow, and a Redis that lost them would otherwise lift the caps for the rest of the
   * day. Should Redis not take it, the last read stays, so the next read finds the loss again.
   */
  private async putBackLost(read: Micros, sent: Batch[]): Promise<Micros> {
    const lost = [...read].filter(([day, micros]) => micros < (this.known.get(day) ?? 0)).map(([day]) => day);
    if (!lost.length) return read;
    // What this instance's batches added since that read: counted in the read's round trip.
    const floor = (day: number) => this.known.get(day)! + sent.reduce((all, b) => all + (b.days.get(day) ?? 0), 0);
    const pipeline = this.redis.pipeline();
    for (const day of lost) pipeline.eval(PUT_BACK, 1, this.key(day), floor(day), KEY_TTL_S);
    const replies = (await pipeline.exec().catch(() => null)) ?? [];
    for (const [i, day] of lost.entries()) {
      const [error, micros] = replies[i] ?? [new Error('no reply')];
      read.set(day, error ? this.known.get(day)! : Number(micros));
    }
    const days = lost.map((d) => new Date(d * DAY_MS).toISOString().slice(0, 10)).join(', ');
    this.opts.warn(`spend counted in Redis for ${days} was lost (Redis restarted without its data, or flushed): put back as last read`);
    return read;
  }

  private addBatch(pipeline: ReturnType<Redis['pipeline']>, b: Batch): void {
    const counters: Array<[string, number, number]> = [...b.days].map(([day, micros]) => [this.key(day), micros, KEY_TTL_S]);
    counters.push([this.secondKey(b.second), sum(b.days), SECOND_TTL_S]);
    const keys = [`${this.prefix}:spend:batch:${this.instance}`, ...counters.map((c) => c[0])];
    const args = [b.n, BATCH_MARK_TTL_S, ...counters.flatMap((c) => [c[1], c[2]])];
    pipeline.eval(ADD_BATCH, keys.length, ...keys, ...args);
  }
}

export function spendDaysFor(redis: Redis | null, prefix: string, warn: (m: string) => void): SpendDays {
  return redis ? new RedisSpendDays(redis, prefix, { warn }) : new MemorySpendDays();
}

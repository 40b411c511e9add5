/**
 * The provider calls of a Cold job's run that are under way, kept in Redis, so that a call whose
 * worker was killed (kill -9, an OOM kill, a node lost) before its meter event was written is still
 * metered: the provider bills it, and without a mark nothing would ever say it was made.
 *
 * Just before each call, a run marks it in a hash `<queue>:calls:<jobId>` (one field per call: its
 * route, provider, model, region, the request's estimated input tokens and when it began); once the
 * call's meter event is durable the field is removed. A run frees its claim (cold-run-claim.ts)
 * only after its marks are gone, so a mark found by a run that has just taken the job's claim is a
 * call whose run died with it: that run takes every such mark off in one step (two runs never get
 * the same one) and meters each once, as an estimate (worker.ts: `WORKER_LOST|ESTIMATED`).
 * Marking waits at most MARK_WAIT_MS for Redis; a mark not written by then goes with the call
 * unconfirmed (it lands later, before its removal: the same connection keeps their order).
 */
import type { Redis } from 'ioredis';
import { randomUUID } from 'node:crypto';
import { within } from './within';

/** How long a call waits for its mark to be written before it goes ahead regardless. */
const MARK_WAIT_MS = 2000;
/** How long a run's marks may take to go (their events' writes) before it frees its claim regardless. */
const SETTLE_WAIT_MS = 10_000;
/** How long a mark no run took is kept: as long as a job's answer (cold-run-claim.ts). */
const MARK_KEPT_MS = 7 * 24 * 3600_000;

/**
 * KEYS: the run's marks, this take's own list (a token new to each take); ARGV: how long that list
 * is kept. Moves the marks to the take's list in one step and answers the list: a take sent again
 * (sent-again.ts) finds the marks already moved, and still gets them, where it would get none and
 * their calls would go unmetered.
 */
const TAKE = `
local marks = redis.call('HVALS', KEYS[1])
if #marks > 0 then
  redis.call('DEL', KEYS[1])
  redis.call('RPUSH', KEYS[2], unpack(marks))
  redis.call('PEXPIRE', KEYS[2], ARGV[1])
end
return redis.call('LRANGE', KEYS[2], 0, -1)`;
/** How long a take's list is kept: long enough for the take sent again after a reconnection. */
const TAKEN_KEPT_MS = 600_000;

/** A call under way, as its mark keeps it. */
export interface MarkedCall {
  /** The route's id (`hot-1`, or the map's `id`). */
  route: string;
  provider: string;
  model: string;
  region?: string;
  /** The request's input tokens, estimated (cut-estimate.ts): what the provider bills at least. */
  inputTokens: number;
  /** The service tier the request asked for, which the estimate is priced at. */
  serviceTier?: string;
  /** When the call began (epoch ms). */
  at: number;
}

/** What the routing loop does with a run's marks: one before each call, its removal once the call is metered. */
export interface CallMarker {
  /** Marks a call about to be made; resolves with its mark once written (or once MARK_WAIT_MS have passed). */
  begin(call: MarkedCall): Promise<string>;
  /** The call's meter event is on its way: its mark goes once `durable` has settled. */
  end(mark: string, durable: Promise<void>): void;
}

/** The marks of one run of one job. */
export class RunMarks implements CallMarker {
  private readonly pending = new Set<Promise<void>>();
  constructor(
    private readonly redis: Redis,
    private readonly key: string,
    /** Where a take of these marks keeps what it took (with the take's token appended). */
    private readonly taken: string,
  ) {}

  async begin(call: MarkedCall): Promise<string> {
    const mark = randomUUID();
    const written = this.redis.multi().hset(this.key, mark, JSON.stringify(call)).pexpire(this.key, MARK_KEPT_MS).exec();
    await within(written, MARK_WAIT_MS, 'the call mark').catch(() => undefined);
    return mark;
  }

  end(mark: string, durable: Promise<void>): void {
    const gone: Promise<void> = durable
      .catch(() => undefined) // an event the sink could not write is its to report
      .then(() => this.redis.hdel(this.key, mark))
      .then(
        () => undefined,
        () => undefined,
      )
      .finally(() => this.pending.delete(gone));
    this.pending.add(gone);
  }

  /** Resolves once every mark of this run is gone (or SETTLE_WAIT_MS have passed): the claim may be freed then. */
  async settled(): Promise<void> {
    await within(Promise.all(this.pending), SETTLE_WAIT_MS, 'the call marks').catch(() => undefined);
  }

  /** The calls a run killed mid-call left marked, taken off in one step: only the run that takes them meters them. */
  async takeAbandoned(): Promise<MarkedCall[]> {
    const fields = (await this.redis.eval(TAKE, 2, this.key, `${this.taken}:${randomUUID()}`, TAKEN_KEPT_MS)) as string[];
    return fields.map((f) => JSON.parse(f) as MarkedCall);
  }
}

/** The marks of each job of one queue. */
export class CallMarks {
  constructor(
    private readonly redis: Redis,
    private readonly prefix: string,
  ) {}

  of(jobId: string): RunMarks {
    return new RunMarks(this.redis, `${this.prefix}:calls:${jobId}`, `${this.prefix}:taken-calls:${jobId}`);
  }
}

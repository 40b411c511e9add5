/**
 * One run of a Cold job at a time, across the fleet. BullMQ takes a running job back once its lock
 * lapses unrenewed; a Redis outage longer than the lock (30 s) makes it lapse while the run goes on,
 * and another worker (or the same) runs the job again: a second provider call (the provider may or
 * may not honour the same Idempotency-Key), a second meter event, and the second answer kept.
 *
 * So a run first takes the job's claim in Redis (a hash `<queue>:run:<jobId>`: the run's token, then
 * its result), for `runMs`, longer than a run can last (the job's time per attempt, with a margin):
 * - free: the run is the job's; it calls the providers;
 * - held by a run that finished with an answer: that answer is the job's, no call made again;
 * - held by a run still going: no call; the job is deferred briefly (no attempt spent) and looks again.
 * A run that ends without an answer (failed, deferred, handed back) frees the claim, so a retry calls
 * again; a run cut by a kill -9 leaves it held until `runMs` has passed. A run that outlasts its claim
 * (Redis away longer than `runMs`) still keeps its answer there, unless another run took the claim
 * meanwhile. The job's completion deletes it.
 */
import type { Redis } from 'ioredis';

/**
 * Free: take it. Holding an answer: that answer. Held by this very run (its token is BullMQ's for
 * this pickup of the job): this take sent again (sent-again.ts); the run is the job's (else it
 * would be busy, and the job would wait out its own claim). Else: busy.
 */
const TAKE = `
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'token', ARGV[1])
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {'mine'}
end
local result = redis.call('HGET', KEYS[1], 'result')
if result then return {'done', result} end
if redis.call('HGET', KEYS[1], 'token') == ARGV[1] then return {'mine'} end
return {'busy'}`;

/**
 * The answer kept with the claim, if the claim is still this run's, or lapsed with no other run
 * taking it since (Redis away longer than runMs): the run that takes the job back is given it.
 */
const FINISH = `
local holder = redis.call('HGET', KEYS[1], 'token')
if holder and holder ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'token', ARGV[1], 'result', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1`;

/** Freed, if still this run's and without an answer. */
const RELEASE = `
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] or redis.call('HEXISTS', KEYS[1], 'result') == 1 then return 0 end
return redis.call('DEL', KEYS[1])`;

/** How long a finished run's answer waits for the job's completion: as long as a completed job is kept. */
const ANSWER_KEPT_MS = 7 * 24 * 3600_000;

export type Claim = { kind: 'mine' } | { kind: 'done'; result: unknown } | { kind: 'busy' };

export class RunClaims {
  constructor(
    private readonly redis: Redis,
    private readonly prefix: string,
    private readonly runMs: number,
  ) {}

  private key(jobId: string): string {
    return `${this.prefix}:run:${jobId}`;
  }

  async take(jobId: string, token: string): Promise<Claim> {
    const [kind, result] = (await this.redis.eval(TAKE, 1, this.key(jobId), token, this.runMs)) as [string, string?];
    if (kind === 'mine') return { kind };
    return kind === 'done' ? { kind, result: JSON.parse(result!) as unknown } : { kind: 'busy' };
  }

  async finish(jobId: string, token: string, result: unknown): Promise<void> {
    await this.redis.eval(FINISH, 1, this.key(jobId), token, JSON.stringify(result ?? null), ANSWER_KEPT_MS);
  }

  async release(jobId: string, token: string): Promise<void> {
    await this.redis.eval(RELEASE, 1, this.key(jobId), token);
  }

  /** The job completed: its claim is no longer needed. */
  async forget(jobId: string): Promise<void> {
    await this.redis.del(this.key(jobId));
  }
}

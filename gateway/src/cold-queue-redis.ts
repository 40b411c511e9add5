/**
 * The Cold queue on Redis (BullMQ): durable, shared by every gateway and worker on the Redis. What
 * it promises is in cold-queue.ts; the in-process stand-in (cold-queue-memory.ts) keeps the same.
 */
import { DelayedError, Queue, UnrecoverableError, Worker, type ConnectionOptions, type Job } from 'bullmq';
import { Redis, type RedisOptions } from 'ioredis';
import { randomUUID } from 'node:crypto';
import { CallMarks } from './cold-call-marks';
import { RunClaims } from './cold-run-claim';
import { within } from './within';
import {
  answered,
  coldJobId,
  DeferJob,
  foundJob,
  JOB_ATTEMPTS,
  JOB_BACKOFF_MS,
  JOB_NAME,
  KEEP_COMPLETED,
  KEEP_COMPLETED_S,
  KEEP_DEAD,
  KEEP_DEAD_S,
  nextDeferral,
  QUEUE_NAME,
  QueueFull,
  SWEEP_MS,
  mb,
  type ColdPayload,
  type ColdQueue,
  type Deferral,
  type EnqueueOptions,
  type EnqueueResult,
  type JobState,
  type JobView,
  type Processor,
  type QueueCounts,
  type QueueOptions,
  type WorkOptions,
} from './cold-queue';

/**
 * New jobs are refused once Redis uses this share of its maxmemory: the rest is the room jobs already
 * queued need to run (each run writes its claim and its answer) and the gateway's other keys need.
 */
const FULL_AT = 0.9;
/** How long one read of Redis's memory serves new jobs: one INFO a second at most, during an outage. */
const MEMORY_READ_MS = 1000;

/** `used_memory` and `maxmemory` (0: no limit) from INFO memory. */
function memoryOf(info: string): { used: number; max: number } {
  const field = (name: string) => Number(new RegExp(`^${name}:(\\d+)`, 'm').exec(info)?.[1] ?? 0);
  return { used: field('used_memory'), max: field('maxmemory') };
}

/** The most finished jobs one sweep (SWEEP_MS) removes of each set; BullMQ's own removal takes the rest as jobs finish. */
const SWEPT_AT_MOST = 1000;

/** How long the mark of a job's creation is kept (enqueue): far longer than two instances racing. */
const CREATED_MARK_MS = 60_000;
/**
 * Taken by the one instance that replaces a dead job (kept as long as a creation mark): its creation
 * mark goes in the same step, before the job, so an instance that finds no job once it is gone
 * competes for the new mark on equal terms. The mark is named in the step from the job as it is
 * then (its creation and its death), not as the instance read it: the job and its state are read
 * apart, and a job read just before it died was named as one not finished, a mark nobody held.
 * None when the job is no longer dead (moved back to run, or already replaced).
 * The dead job is set aside in the same step (KEYS[4], for PARKED_MS), not deleted: the add that
 * follows may be refused (Redis at its maxmemory, or gone), and the dead job then goes back (RESTORE).
 * Returns the mark's name, and how many calls had touched the job then (KEYS[5], see WITHDRAW).
 */
const REPLACE = `
if not redis.call('ZSCORE', KEYS[3], ARGV[3]) then return false end
local job = redis.call('HMGET', KEYS[2], 'timestamp', 'finishedOn')
if not job[1] or not job[2] then return false end
local mark = ARGV[1] .. ':' .. job[1] .. ':' .. job[2]
if not redis.call('SET', mark, '1', 'PX', ARGV[2], 'NX') then return false end
redis.call('DEL', KEYS[1])
redis.call('RENAME', KEYS[2], KEYS[4])
redis.call('PEXPIRE', KEYS[4], ARGV[4])
redis.call('ZREM', KEYS[3], ARGV[3])
return {mark, redis.call('HGET', KEYS[5], 'n') or ''}`;
/**
 * A dead job set aside by REPLACE goes back where it was, its replacement refused: unless a job of
 * the id was added meanwhile (a client's retry), which it then gives way to, or a call for the job
 * began since it was set aside (KEYS[4] is no longer ARGV[3], nor gone): that call found no job and
 * adds its own, which put back would have met the dead job, kept it, and told its client 202 of a
 * job that never runs. Its replacing mark goes too, so the request sent again replaces it. The RENAME comes first: a script's first write may be
 * refused at maxmemory, the ones after it are not.
 */
const RESTORE = `
local asked = redis.call('HGET', KEYS[4], 'n')
if redis.call('EXISTS', KEYS[1]) == 1 or redis.call('EXISTS', KEYS[2]) == 0 or (asked and asked ~= ARGV[3]) then
  redis.call('DEL', KEYS[2])
  return 0
end
redis.call('RENAME', KEYS[2], KEYS[1])
redis.call('PERSIST', KEYS[1])
redis.call('ZADD', KEYS[3], redis.call('HGET', KEYS[1], 'finishedOn'), ARGV[1])
redis.call('DEL', ARGV[2])
return 1`;
/** How long a dead job set aside while it is replaced waits for the add's outcome (its instance may be killed meanwhile). */
const PARKED_MS = 3600_000;
/**
 * A job added after its client was told 503 (Redis answered past the time-to-answer) is taken out
 * again: its client's retry is answered live, and the job would call the provider once more, later.
 * Only if no other call for the same request may have been told of it, and no worker has taken it
 * yet. KEYS[1] counts the calls that touched the job (n) and those of them that ended (s): none may
 * have touched it since this call did (n is still ARGV[2]: a retry that found the job was told of
 * it), and every call that touched it before this one must have ended by then (checked by the
 * caller): one still under way may have found no job, met this one's in its add, and told its
 * client 202 of it. The counts stay (until they lapse): a call touching the job next is another.
 */
const WITHDRAW = `
if redis.call('HGET', KEYS[1], 'n') ~= ARGV[2] then return 0 end
if redis.call('LREM', KEYS[3], 0, ARGV[1]) + redis.call('ZREM', KEYS[4], ARGV[1]) == 0 then return 0 end
redis.call('DEL', KEYS[2], KEYS[5])
return 1`;
/** A call's touch of its job (see WITHDRAW), kept CREATED_MARK_MS: the calls that touched it with this one, and how many of them ended. */
const TOUCH = `
local n = redis.call('HINCRBY', KEYS[1], 'n', 1)
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return {n, tonumber(redis.call('HGET', KEYS[1], 's') or '0')}`;
/** A call that touched its job ended (see WITHDRAW); nothing once its touch has lapsed. */
const SETTLE = `
if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('HINCRBY', KEYS[1], 's', 1) end`;

const jobOptions = (backoff: number, o: QueueOptions) => ({
  attempts: JOB_ATTEMPTS,
  backoff: { type: 'exponential' as const, delay: backoff },
  removeOnComplete: { age: o.keepCompletedS ?? KEEP_COMPLETED_S, count: o.keepCompleted ?? KEEP_COMPLETED },
  removeOnFail: { age: o.keepDeadS ?? KEEP_DEAD_S, count: o.keepDead ?? KEEP_DEAD },
});

/** The deferral BullMQ keeps in a job's progress (worker.ts writes it there). */
function deferralOf(job: Job<ColdPayload>): Deferral | null {
  const p = job.progress as Partial<Deferral> | number | undefined;
  return p && typeof p === 'object' && typeof p.since === 'string' ? (p as Deferral) : null;
}

/**
 * BullMQ's states → ours. In BullMQ a job that failed but has attempts left waits in `delayed`
 * (its backoff) and `failed` is final: so `failed` is our dead-lettered, and a delayed job that has
 * already failed is our `failed` (will be retried).
 */
function view(job: Job<ColdPayload>, state: string): JobView {
  const maxAttempts = job.opts.attempts ?? JOB_ATTEMPTS;
  const deferred = deferralOf(job);
  const waitingForRoute = deferred !== null && Date.parse(deferred.until) > Date.now();
  // A worker writes the deferral, then moves the job to delayed: in between it is already deferred.
  const deferring = state === 'active' && waitingForRoute;
  const mapped: JobState =
    state === 'failed'
      ? 'dead-lettered'
      : state === 'delayed' && job.attemptsMade > 0 && !waitingForRoute
        ? 'failed'
        : deferring
          ? 'delayed'
          : state === 'prioritized' || state === 'waiting-children' || state === 'wait'
            ? 'waiting'
            : ((['waiting', 'delayed', 'active', 'completed'].includes(state) ? state : 'unknown') as JobState);
  return {
    id: job.id!,
    state: mapped,
    attempts: job.attemptsMade,
    maxAttempts,
    lastError: job.failedReason || null,
    deferred,
    result: job.returnvalue ?? null,
    reason: job.data.reason,
    customerId: job.data.customerId,
    enqueuedAt: job.data.enqueuedAt,
    finishedAt: job.finishedOn ? new Date(job.finishedOn).toISOString() : null,
  };
}

/**
 * How often a job cut mid-run (its worker killed) is taken back and run again: BullMQ's default,
 * once, dead-lettered a job after two rolling restarts; more would let a job that kills its worker
 * (out of memory, say) take down one worker after another.
 */
const STALLS_TAKEN_BACK = 2;
/**
 * BullMQ's own limit, set out of reach: it dead-lettered a job cut once too often before any run
 * took it, so the calls its last killed run left marked were never metered. The limit is kept here
 * (STALLS_TAKEN_BACK), by a run that takes the job's claim, meters those calls, and ends the job.
 */
const BULLMQ_STALLS = 1_000_000;
/** The last error of a job its workers were killed during once too often (BullMQ's own words). */
const STALLED_OUT = 'job stalled more than allowable limit';

/** How soon a job whose claim another run holds looks again. */
const RUN_RECHECK_MS = 1000;
// Its client reads it (deferred.reason): a claim held by a killed run is the usual case, an outage the rarer.
const ANOTHER_RUN =
  'another run of this job holds it (its worker was stopped mid-run, or it goes on while Redis did not answer): looked at again until that run ends or its claim lapses';

/** The processor if this run takes the job's claim; the answer of a run that finished; else deferred briefly. */
async function claimedRun(
  claims: RunClaims,
  calls: CallMarks,
  job: Job<ColdPayload>,
  token: string,
  processor: Processor,
): Promise<unknown> {
  const claim = await claims.take(job.id!, token);
  if (claim.kind === 'done') return claim.result;
  if (claim.kind === 'busy') throw new DeferJob(Date.now() + RUN_RECHECK_MS, ANOTHER_RUN);
  const marks = calls.of(job.id!);
  let result: unknown;
  try {
    result = await processor(job.data, deferralOf(job), marks, job.stalledCounter > STALLS_TAKEN_BACK ? STALLED_OUT : undefined);
  } catch (error) {
    await marks.settled(); // its calls' marks gone first: the next run must not take them for a killed run's
    await claims.release(job.id!, token).catch(() => undefined); // a retry may call again
    throw error;
  }
  // Kept once Redis answers, also past runMs (cold-run-claim.ts); not kept only if the command fails.
  // Sent before waiting for its marks to go: a stop while Redis stalls ends before Redis answers that,
  // and the answer, sent all the same, lands once Redis does, for the run that takes the job back.
  const kept = claims.finish(job.id!, token, result).catch(() => undefined);
  await marks.settled();
  await kept;
  return result;
}

/** Dead-lettered jobs read together by deadLettered: few enough to come within a command's wait on a slow link. */
const READ_AT_ONCE = 5;

export class BullColdQueue implements ColdQueue {
  readonly durable = true;
  readonly queue: Queue<ColdPayload>;
  private readonly backoffMs: number;
  /** Redis's memory as last read (roomLeft); `at` on the monotonic clock, as a wall clock set back would keep a stale figure. */
  private memory: { at: number; used: number; max: number } | null = null;
  /** The queue's own connection (closed with the queue). */
  private readonly own: Redis;
  constructor(
    private readonly connection: ConnectionOptions,
    private readonly prefix?: string,
    private readonly options: QueueOptions = {},
  ) {
    // Adding a job fails at once while Redis is unreachable, as BullMQ advises for a Queue behind an
    // HTTP endpoint: with the shared connection's offline queue the add would wait for Redis to come
    // back, past the request's time-to-answer, and create a job whose client was told 503.
    this.own =
      connection instanceof Redis
        ? connection.duplicate({ enableOfflineQueue: false })
        : new Redis({ ...(connection as RedisOptions), enableOfflineQueue: false });
    this.own.on('error', () => undefined); // the shared connection reports the outage (reportRedisState)
    this.queue = new Queue<ColdPayload>(QUEUE_NAME, { connection: this.own, prefix });
    // A command refused while the connection is down (BullMQ's first INFO among them) is reported as
    // the queue's 'error'; the shared connection already logs the outage (reportRedisState), and an
    // 'error' without a listener would end the process.
    this.queue.on('error', () => undefined);
    this.backoffMs = options.backoffMs ?? JOB_BACKOFF_MS;
  }
  /**
   * Two round trips before `added`: the job, its state and Redis's memory read together (ioredis
   * writes them on the one connection before any answers), then the add; a dead-lettered job found
   * (replaced by a new one) adds one more, which sets it aside. The mark comes after the add (a failed
   * add must leave none) and is not waited for by `added`: four round trips one after the other
   * outlasted a short time-to-answer on a slow Redis, and the job was made after its client was told 503.
   */
  async enqueue(payload: ColdPayload, options: EnqueueOptions = {}): Promise<EnqueueResult> {
    const jobId = coldJobId(payload);
    const memory = this.readMemory();
    memory.catch(() => undefined); // its error counts only for a new job
    await this.queue.waitUntilReady();
    // This call's touch, counted before the job is read (the one connection keeps the order), and
    // its end once it has answered: a job this call finds, or meets in its add, is not withdrawn by
    // another call given up on (WITHDRAW).
    const touched = this.own.eval(TOUCH, 1, this.touchKey(jobId), CREATED_MARK_MS).then(
      (counts) => counts as [number, number],
      () => null,
    );
    try {
      return await this.enqueueTouched(jobId, payload, options, memory, touched);
    } finally {
      // Not waited for: the client's answer does not wait on it.
      void touched.then((counts) => counts && this.own.eval(SETTLE, 1, this.touchKey(jobId))).catch(() => undefined);
    }
  }
  private async enqueueTouched(
    jobId: string,
    payload: ColdPayload,
    options: EnqueueOptions,
    memory: Promise<{ used: number; max: number }>,
    touched: Promise<[number, number] | null>,
  ): Promise<EnqueueResult> {
    const [existing, state] = await Promise.all([this.queue.getJob(jobId), this.queue.getJobState(jobId)]);
    const dead = existing !== undefined && state === 'failed';
    if (existing && !dead) {
      // Its hold known before the answer: the request's meter event says it, written before the request ends.
      const found = await joined(existing, state, payload, options.delayMs ?? 0);
      return (options.added?.(jobId, found.heldForReview), found);
    }
    this.roomLeft(await memory);
    const replacing = dead ? await this.setDeadAside(existing!) : null;
    if (replacing === false) return (options.added?.(jobId), { jobId, created: false });
    if (options.signal?.aborted) {
      if (replacing) await this.restoreDead(jobId, replacing);
      return { jobId, created: false, withdrawn: true };
    }
    await this.queue
      .add(JOB_NAME, payload, { ...jobOptions(this.backoffMs, this.options), jobId, delay: options.delayMs })
      .catch(async (error: unknown) => {
        if (replacing) await this.restoreDead(jobId, replacing);
        return this.fullOnOom(error);
      });
    options.added?.(jobId);
    // Counted until the next read: a burst of large requests within one read must not pass maxmemory.
    if (this.memory) this.memory.used += JSON.stringify(payload).length;
    // Two instances may both get here for one request (a client's retry reaching both): BullMQ
    // keeps one job (its id), and only the first to mark it says it created it, so a person is
    // notified once. The mark outlives that race only. A mark that fails (Redis gone after the
    // add) counts as created: a notice twice rather than a job nobody is told about. The mark is
    // this call's own token: one sent again (sent-again.ts) finds itself, and is still this call's
    // (else it would find the mark taken, and nobody would be told of the job). A second read only
    // when the mark was taken.
    const mark = randomUUID();
    const key = this.createdMark(jobId);
    const created = await this.own
      .set(key, mark, 'PX', CREATED_MARK_MS, 'NX')
      .then(async (set) => set === 'OK' || (await this.own.get(key)) === mark)
      .catch(() => true);
    if (created && options.signal?.aborted && (await this.withdraw(jobId, await touched))) {
      if (replacing) await this.restoreDead(jobId, replacing);
      return { jobId, created: false, withdrawn: true };
    }
    if (replacing) void this.own.del(this.parkedKey(jobId)).catch(() => undefined);
    return { jobId, created };
  }
  /** Takes out the job this call added once its client was told 503 (WITHDRAW); false if it stays. */
  private async withdraw(jobId: string, touched: [number, number] | null): Promise<boolean> {
    // Every call that touched the job before this one had ended when this one touched it.
    if (!touched || touched[1] !== touched[0] - 1) return false;
    const keys = [this.touchKey(jobId), this.queue.toKey(jobId), this.queue.keys.wait, this.queue.keys.delayed, this.createdMark(jobId)];
    return (await this.own.eval(WITHDRAW, keys.length, ...keys, jobId, touched[0]).catch(() => 0)) === 1;
  }
  private touchKey(jobId: string): string {
    // Not `touched:` (a token there before): an instance of the earlier kind beside this one during a
    // rolling restart would meet a hash where it reads a string, and fail to replace a dead job.
    return `${this.queue.qualifiedName}:touches:${jobId}`;
  }
  private createdMark(jobId: string): string {
    return `${this.queue.qualifiedName}:created:${jobId}`;
  }
  /**
   * A dead-lettered job of the same request gives way to a new one (ColdQueue.enqueue), told of as
   * any new job (its creation mark goes first). One instance replaces it: two that found it dead (a
   * client's retry reaching both) both removed it by its id, the later one the new job the other had
   * just added, and both said they created it. False when another instance replaces it, or it was
   * moved back to run: the job found is then the request's. Else the dead job is set aside (not
   * removed: an add Redis refused left the operator without it, and its client with 503), and the
   * name of the replacement's mark is returned, with who had asked for the job last (RESTORE).
   */
  private async setDeadAside(job: Job<ColdPayload>): Promise<{ mark: string; asked: string } | false> {
    // This dead job's own (its creation and its death): a job under the id dying later is another.
    const replacing = `${this.queue.qualifiedName}:replacing:${job.id}`;
    const keys = [
      this.createdMark(job.id!),
      this.queue.toKey(job.id!),
      this.queue.keys.failed,
      this.parkedKey(job.id!),
      this.touchKey(job.id!),
    ];
    const set = await this.own.eval(REPLACE, keys.length, ...keys, replacing, CREATED_MARK_MS, job.id!, PARKED_MS);
    return Array.isArray(set) ? { mark: String(set[0]), asked: String(set[1]) } : false;
  }
  /**
   * The dead job set aside goes back to the dead-letter list, its replacement refused. On the
   * worker's connection, which waits for Redis: a refusal because Redis went away would otherwise
   * find it away too. Not waited for longer than the add was: the client's 503 does not wait.
   */
  private async restoreDead(jobId: string, { mark, asked }: { mark: string; asked: string }): Promise<void> {
    const client = this.connection instanceof Redis ? this.connection : this.own;
    const keys = [this.queue.toKey(jobId), this.parkedKey(jobId), this.queue.keys.failed, this.touchKey(jobId)];
    const restoring = client.eval(RESTORE, keys.length, ...keys, jobId, mark, asked);
    await within(restoring, 1000).catch(() => undefined);
  }
  private parkedKey(jobId: string): string {
    return `${this.queue.qualifiedName}:parked:${jobId}`;
  }
  /** Redis's memory, read at most once per MEMORY_READ_MS. */
  private async readMemory(): Promise<{ used: number; max: number }> {
    if (this.memory && performance.now() - this.memory.at <= MEMORY_READ_MS) return this.memory;
    // Once connected, as getJob waits (the own connection refuses commands before: no offline queue).
    await this.queue.waitUntilReady();
    this.memory = { at: performance.now(), ...memoryOf(await this.own.info('memory')) };
    return this.memory;
  }
  /**
   * Redis's own refusal (OOM) is the queue full too: a burst of jobs within one memory read can pass
   * the FULL_AT line, as Redis counts more than a job's JSON. Until the next read, every new job is
   * refused here, without another trip to a Redis that would refuse it.
   */
  private fullOnOom(error: unknown): never {
    if (!(error instanceof Error) || !error.message.startsWith('OOM ')) throw error;
    if (this.memory) this.memory.used = Math.max(this.memory.used, this.memory.max);
    throw new QueueFull(`its Redis refused the job: it is at its maxmemory (${error.message})`);
  }
  /** Throws QueueFull when Redis uses FULL_AT of its maxmemory. */
  private roomLeft({ used, max }: { used: number; max: number }): void {
    if (max > 0 && used >= FULL_AT * max)
      throw new QueueFull(`its Redis uses ${mb(used)} of its maxmemory ${mb(max)} (new jobs are refused from ${FULL_AT * 100} %)`);
  }
  /**
   * One job in one state: BullMQ reads the job and its state apart, and a worker moves it on
   * between them (a poll saw a deferred job still `waiting`, a completed one without its attempt),
   * so the state is read on both sides of the job and the read repeated until they agree. The three
   * go out together on the one connection, which Redis runs in order: one round trip, not three (on
   * a Redis taking 700 ms a command, three outlasted the poll's 2 s every time).
   */
  async get(id: string): Promise<JobView | null> {
    for (let tries = 1; ; tries++) {
      const [before, job, state] = await Promise.all([this.queue.getJobState(id), this.queue.getJob(id), this.queue.getJobState(id)]);
      if (!job || state === 'unknown') return null;
      if (state === before || tries === 5) return view(job, state);
    }
  }
  async counts(): Promise<QueueCounts> {
    const c = await this.queue.getJobCounts('waiting', 'delayed', 'active', 'completed', 'failed', 'prioritized');
    // "failed" (retrying) jobs sit among the delayed ones; counting them would read every delayed job.
    return {
      waiting: (c.waiting ?? 0) + (c.prioritized ?? 0),
      delayed: c.delayed ?? 0,
      active: c.active ?? 0,
      completed: c.completed ?? 0,
      failed: 0,
      dead_lettered: c.failed ?? 0,
    };
  }
  /**
   * A few jobs at a time: read in one answer (request bodies of up to 20 MB each), the list outlasted a
   * command's wait on a slow link and said the store did not answer. One removed meanwhile is left out.
   */
  async deadLettered(limit = 100): Promise<JobView[]> {
    const ids = await this.deadLetteredIds(limit);
    const jobs: JobView[] = [];
    for (let i = 0; i < ids.length; i += READ_AT_ONCE)
      for (const job of await Promise.all(ids.slice(i, i + READ_AT_ONCE).map((id) => this.queue.getJob(id))))
        if (job) jobs.push(view(job, 'failed'));
    return jobs;
  }
  /**
   * The ids alone, newest first: a move reads each job as it moves it. Read whole in one answer (request
   * bodies of up to 20 MB each), they outlasted a command's wait on a slow link, and nothing was moved.
   */
  async deadLetteredIds(limit: number): Promise<string[]> {
    return await this.queue.getRanges(['failed'], 0, limit - 1);
  }
  async retryDeadLettered(id: string): Promise<boolean> {
    const job = await this.queue.getJob(id);
    if (!job || (await job.getState()) !== 'failed') return false;
    await job.updateProgress(0); // a fresh start: no deferral carried over
    // Nor the count of its runs cut (BullMQ's `stc`, which its retry keeps): a job dead-lettered by
    // its third kill was dead-lettered again by the first kill after it was moved back.
    await this.own.hdel(this.queue.toKey(id), 'stc');
    await job.retry('failed', { resetAttemptsMade: true, resetAttemptsStarted: true });
    return true;
  }

  /**
   * BullMQ's Worker over this queue: a DeferJob becomes moveToDelayed + DelayedError (no attempt
   * spent, the deferral kept in the job's progress); once a job completes, its request body leaves
   * Redis (the answer stays for the client to read). With `runMs`, a run holds the job's claim
   * (cold-run-claim.ts): a job taken back while its first run goes on is not run again.
   */
  work(processor: Processor, options: WorkOptions = {}): { close(): Promise<void> } {
    // On the worker's connection, which waits for Redis as BullMQ's own commands do (the queue's fails at once).
    const client = this.connection instanceof Redis ? this.connection : this.own;
    const claims = options.runMs ? new RunClaims(client, this.queue.qualifiedName, options.runMs) : null;
    const calls = claims && new CallMarks(client, this.queue.qualifiedName);
    const run = async (job: Job<ColdPayload>, token?: string) => {
      try {
        if (!claims && job.stalledCounter > STALLS_TAKEN_BACK) throw new UnrecoverableError(STALLED_OUT);
        if (!claims) return await processor(job.data, deferralOf(job));
        return await claimedRun(claims, calls!, job, token ?? randomUUID(), processor);
      } catch (error) {
        if (!(error instanceof DeferJob)) throw error;
        await job.updateProgress(nextDeferral(deferralOf(job), error));
        await job.moveToDelayed(error.until, token);
        throw new DelayedError();
      }
    };
    const worker = new Worker<ColdPayload>(QUEUE_NAME, run, {
      connection: this.connection,
      prefix: this.prefix,
      concurrency: options.concurrency ?? 4,
      name: JOB_NAME,
      maxStalledCount: BULLMQ_STALLS,
      ...(options.lockMs ? { lockDuration: options.lockMs, stalledInterval: options.lockMs } : {}),
    });
    worker.on('completed', (job) => {
      void job.updateData(answered(job.data)).catch(() => undefined);
      void claims?.forget(job.id!).catch(() => undefined);
    });
    worker.on('failed', (job, error) => {
      if (!job) return;
      const dead = job.attemptsMade >= (job.opts.attempts ?? JOB_ATTEMPTS) || error instanceof UnrecoverableError;
      options.onFailed?.({ id: job.id!, payload: job.data, attemptsMade: job.attemptsMade, error, dead });
    });
    worker.on('error', (error) => options.onError?.(error));
    // At most this many a sweep: one Lua call each, short enough not to hold Redis up.
    const sweep = async () => {
      const keepCompletedMs = (this.options.keepCompletedS ?? KEEP_COMPLETED_S) * 1000;
      await this.queue.clean(keepCompletedMs, SWEPT_AT_MOST, 'completed');
      await this.queue.clean((this.options.keepDeadS ?? KEEP_DEAD_S) * 1000, SWEPT_AT_MOST, 'failed');
      // BullMQ's event stream holds each completed job's answer too (nothing here reads it): no
      // longer than a completed job is kept. Its ids are the times of the events.
      await client.xtrim(this.queue.keys.events, 'MINID', Date.now() - keepCompletedMs);
    };
    // Once as the worker starts too: instances restarted more often than every SWEEP_MS would never sweep.
    // Its errors as the worker's own (a Redis outage among them, which the worker's log leaves out).
    const sweepNow = () => void sweep().catch((error: Error) => options.onError?.(error));
    const first = setTimeout(sweepNow, 0);
    const sweeper = setInterval(sweepNow, this.options.sweepMs ?? SWEEP_MS);
    first.unref();
    sweeper.unref();
    return {
      close: () => {
        clearTimeout(first);
        clearInterval(sweeper);
        return worker.close();
      },
    };
  }
  /**
   * The own connection goes first, then the queue once its start-up has settled: BullMQ's start-up
   * (an INFO once connected) still running when the queue closes would fail on the closed
   * connection after the queue dropped its error listeners, an unhandled rejection (seen with
   * `npm run ops`, whose commands close the queue as soon as they are done).
   */
  async close(): Promise<void> {
    this.own.disconnect();
    await within(
      this.queue.waitUntilReady().catch(() => undefined),
      1000,
    ).catch(() => undefined);
    await this.queue.close();
  }
}

/**
 * A request's job found (ColdQueue.enqueue): put in a person's hands when it asks for review and the
 * job is still held to run later. Its hold first: one a worker took meanwhile is not delayed any
 * more, and changeDelay refuses it (then it runs, as found).
 */
async function joined(job: Job<ColdPayload>, state: string, payload: ColdPayload, delayMs: number): Promise<EnqueueResult> {
  const found = foundJob(job.id!, job.data.reviewRequired, payload);
  if (!payload.reviewRequired || job.data.reviewRequired || state !== 'delayed') return found;
  try {
    await job.changeDelay(delayMs);
  } catch {
    return found;
  }
  await job.updateData({ ...job.data, reviewRequired: true, reason: payload.reason }).catch(() => undefined);
  return { jobId: job.id!, created: false, marked: true };
}

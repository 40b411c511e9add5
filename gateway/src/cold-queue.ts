/**
 * (Over 300 lines: both implementations of ColdQueue stay side by side, read and kept in agreement together.)
 *
 * The Cold tier's durable queue: BullMQ queue `ai-tasks`, job `llm-task`, attempts 5,
 * exponential backoff from 1000 ms. A job's id derives from the request's idempotency key, so a
 * client that retries the same request does not enqueue it twice. Without Redis an in-process
 * queue with the same behaviour stands in (queued work then does not survive a restart); the
 * contract suite (test/gateway/cold-queue.contract.test.ts) runs the same cases against both.
 *
 * Job states shown to clients: waiting, delayed, active, completed, failed (will be retried),
 * dead-lettered (used all its attempts; kept 30 days, until an operator moves it back).
 *
 * A job no route can take now (every breaker open, or the budget pause) is deferred, not failed: the
 * processor throws DeferJob and the queue delays it to the time given without spending an attempt
 * (BullMQ: moveToDelayed + DelayedError); its view says why and until when (`deferred`).
 *
 * Bounds, the same in Redis and in process: completed jobs 7 days and the newest 10,000, without
 * the request body (a prompt is not kept once answered); dead-lettered jobs 30 days and the newest
 * 10,000.
 */
import { createHash } from 'node:crypto';
import { DelayedError, Queue, UnrecoverableError, Worker, type ConnectionOptions, type Job } from 'bullmq';
import { Redis } from 'ioredis';
import { backoffMs } from './backoff';
import type { ApiKind } from './request-context';

const QUEUE_NAME = 'ai-tasks';
const JOB_NAME = 'llm-task';
const JOB_ATTEMPTS = 5;
const JOB_BACKOFF_MS = 1000;
/** Completed results are kept this long, and at most this many (the newest). */
const KEEP_COMPLETED_S = 7 * 24 * 3600;
const KEEP_COMPLETED = 10_000;
/** Dead-lettered jobs (prompts included) are kept this long for an operator, and at most this many. */
const KEEP_DEAD_S = 30 * 24 * 3600;
const KEEP_DEAD = 10_000;

/** Thrown by a processor for a job no route can take now: delayed to `until` (ms), no attempt spent. */
export class DeferJob extends Error {
  constructor(
    readonly until: number,
    readonly reason: string,
  ) {
    super(`deferred until ${new Date(until).toISOString()}: ${reason}`);
    this.name = 'DeferJob';
  }
}

/** Why a job waits without spending attempts, until when, and since when it has been deferred. */
export interface Deferral {
  reason: string;
  until: string;
  since: string;
}

/** The deferral a job carries now, after a DeferJob (since: the first deferral's, or now). */
function nextDeferral(previous: Deferral | null, defer: DeferJob): Deferral {
  return { reason: defer.reason, until: new Date(defer.until).toISOString(), since: previous?.since ?? new Date().toISOString() };
}

export interface ColdPayload {
  /** The API the request speaks; absent on jobs queued before there was more than chat. */
  api?: ApiKind;
  /** The request as the client sent it. */
  body: { model: string } & Record<string, unknown>;
  /** A Responses request's chat translation, for chat-only routes. */
  asChat?: Record<string, unknown>;
  idempotencyKey: string;
  userId: string;
  jobId: string;
  customerId: string;
  jobType: string;
  /** Why it was queued: all_failed, time_to_answer, budget_queue, human_review. */
  reason: string;
  reviewRequired: boolean;
  enqueuedAt: string;
}

type JobState = 'waiting' | 'delayed' | 'active' | 'completed' | 'failed' | 'dead-lettered' | 'unknown';

export interface JobView {
  id: string;
  state: JobState;
  attempts: number;
  maxAttempts: number;
  lastError: string | null;
  /** Set while the job waits for a route (or the pause) without spending attempts. */
  deferred: Deferral | null;
  result: unknown;
  reason: string;
  customerId: string;
  enqueuedAt: string;
  finishedAt: string | null;
}

export interface EnqueueResult {
  jobId: string;
  /** False when a job with this id already existed (the client retried). */
  created: boolean;
}

export interface QueueCounts {
  waiting: number;
  /** Delayed: scheduled for later, including failed jobs waiting for their retry (BullMQ). */
  delayed: number;
  active: number;
  completed: number;
  /** Always 0: failed jobs waiting for their retry are counted in `delayed`, as BullMQ does (counting them apart would read every delayed job). Kept so the shape of /health and `ops status` does not change. */
  failed: number;
  dead_lettered: number;
}

export interface ColdQueue {
  readonly durable: boolean;
  enqueue(payload: ColdPayload, options?: { delayMs?: number }): Promise<EnqueueResult>;
  get(id: string): Promise<JobView | null>;
  counts(): Promise<QueueCounts>;
  /** Dead-lettered jobs (all attempts used). */
  deadLettered(limit?: number): Promise<JobView[]>;
  /** Moves a dead-lettered job back to the queue with fresh attempts. */
  retryDeadLettered(id: string): Promise<boolean>;
  close(): Promise<void>;
}

/** Job id from the idempotency key (hashed: client keys may hold characters BullMQ ids must not). */
function coldJobId(idempotencyKey: string): string {
  return `llm-${createHash('sha256').update(idempotencyKey).digest('hex').slice(0, 40)}`;
}
/** The shape of every id coldJobId makes: anything else is not a job (and must not reach the store). */
export const COLD_JOB_ID = /^llm-[0-9a-f]{40}$/;

/** Test runs shorten the backoff and the bounds; everything else uses the constants above. */
export interface QueueOptions {
  backoffMs?: number;
  keepCompleted?: number;
  keepDead?: number;
}

const jobOptions = (backoff: number, o: QueueOptions) => ({
  attempts: JOB_ATTEMPTS,
  backoff: { type: 'exponential' as const, delay: backoff },
  removeOnComplete: { age: KEEP_COMPLETED_S, count: o.keepCompleted ?? KEEP_COMPLETED },
  removeOnFail: { age: KEEP_DEAD_S, count: o.keepDead ?? KEEP_DEAD },
});

/** A completed job's payload without its request body: nothing reads it again. */
function answered(payload: ColdPayload): ColdPayload {
  return { ...payload, body: { model: payload.body.model, messages: [] }, asChat: undefined };
}

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
  const mapped: JobState =
    state === 'failed'
      ? 'dead-lettered'
      : state === 'delayed' && job.attemptsMade > 0 && !waitingForRoute
        ? 'failed'
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

/** What a worker runs for each job: its payload and its current deferral, to a result or an error. */
export type Processor = (payload: ColdPayload, deferred: Deferral | null) => Promise<unknown>;

export interface WorkOptions {
  concurrency?: number;
  onFailed?: (failure: JobFailure) => void;
  onError?: (error: Error) => void;
}

export class BullColdQueue implements ColdQueue {
  readonly durable = true;
  readonly queue: Queue<ColdPayload>;
  private readonly backoffMs: number;
  /** The queue's own connection when given a shared one (closed with the queue). */
  private readonly own: Redis | null;
  constructor(
    private readonly connection: ConnectionOptions,
    private readonly prefix?: string,
    private readonly options: QueueOptions = {},
  ) {
    // Adding a job fails at once while Redis is unreachable, as BullMQ advises for a Queue behind an
    // HTTP endpoint: with the shared connection's offline queue the add would wait for Redis to come
    // back, past the request's time-to-answer, and create a job whose client was told 503.
    this.own = connection instanceof Redis ? connection.duplicate({ enableOfflineQueue: false }) : null;
    this.own?.on('error', () => undefined); // the shared connection reports the outage (reportRedisState)
    this.queue = new Queue<ColdPayload>(QUEUE_NAME, { connection: this.own ?? connection, prefix });
    this.backoffMs = options.backoffMs ?? JOB_BACKOFF_MS;
  }
  async enqueue(payload: ColdPayload, options: { delayMs?: number } = {}): Promise<EnqueueResult> {
    const jobId = coldJobId(payload.idempotencyKey);
    const existing = await this.queue.getJob(jobId);
    if (existing) return { jobId, created: false };
    await this.queue.add(JOB_NAME, payload, { ...jobOptions(this.backoffMs, this.options), jobId, delay: options.delayMs });
    return { jobId, created: true };
  }
  async get(id: string): Promise<JobView | null> {
    const job = await this.queue.getJob(id);
    if (!job) return null;
    return view(job, await job.getState());
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
  async deadLettered(limit = 100): Promise<JobView[]> {
    return (await this.queue.getFailed(0, limit - 1)).map((j) => view(j, 'failed'));
  }
  async retryDeadLettered(id: string): Promise<boolean> {
    const job = await this.queue.getJob(id);
    if (!job || (await job.getState()) !== 'failed') return false;
    await job.updateProgress(0); // a fresh start: no deferral carried over
    await job.retry('failed', { resetAttemptsMade: true, resetAttemptsStarted: true });
    return true;
  }

  /**
   * BullMQ's Worker over this queue: a DeferJob becomes moveToDelayed + DelayedError (no attempt
   * spent, the deferral kept in the job's progress); once a job completes, its request body leaves
   * Redis (the answer stays for the client to read).
   */
  work(processor: Processor, options: WorkOptions = {}): { close(): Promise<void> } {
    const run = async (job: Job<ColdPayload>, token?: string) => {
      try {
        return await processor(job.data, deferralOf(job));
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
    });
    worker.on('completed', (job) => void job.updateData(answered(job.data)).catch(() => undefined));
    worker.on('failed', (job, error) => {
      if (!job) return;
      const dead = job.attemptsMade >= (job.opts.attempts ?? JOB_ATTEMPTS) || error instanceof UnrecoverableError;
      options.onFailed?.({ id: job.id!, payload: job.data, attemptsMade: job.attemptsMade, error, dead });
    });
    worker.on('error', (error) => options.onError?.(error));
    return { close: () => worker.close() };
  }
  async close(): Promise<void> {
    await this.queue.close();
    this.own?.disconnect();
  }
}

/** In-process job states; `retrying` and `dead` are what BullMQ keeps as delayed-after-a-failure and failed. */
type MemoryState = 'waiting' | 'delayed' | 'active' | 'completed' | 'retrying' | 'dead';
const MEMORY_VIEW: Record<MemoryState, JobState> = {
  waiting: 'waiting',
  delayed: 'delayed',
  active: 'active',
  completed: 'completed',
  retrying: 'failed',
  dead: 'dead-lettered',
};

interface MemoryJob {
  payload: ColdPayload;
  state: MemoryState;
  attemptsMade: number;
  lastError: string | null;
  deferred: Deferral | null;
  result: unknown;
  runAt: number;
  finishedAt: number | null;
  /** Order of dead-lettering: the list shows the newest first, as BullMQ's does. */
  deadSeq: number;
}

/** A failed run of a job, as the in-process worker reports it (BullMQ's `failed` event). */
interface JobFailure {
  id: string;
  payload: ColdPayload;
  attemptsMade: number;
  error: Error;
  /** All attempts used, or an UnrecoverableError: the job is dead-lettered. */
  dead: boolean;
}

/**
 * The in-process stand-in: the same states, attempts, backoff, counts and lists as BullMQ shows
 * through ColdQueue (the contract suite runs both); completed jobs are dropped after the same
 * week; everything is gone on restart.
 */
export class MemoryColdQueue implements ColdQueue {
  readonly durable = false;
  private readonly jobs = new Map<string, MemoryJob>();
  private readonly listeners: Array<() => void> = [];
  private readonly backoffMs: number;
  private deadSeq = 0;
  /** Completed and dead-lettered ids, oldest first: the count bounds drop from the front. */
  private readonly finished = { completed: new Set<string>(), dead: new Set<string>() };
  constructor(private readonly options: QueueOptions = {}) {
    this.backoffMs = options.backoffMs ?? JOB_BACKOFF_MS;
  }
  async enqueue(payload: ColdPayload, options: { delayMs?: number } = {}): Promise<EnqueueResult> {
    const jobId = coldJobId(payload.idempotencyKey);
    if (this.jobs.has(jobId)) return { jobId, created: false };
    const delay = options.delayMs ?? 0;
    this.jobs.set(jobId, {
      payload,
      state: delay ? 'delayed' : 'waiting',
      attemptsMade: 0,
      lastError: null,
      deferred: null,
      result: null,
      runAt: Date.now() + delay,
      finishedAt: null,
      deadSeq: 0,
    });
    this.wake();
    return { jobId, created: true };
  }
  private wake(): void {
    for (const l of this.listeners) l();
  }
  /** The next job that is due, marked active. */
  private take(now = Date.now()): [string, MemoryJob] | null {
    for (const [id, job] of this.jobs) {
      if ((job.state === 'waiting' || job.state === 'delayed' || job.state === 'retrying') && job.runAt <= now) {
        job.state = 'active';
        return [id, job];
      }
    }
    return null;
  }
  private toView(id: string, j: MemoryJob): JobView {
    return {
      id,
      state: MEMORY_VIEW[j.state],
      attempts: j.attemptsMade,
      maxAttempts: JOB_ATTEMPTS,
      lastError: j.lastError,
      deferred: j.deferred,
      result: j.result,
      reason: j.payload.reason,
      customerId: j.payload.customerId,
      enqueuedAt: j.payload.enqueuedAt,
      finishedAt: j.finishedAt ? new Date(j.finishedAt).toISOString() : null,
    };
  }
  async get(id: string): Promise<JobView | null> {
    const j = this.jobs.get(id);
    return j ? this.toView(id, j) : null;
  }
  async counts(): Promise<QueueCounts> {
    const c: QueueCounts = { waiting: 0, delayed: 0, active: 0, completed: 0, failed: 0, dead_lettered: 0 };
    for (const j of this.jobs.values()) {
      if (j.state === 'dead') c.dead_lettered++;
      else if (j.state === 'retrying')
        c.delayed++; // as BullMQ counts them
      else c[j.state]++;
    }
    return c;
  }
  async deadLettered(limit = 100): Promise<JobView[]> {
    return [...this.jobs]
      .filter(([, j]) => j.state === 'dead')
      .sort(([, a], [, b]) => b.deadSeq - a.deadSeq)
      .slice(0, limit)
      .map(([id, j]) => this.toView(id, j));
  }
  async retryDeadLettered(id: string): Promise<boolean> {
    const j = this.jobs.get(id);
    if (!j || j.state !== 'dead') return false;
    Object.assign(j, { state: 'waiting', attemptsMade: 0, lastError: null, deferred: null, finishedAt: null, runAt: Date.now() });
    this.finished.dead.delete(id);
    this.wake();
    return true;
  }
  async close(): Promise<void> {}

  private completed(id: string, job: MemoryJob, result: unknown): void {
    const payload = answered(job.payload);
    Object.assign(job, { state: 'completed', payload, result, finishedAt: Date.now(), attemptsMade: job.attemptsMade + 1 });
    this.bound(id, this.finished.completed, this.options.keepCompleted ?? KEEP_COMPLETED, KEEP_COMPLETED_S);
  }

  /** As BullMQ's removeOnComplete / removeOnFail: the newest `count` kept, none older than `ageS`. */
  private bound(id: string, ids: Set<string>, count: number, ageS: number): void {
    ids.add(id);
    const oldest = Date.now() - ageS * 1000;
    for (const old of ids) {
      const j = this.jobs.get(old);
      if (ids.size <= count && j && j.finishedAt! >= oldest) break;
      ids.delete(old);
      this.jobs.delete(old);
    }
  }

  /** Delays a job that no route can take now, without spending an attempt. */
  private deferred(job: MemoryJob, defer: DeferJob): void {
    Object.assign(job, { state: 'delayed', runAt: defer.until, deferred: nextDeferral(job.deferred, defer) });
  }

  /** Records a failed run; true when the job is now dead-lettered. */
  private failed(id: string, job: MemoryJob, error: Error): boolean {
    job.attemptsMade++;
    job.lastError = error.message;
    if (job.attemptsMade >= JOB_ATTEMPTS || error instanceof UnrecoverableError) {
      Object.assign(job, { state: 'dead', finishedAt: Date.now(), deadSeq: ++this.deadSeq });
      this.bound(id, this.finished.dead, this.options.keepDead ?? KEEP_DEAD, KEEP_DEAD_S);
      return true;
    }
    job.state = 'retrying';
    job.runAt = Date.now() + backoffMs(job.attemptsMade, { firstMs: this.backoffMs });
    return false;
  }

  /**
   * Runs due jobs through `processor`, `concurrency` at a time, as BullMQ's Worker does: a result
   * completes the job; a DeferJob delays it without spending an attempt; another error fails it and
   * schedules a retry after the exponential backoff, until the attempts are used or the error is an
   * UnrecoverableError (then it is dead-lettered).
   */
  work(processor: Processor, options: WorkOptions = {}): { close(): Promise<void> } {
    const concurrency = options.concurrency ?? 4;
    let closed = false;
    const active = new Set<Promise<void>>();
    const tick = () => {
      while (!closed && active.size < concurrency) {
        const next = this.take();
        if (!next) return;
        const [id, job] = next;
        const run: Promise<void> = processor(job.payload, job.deferred)
          .then(
            (result) => this.completed(id, job, result),
            (error: Error) => {
              if (error instanceof DeferJob) return this.deferred(job, error);
              const dead = this.failed(id, job, error);
              options.onFailed?.({ id, payload: job.payload, attemptsMade: job.attemptsMade, error, dead });
            },
          )
          .finally(() => {
            active.delete(run);
            tick();
          });
        active.add(run);
      }
    };
    // Delayed jobs and retries fall due with time: look again every 50 ms.
    const timer = setInterval(tick, 50);
    timer.unref();
    this.listeners.push(tick);
    return {
      close: async () => {
        closed = true;
        clearInterval(timer);
        this.listeners.splice(this.listeners.indexOf(tick), 1);
        await Promise.all(active);
      },
    };
  }
}

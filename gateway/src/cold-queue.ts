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
 * dead-lettered (used all its attempts; kept until an operator moves it back).
 */
import { createHash } from 'node:crypto';
import { Queue, UnrecoverableError, type ConnectionOptions, type Job } from 'bullmq';
import { backoffMs } from './backoff';
import type { ApiKind } from './request-context';

export const QUEUE_NAME = 'ai-tasks';
export const JOB_NAME = 'llm-task';
export const JOB_ATTEMPTS = 5;
const JOB_BACKOFF_MS = 1000;
/** Completed results are kept this long; dead-lettered jobs until an operator moves them back. */
const KEEP_COMPLETED_S = 7 * 24 * 3600;

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

/** Test runs shorten the backoff; everything else uses JOB_BACKOFF_MS. */
interface QueueOptions {
  backoffMs?: number;
}

const jobOptions = (backoff: number) => ({
  attempts: JOB_ATTEMPTS,
  backoff: { type: 'exponential' as const, delay: backoff },
  removeOnComplete: { age: KEEP_COMPLETED_S },
  removeOnFail: false as const,
});

/**
 * BullMQ's states → ours. In BullMQ a job that failed but has attempts left waits in `delayed`
 * (its backoff) and `failed` is final: so `failed` is our dead-lettered, and a delayed job that has
 * already failed is our `failed` (will be retried).
 */
function view(job: Job<ColdPayload>, state: string): JobView {
  const maxAttempts = job.opts.attempts ?? JOB_ATTEMPTS;
  const mapped: JobState =
    state === 'failed'
      ? 'dead-lettered'
      : state === 'delayed' && job.attemptsMade > 0
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
    result: job.returnvalue ?? null,
    reason: job.data.reason,
    customerId: job.data.customerId,
    enqueuedAt: job.data.enqueuedAt,
    finishedAt: job.finishedOn ? new Date(job.finishedOn).toISOString() : null,
  };
}

export class BullColdQueue implements ColdQueue {
  readonly durable = true;
  readonly queue: Queue<ColdPayload>;
  private readonly backoffMs: number;
  constructor(connection: ConnectionOptions, prefix?: string, options: QueueOptions = {}) {
    this.queue = new Queue<ColdPayload>(QUEUE_NAME, { connection, prefix });
    this.backoffMs = options.backoffMs ?? JOB_BACKOFF_MS;
  }
  async enqueue(payload: ColdPayload, options: { delayMs?: number } = {}): Promise<EnqueueResult> {
    const jobId = coldJobId(payload.idempotencyKey);
    const existing = await this.queue.getJob(jobId);
    if (existing) return { jobId, created: false };
    await this.queue.add(JOB_NAME, payload, { ...jobOptions(this.backoffMs), jobId, delay: options.delayMs });
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
    await job.retry('failed', { resetAttemptsMade: true, resetAttemptsStarted: true });
    return true;
  }
  async close(): Promise<void> {
    await this.queue.close();
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
  private sweptAt = Date.now();
  constructor(options: QueueOptions = {}) {
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
    Object.assign(j, { state: 'waiting', attemptsMade: 0, lastError: null, finishedAt: null, runAt: Date.now() });
    this.wake();
    return true;
  }
  async close(): Promise<void> {}

  private completed(job: MemoryJob, result: unknown): void {
    Object.assign(job, { state: 'completed', result, finishedAt: Date.now(), attemptsMade: job.attemptsMade + 1 });
    // BullMQ drops completed jobs older than a week when jobs complete; so does this, once a minute at most.
    if (Date.now() - this.sweptAt < 60_000) return;
    this.sweptAt = Date.now();
    for (const [id, j] of this.jobs)
      if (j.state === 'completed' && j.finishedAt! < Date.now() - KEEP_COMPLETED_S * 1000) this.jobs.delete(id);
  }

  /** Records a failed run; true when the job is now dead-lettered. */
  private failed(job: MemoryJob, error: Error): boolean {
    job.attemptsMade++;
    job.lastError = error.message;
    if (job.attemptsMade >= JOB_ATTEMPTS || error instanceof UnrecoverableError) {
      Object.assign(job, { state: 'dead', finishedAt: Date.now(), deadSeq: ++this.deadSeq });
      return true;
    }
    job.state = 'retrying';
    job.runAt = Date.now() + backoffMs(job.attemptsMade, { firstMs: this.backoffMs });
    return false;
  }

  /**
   * Runs due jobs through `processor`, `concurrency` at a time, as BullMQ's Worker does: a result
   * completes the job; an error fails it and schedules a retry after the exponential backoff, until
   * the attempts are used or the error is an UnrecoverableError (then it is dead-lettered).
   */
  work(
    processor: (payload: ColdPayload) => Promise<unknown>,
    options: { concurrency?: number; onFailed?: (failure: JobFailure) => void } = {},
  ): { close(): Promise<void> } {
    const concurrency = options.concurrency ?? 4;
    let closed = false;
    const active = new Set<Promise<void>>();
    const tick = () => {
      while (!closed && active.size < concurrency) {
        const next = this.take();
        if (!next) return;
        const [id, job] = next;
        const run: Promise<void> = processor(job.payload)
          .then(
            (result) => this.completed(job, result),
            (error: Error) => {
              const dead = this.failed(job, error);
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

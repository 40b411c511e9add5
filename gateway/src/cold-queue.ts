/**
 * The Cold tier's durable queue (Document 1): BullMQ queue `ai-tasks`, job `llm-task`, attempts 5,
 * exponential backoff from 1000 ms. A job's id derives from the request's idempotency key, so a
 * client that retries the same request does not enqueue it twice. Without Redis an in-process
 * queue with the same behaviour stands in (queued work then does not survive a restart).
 *
 * Job states shown to clients: waiting, delayed, active, completed, failed (will be retried),
 * dead-lettered (used all its attempts; kept until an operator moves it back).
 */
import { createHash } from 'node:crypto';
import { Queue, type ConnectionOptions, type Job } from 'bullmq';
import type { ChatBodyT } from './chat-request';

export const QUEUE_NAME = 'ai-tasks';
export const JOB_NAME = 'llm-task';
export const JOB_ATTEMPTS = 5;
export const JOB_BACKOFF_MS = 1000;
/** Completed results and dead-lettered jobs are kept this long. */
const KEEP_COMPLETED_S = 7 * 24 * 3600;

export interface ColdPayload {
  /** The chat request as the client sent it. */
  body: ChatBodyT;
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
  /** Failed and waiting for a retry (in-process queue only; BullMQ counts them as delayed). */
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

const JOB_OPTIONS = {
  attempts: JOB_ATTEMPTS,
  backoff: { type: 'exponential' as const, delay: JOB_BACKOFF_MS },
  removeOnComplete: { age: KEEP_COMPLETED_S },
  removeOnFail: false as const,
};

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
  constructor(connection: ConnectionOptions, prefix?: string) {
    this.queue = new Queue<ColdPayload>(QUEUE_NAME, { connection, prefix });
  }
  async enqueue(payload: ColdPayload, options: { delayMs?: number } = {}): Promise<EnqueueResult> {
    const jobId = coldJobId(payload.idempotencyKey);
    const existing = await this.queue.getJob(jobId);
    if (existing) return { jobId, created: false };
    await this.queue.add(JOB_NAME, payload, { ...JOB_OPTIONS, jobId, delay: options.delayMs });
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

interface MemoryJob {
  payload: ColdPayload;
  /** Used all its attempts, or failed in a way retries cannot fix. */
  dead?: boolean;
  state: Exclude<JobState, 'dead-lettered' | 'unknown'>;
  attemptsMade: number;
  lastError: string | null;
  result: unknown;
  runAt: number;
  finishedAt: number | null;
}

/** The in-process stand-in: same states, attempts and backoff; gone on restart. */
export class MemoryColdQueue implements ColdQueue {
  readonly durable = false;
  readonly jobs = new Map<string, MemoryJob>();
  private readonly listeners: Array<() => void> = [];
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
    });
    for (const l of this.listeners) l();
    return { jobId, created: true };
  }
  onEnqueue(listener: () => void): void {
    this.listeners.push(listener);
  }
  /** The next job that is due, marked active. */
  take(now = Date.now()): [string, MemoryJob] | null {
    for (const [id, job] of this.jobs) {
      if ((job.state === 'waiting' || job.state === 'delayed' || (job.state === 'failed' && !job.dead)) && job.runAt <= now) {
        job.state = 'active';
        return [id, job];
      }
    }
    return null;
  }
  private toView(id: string, j: MemoryJob): JobView {
    const dead = j.state === 'failed' && j.dead === true;
    return {
      id,
      state: dead ? 'dead-lettered' : j.state === 'waiting' && j.runAt > Date.now() ? 'delayed' : j.state,
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
    for (const [id, j] of this.jobs) {
      const s = this.toView(id, j).state;
      if (s === 'dead-lettered') c.dead_lettered++;
      else if (s !== 'unknown') c[s]++;
    }
    return c;
  }
  async deadLettered(limit = 100): Promise<JobView[]> {
    return [...this.jobs]
      .map(([id, j]) => this.toView(id, j))
      .filter((v) => v.state === 'dead-lettered')
      .slice(0, limit);
  }
  async retryDeadLettered(id: string): Promise<boolean> {
    const j = this.jobs.get(id);
    if (!j || !j.dead) return false;
    Object.assign(j, { state: 'waiting', dead: false, attemptsMade: 0, runAt: Date.now() });
    for (const l of this.listeners) l();
    return true;
  }
  async close(): Promise<void> {}
}

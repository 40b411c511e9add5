/**
 * The Cold queue in process, for a gateway without Redis: the same states, attempts, backoff,
 * counts and lists as BullMQ shows through ColdQueue (the contract suite runs both); gone on restart.
 */
import { UnrecoverableError } from 'bullmq';
import { backoffMs } from './backoff';
import {
  answered,
  coldJobId,
  DeferJob,
  JOB_ATTEMPTS,
  JOB_BACKOFF_MS,
  KEEP_COMPLETED,
  KEEP_COMPLETED_S,
  KEEP_DEAD,
  KEEP_DEAD_S,
  QueueFull,
  SWEEP_MS,
  mb,
  nextDeferral,
  foundJob,
  type ColdPayload,
  type ColdQueue,
  type Deferral,
  type EnqueueResult,
  type JobState,
  type JobView,
  type Processor,
  type QueueCounts,
  type QueueOptions,
  type WorkOptions,
} from './cold-queue';

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
  /** When it falls due, on the monotonic clock: one set back would hold it for the time given back. */
  runAt: number;
  finishedAt: number | null;
  /** Order of dead-lettering: the list shows the newest first, as BullMQ's does. */
  deadSeq: number;
  /** The request's bytes it holds (0 once answered: its body is dropped). */
  bytes: number;
  /** Its answer's bytes, once completed (0 once the answer is dropped to stay within the limit). */
  answerBytes: number;
  /** Its answer was dropped, the oldest first, to keep the queue within its limit. */
  answerDropped: boolean;
}

/**
 * The bytes the in-process queue holds: requests past it are refused (QueueFull: 503
 * `cold_queue_full`), as the Redis queue refuses them near its Redis's maxmemory; completed jobs'
 * answers past it are dropped, the oldest first, so kept answers never refuse new work. A long
 * outage otherwise queued every request (up to 20 MB each) and kept every answer (an embeddings
 * answer is tens of MB) until the process ran out of memory.
 */
const MAX_HELD_BYTES = 256 * 1024 * 1024;

/**
 * What a job takes beyond its payload's JSON: the map's slot, the job and its payload as objects
 * (measured: some 500 bytes of heap; counted a little over). Only the body was counted before: a
 * small request with long routing headers held 60 times what was counted.
 */
const JOB_BYTES = 1024;

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
  /** The request bytes held by jobs not answered (waiting, running, retrying, dead-lettered): their payloads' JSON and JOB_BYTES each. */
  private held = 0;
  /** The answer bytes kept by completed jobs. */
  private kept = 0;
  private readonly maxBytes: number;
  /** `maxBytes`: MAX_HELD_BYTES unless said (for tests). */
  constructor(private readonly options: QueueOptions & { maxBytes?: number } = {}) {
    this.backoffMs = options.backoffMs ?? JOB_BACKOFF_MS;
    this.maxBytes = options.maxBytes ?? MAX_HELD_BYTES;
  }
  async enqueue(payload: ColdPayload, options: { delayMs?: number } = {}): Promise<EnqueueResult> {
    const jobId = coldJobId(payload);
    // A dead-lettered job of the same request gives way to a new one (ColdQueue.enqueue), and so
    // does a completed one whose answer was dropped: found, its client was told 202 and then 410
    // on every poll, however often the request was sent again.
    const found = this.jobs.get(jobId);
    const dead = found && (found.state === 'dead' || found.answerDropped) ? found : undefined;
    if (found && !dead) return this.joined(jobId, found, payload, options.delayMs ?? 0);
    // All of it is held until it is answered: its body, a Responses request's chat translation, its
    // routing headers (up to 1,000 characters each) and the job's own record.
    const bytes = Buffer.byteLength(JSON.stringify(payload)) + JOB_BYTES;
    if (this.held - (dead?.bytes ?? 0) + bytes > this.maxBytes)
      throw new QueueFull(`the in-process queue holds ${mb(this.held)} of requests, its limit ${mb(this.maxBytes)}`);
    if (dead) {
      this.held -= dead.bytes;
      this.finished.dead.delete(jobId);
      this.finished.completed.delete(jobId);
      this.jobs.delete(jobId); // the new job waits behind those waiting (take runs them in insertion order), as in BullMQ
    }
    this.held += bytes;
    this.dropAnswers();
    const delay = options.delayMs ?? 0;
    this.jobs.set(jobId, {
      bytes,
      payload,
      state: delay ? 'delayed' : 'waiting',
      attemptsMade: 0,
      lastError: null,
      deferred: null,
      result: null,
      runAt: performance.now() + delay,
      finishedAt: null,
      deadSeq: 0,
      answerBytes: 0,
      answerDropped: false,
    });
    this.wake();
    return { jobId, created: true };
  }
  /** A request's job found (ColdQueue.enqueue): put in a person's hands when it asks for review and the job still waits. */
  private joined(jobId: string, found: MemoryJob, payload: ColdPayload, delayMs: number): EnqueueResult {
    // Held to run later: as BullMQ's delayed, which holds a retry's wait too.
    if (!payload.reviewRequired || found.payload.reviewRequired || (found.state !== 'delayed' && found.state !== 'retrying'))
      return foundJob(jobId, found.payload.reviewRequired, payload);
    found.payload = { ...found.payload, reviewRequired: true, reason: payload.reason };
    found.runAt = Math.max(found.runAt, performance.now() + delayMs);
    return { jobId, created: false, marked: true };
  }
  private wake(): void {
    for (const l of this.listeners) l();
  }
  /** The next job that is due, marked active. */
  private take(now = performance.now()): [string, MemoryJob] | null {
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
      ...(j.answerDropped && { answerDropped: true }),
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
    Object.assign(j, { state: 'waiting', attemptsMade: 0, lastError: null, deferred: null, finishedAt: null, runAt: performance.now() });
    this.finished.dead.delete(id);
    this.wake();
    return true;
  }
  async close(): Promise<void> {}

  private completed(id: string, job: MemoryJob, result: unknown): void {
    const payload = answered(job.payload);
    this.held -= job.bytes;
    const answerBytes = Buffer.byteLength(JSON.stringify(result) ?? '');
    this.kept += answerBytes;
    const attemptsMade = job.attemptsMade + 1;
    Object.assign(job, { state: 'completed', payload, result, finishedAt: Date.now(), attemptsMade, bytes: 0, answerBytes });
    this.finished.completed.add(id);
    this.boundCompleted();
    this.dropAnswers();
  }

  /** Drops completed jobs' answers, the oldest first, while the queue holds more than its limit. */
  private dropAnswers(): void {
    for (const id of this.finished.completed) {
      if (this.held + this.kept <= this.maxBytes) return;
      const j = this.jobs.get(id);
      if (!j?.answerBytes) continue;
      this.kept -= j.answerBytes;
      Object.assign(j, { result: null, answerBytes: 0, answerDropped: true });
    }
  }

  private boundCompleted(): void {
    this.bound(this.finished.completed, this.options.keepCompleted ?? KEEP_COMPLETED, this.options.keepCompletedS ?? KEEP_COMPLETED_S);
  }
  private boundDead(): void {
    this.bound(this.finished.dead, this.options.keepDead ?? KEEP_DEAD, this.options.keepDeadS ?? KEEP_DEAD_S);
  }

  /** As BullMQ's removeOnComplete / removeOnFail: the newest `count` kept, none older than `ageS`. */
  private bound(ids: Set<string>, count: number, ageS: number): void {
    const oldest = Date.now() - ageS * 1000;
    for (const old of ids) {
      const j = this.jobs.get(old);
      if (ids.size <= count && j && j.finishedAt! >= oldest) break;
      ids.delete(old);
      this.held -= j?.bytes ?? 0;
      this.kept -= j?.answerBytes ?? 0;
      this.jobs.delete(old);
    }
  }

  /** Delays a job that no route can take now, without spending an attempt. */
  private deferred(job: MemoryJob, defer: DeferJob): void {
    const runAt = performance.now() + Math.max(0, defer.until - Date.now()); // `until` is a date
    Object.assign(job, { state: 'delayed', runAt, deferred: nextDeferral(job.deferred, defer) });
  }

  /** Records a failed run; true when the job is now dead-lettered. */
  private failed(id: string, job: MemoryJob, error: Error): boolean {
    job.attemptsMade++;
    job.lastError = error.message;
    if (job.attemptsMade >= JOB_ATTEMPTS || error instanceof UnrecoverableError) {
      Object.assign(job, { state: 'dead', finishedAt: Date.now(), deadSeq: ++this.deadSeq });
      this.finished.dead.add(id);
      this.boundDead();
      return true;
    }
    job.state = 'retrying';
    job.runAt = performance.now() + backoffMs(job.attemptsMade, { firstMs: this.backoffMs });
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
    // Finished jobs past their age leave also when no job finishes after them (SWEEP_MS).
    const sweeper = setInterval(() => {
      this.boundCompleted();
      this.boundDead();
    }, this.options.sweepMs ?? SWEEP_MS);
    sweeper.unref();
    this.listeners.push(tick);
    return {
      close: async () => {
        closed = true;
        clearInterval(timer);
        clearInterval(sweeper);
        this.listeners.splice(this.listeners.indexOf(tick), 1);
        await Promise.all(active);
      },
    };
  }
}

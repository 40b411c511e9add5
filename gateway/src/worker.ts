/**
 * The Cold worker: takes `llm-task` jobs and runs the Hot/Warm routing again for them (it never
 * re-enqueues). A job picked up while `pause_ai_tasks` is `1` fails with "paused by budget
 * guardrail" and is retried per its attempts; jobs already running when the pause is set finish.
 * A job that used all its attempts is dead-lettered (kept, visible, notified).
 */
import { UnrecoverableError, Worker, type ConnectionOptions } from 'bullmq';
import type { ChatContext } from './chat-request';
import { JOB_ATTEMPTS, JOB_NAME, QUEUE_NAME, type ColdPayload, type MemoryColdQueue } from './cold-queue';
import { Deadline } from './deadline';
import type { Failover } from './failover';
import type { Route } from './route';
import type { FlagStore } from './flags';
import type { Notifier } from './notify';
import { PAUSED_MESSAGE, type PauseFlag } from './budget';

/** Time a queued job may take per attempt (it has no caller waiting on it). */
const JOB_TIME_MS = 120_000;

export interface WorkerDeps {
  failover: Failover;
  pause: PauseFlag;
  flags: FlagStore;
  notifier: Notifier;
  /** Routes to avoid while paused (the capped provider's). */
  skipWhilePaused: (route: Route) => boolean;
  log: { info: (m: string) => void; warn: (m: string) => void };
  jobTimeMs?: number;
}

interface JobResult {
  status: number;
  tier: string;
  provider: string;
  model: string;
  attempts: number;
  body: unknown;
}

/** One run of one job: the routing again, or an error that makes the queue retry it. */
async function runJob(payload: ColdPayload, deps: WorkerDeps): Promise<JobResult> {
  if (await deps.pause.refresh()) throw new Error(PAUSED_MESSAGE);
  const ctx: ChatContext = {
    api: 'chat',
    body: { ...payload.body, stream: false },
    stream: false,
    idempotencyKey: payload.idempotencyKey,
    userId: payload.userId,
    jobId: payload.jobId,
    customerId: payload.customerId,
    jobType: payload.jobType,
    timeToAnswerMs: deps.jobTimeMs ?? JOB_TIME_MS,
    mustHaveAnswer: true,
    canUseCheaper: false,
  };
  const outcome = await deps.failover.route(ctx, new Deadline(ctx.timeToAnswerMs), {
    flags: deps.flags.get(),
    skip: (r) => deps.pause.paused() && deps.skipWhilePaused(r),
  });
  if (outcome.kind === 'exhausted') throw new Error(`no route answered (${outcome.lastError ?? outcome.reason})`);
  if (outcome.kind === 'answer') {
    outcome.settleWhole();
    await outcome.durable; // the call's event on disk before the job completes with its answer
  }
  const text = outcome.upstream.body?.toString('utf8') ?? '';
  let body: unknown = text;
  try {
    body = JSON.parse(text);
  } catch {
    /* keep the text */
  }
  // A request the provider refuses as malformed will not heal with retries.
  if (outcome.kind === 'client_error')
    throw new UnrecoverableError(`provider refused the request: HTTP ${outcome.upstream.status} ${text.slice(0, 300)}`);
  return {
    status: outcome.upstream.status,
    tier: outcome.route.tier,
    provider: outcome.route.config.provider,
    model: outcome.model,
    attempts: outcome.attempts,
    body,
  };
}

export interface ColdWorker {
  close(): Promise<void>;
}

export function startBullWorker(connection: ConnectionOptions, prefix: string | undefined, deps: WorkerDeps, concurrency = 4): ColdWorker {
  const worker = new Worker<ColdPayload, JobResult>(QUEUE_NAME, async (job) => runJob(job.data, deps), {
    connection,
    prefix,
    concurrency,
    name: JOB_NAME,
  });
  worker.on('failed', (job, error) => {
    if (!job) return;
    const dead = job.attemptsMade >= (job.opts.attempts ?? JOB_ATTEMPTS) || error instanceof UnrecoverableError;
    deps.log.warn(`job ${job.id} attempt ${job.attemptsMade} failed: ${error.message}${dead ? ' (dead-lettered)' : ''}`);
    if (dead)
      deps.notifier.notify({
        kind: 'dead_lettered',
        jobIds: [job.id!],
        tenant: job.data.customerId,
        detail: `last error: ${error.message}`,
      });
  });
  worker.on('error', (error) => deps.log.warn(`worker: ${error.message}`));
  return { close: () => worker.close() };
}

/** The in-process worker for the in-process queue: same attempts and exponential backoff. */
export function startMemoryWorker(queue: MemoryColdQueue, deps: WorkerDeps, concurrency = 4): ColdWorker {
  return queue.work((payload) => runJob(payload, deps), {
    concurrency,
    onFailed: ({ id, payload, attemptsMade, error, dead }) => {
      deps.log.warn(`job ${id} attempt ${attemptsMade} failed: ${error.message}${dead ? ' (dead-lettered)' : ''}`);
      if (dead)
        deps.notifier.notify({ kind: 'dead_lettered', jobIds: [id], tenant: payload.customerId, detail: `last error: ${error.message}` });
    },
  });
}

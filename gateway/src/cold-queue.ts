/**
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
 * In Redis, new jobs are refused (QueueFull) once Redis uses 90 % of its maxmemory, so that the
 * jobs queued can still run (cold-queue-redis.ts).
 *
 * This file holds what both implementations share: the interface, the payload and views, the
 * constants and the deferral; cold-queue-redis.ts is BullMQ's, cold-queue-memory.ts the in-process one.
 */
import type { RunMarks } from './cold-call-marks';
import { createHash } from 'node:crypto';
import { canonicalJson } from './canonical-json';
import type { TokensKey } from './key-policy';
import type { ApiKind } from './request-context';

export const QUEUE_NAME = 'ai-tasks';
export const JOB_NAME = 'llm-task';
export const JOB_ATTEMPTS = 5;
export const JOB_BACKOFF_MS = 1000;
/** Completed results are kept this long, and at most this many (the newest). */
export const KEEP_COMPLETED_S = 7 * 24 * 3600;
export const KEEP_COMPLETED = 10_000;
/** Dead-lettered jobs (prompts included) are kept this long for an operator, and at most this many. */
export const KEEP_DEAD_S = 30 * 24 * 3600;
export const KEEP_DEAD = 10_000;
/**
 * How often a running worker drops finished jobs past those ages. BullMQ (and the in-process queue
 * alike) applies them only as another job finishes into the same set, so the last dead letter of a
 * quiet queue, its prompt included, would otherwise be kept for good.
 */
export const SWEEP_MS = 3600_000;

/**
 * Thrown by enqueue when the queue's Redis is near its maxmemory: a queue that filled it could not
 * drain (running a job writes its claim and answer, refused once Redis is full), and took every
 * other use of that Redis with it.
 */
/** A size in bytes as the queues' refusals say it. */
export const mb = (bytes: number) => `${(bytes / 2 ** 20).toFixed(1)} MB`;

export class QueueFull extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'QueueFull';
  }
}

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
export function nextDeferral(previous: Deferral | null, defer: DeferJob): Deferral {
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
  /**
   * The client key whose `--tpm` the job's answer counts against (its id and limit; absent: no key,
   * or one without `--tpm`): a client that sends a time-to-answer no route can meet, so that its
   * requests go through the queue, does not escape its limit.
   */
  tokensKey?: TokensKey;
  /**
   * Queued with a client key (GATEWAY_AUTH=keys): the run checks and records response owners as the
   * gateway did, whatever the worker's own GATEWAY_AUTH. Absent on jobs queued before it was kept.
   */
  ownedResponses?: boolean;
  jobType: string;
  /** Why it was queued: all_failed, time_to_answer, budget_queue, human_review. */
  reason: string;
  reviewRequired: boolean;
  enqueuedAt: string;
}

export type JobState = 'waiting' | 'delayed' | 'active' | 'completed' | 'failed' | 'dead-lettered' | 'unknown';

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
  /** Completed, but its answer no longer kept (the in-process queue past its limit): GET says so. */
  answerDropped?: true;
}

export interface EnqueueOptions {
  delayMs?: number;
  /**
   * Called by a queue that finds out only later whether this call made the job, once the job is in: the answer need not wait.
   * `heldForReview` as EnqueueResult's: a job found says its hold once this call has marked it or not.
   */
  added?: (jobId: string, heldForReview?: boolean) => void;
  /**
   * Aborted once the client was answered without the job (503: the queue did not answer in time).
   * A job this call adds after that is taken out again (Redis), unless a later call for the same
   * request found it meanwhile or a worker took it; the result then says withdrawn (no notice).
   */
  signal?: AbortSignal;
}

export interface EnqueueResult {
  jobId: string;
  /** False when a job with this id already existed (the client retried). */
  created: boolean;
  /** Not added, or taken out again: its client had been answered without it (EnqueueOptions.signal). */
  withdrawn?: boolean;
  /** Whether the job found is held for a person (reviewRequired), said when not as this request asked: a job found keeps its own, unless marked. */
  heldForReview?: boolean;
  /** A job found, held to run later and not for a person, that this call asking for review put in a person's hands: to be told of, as a new one. */
  marked?: boolean;
}

/** A job found for a request (ColdQueue.enqueue), its review hold said when not the one the request asked for. */
export function foundJob(jobId: string, reviewRequired: boolean | undefined, payload: ColdPayload): EnqueueResult {
  const held = reviewRequired === true;
  return held === payload.reviewRequired ? { jobId, created: false } : { jobId, created: false, heldForReview: held };
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
  /**
   * A job for the request, or the one it already has (its id: coldJobId), waiting, running or
   * answered. A dead-lettered one is replaced by a new job: the request sent again is to be tried
   * again, and finding the dead job, its client was told it was queued while nothing would run it.
   * So is, in process, a completed job whose answer was dropped (its poll is 410 for good).
   * A request for review (reviewRequired) that finds its job held to run later (delayed) and not for
   * a person marks it so, held `delayMs` from now (`marked`): the same request sent first as one that
   * may wait must not keep a person from being told. A job running or answered is left as it is.
   */
  enqueue(payload: ColdPayload, options?: EnqueueOptions): Promise<EnqueueResult>;
  get(id: string): Promise<JobView | null>;
  counts(): Promise<QueueCounts>;
  /** Dead-lettered jobs (all attempts used). */
  deadLettered(limit?: number): Promise<JobView[]>;
  /** Moves a dead-lettered job back to the queue with fresh attempts. */
  retryDeadLettered(id: string): Promise<boolean>;
  close(): Promise<void>;
}

/**
 * A job's id: the tenant, the idempotency key and the request itself, hashed (keys may hold
 * characters BullMQ ids must not). The same request sent again finds its job; another request
 * never does, whatever key it shares (another tenant's, a key reused with a new body, or the
 * default key, which hashes the messages only): it would be handed someone else's answer.
 */
export function coldJobId(p: Pick<ColdPayload, 'customerId' | 'idempotencyKey' | 'api' | 'body'>): string {
  const identity = JSON.stringify([p.customerId, p.idempotencyKey, p.api ?? 'chat', canonicalJson(p.body)]);
  return `llm-${createHash('sha256').update(identity).digest('hex').slice(0, 40)}`;
}
/** The shape of every id coldJobId makes: anything else is not a job (and must not reach the store). */
export const COLD_JOB_ID = /^llm-[0-9a-f]{40}$/;

/** Test runs shorten the backoff and the bounds; everything else uses the constants above. */
export interface QueueOptions {
  backoffMs?: number;
  keepCompleted?: number;
  keepDead?: number;
  keepCompletedS?: number;
  keepDeadS?: number;
  sweepMs?: number;
}

/** A completed job's payload without its request body: nothing reads it again. */
export function answered(payload: ColdPayload): ColdPayload {
  return { ...payload, body: { model: payload.body.model, messages: [] }, asChat: undefined };
}

/**
 * What a worker runs for each job: its payload and its current deferral, to a result or an error;
 * with Redis, the run's call marks too (cold-call-marks.ts), and `ended`: the job was taken back
 * too often, so the run only meters the calls a killed run left, then ends the job with that error.
 */
export type Processor = (payload: ColdPayload, deferred: Deferral | null, marks?: RunMarks, ended?: string) => Promise<unknown>;

export interface WorkOptions {
  concurrency?: number;
  /** How long a running job's lock lasts unrenewed (a worker killed mid-job) before another worker takes it back; 30 s (tests shorten it). */
  lockMs?: number;
  /**
   * The longest one run of the processor lasts. With it (Redis), a job taken back while a run of it
   * goes on (its lock lapsed in a Redis outage) is not processed again (cold-run-claim.ts).
   */
  runMs?: number;
  onFailed?: (failure: JobFailure) => void;
  onError?: (error: Error) => void;
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

/**
 * The Cold worker: takes `llm-task` jobs and runs the Hot/Warm routing again for them (it never
 * re-enqueues). Attempts (5) count only real tries that say something about the job:
 * - while `pause_ai_tasks` is `1`, a job is not run: it is deferred, re-checked every 30 s (the flag
 *   read from Redis when the job is picked up; not answered within 2 s: the value last read);
 * - when no route can be called (every breaker open, or every route skipped), it is deferred to the
 *   earliest moment one can be probed; when its own calls failed and left every route open again
 *   (the outage goes on: those calls were the breakers' probes), likewise, a moment later, so that
 *   the jobs waiting behind it take that probe first;
 * - a provider over its token budget for this minute is skipped, as a live request's admission skips
 *   it; when that leaves no route, the job is deferred to the minute's end;
 * - a deferral is no attempt (DeferJob: BullMQ's moveToDelayed). Deferred for longer than 24 h in
 *   all, the job is dead-lettered and a person told.
 * Jobs already running when the pause is set finish. A job that used all its attempts is
 * dead-lettered (kept, visible, notified).
 *
 * A worker that stops lets its running jobs finish within a grace (a gateway's SIGTERM: the
 * requests' grace); a job still running then has its call cut, metered as a cut call is
 * (CLIENT_CLOSED, estimated: the provider got it), and is handed back at once without spending an
 * attempt, for another worker (rather than killed mid-call, unmetered, and taken back only once
 * its lock runs out).
 *
 * A worker killed mid-call all the same (kill -9, an OOM kill, a node lost) writes no meter event
 * for that call, which the provider bills: with Redis each call is marked while under way
 * (cold-call-marks.ts), and the run that takes the job back first meters each call so left, once,
 * as an estimate of its prompt (`WORKER_LOST|ESTIMATED`, no output, latency unknown: 0).
 */
import { UnrecoverableError } from 'bullmq';
import type { BudgetsSpent } from './admission';
import type { RequestContext } from './request-context';
import { CallPlanner } from './call-plan';
import { Cancel, type CancelSignal } from './cancel';
import { DeferJob, type ColdPayload, type Deferral } from './cold-queue';
import type { MemoryColdQueue } from './cold-queue-memory';
import type { BullColdQueue } from './cold-queue-redis';
import { Deadline } from './deadline';
import type { Failover } from './failover';
import type { Flags, FlagStore } from './flags';
import type { TokensKey } from './key-policy';
import { parseJson } from './json-object';
import type { Answer, ClientError, Exhausted } from './outcome';
import type { CallMeter } from './call-meter';
import { cutText } from '../../schema/cut-text';
import type { RunMarks } from './cold-call-marks';
import { refusalBody, wholeAnswer } from './relay';
import type { ResponseOwnership } from './responses/ownership';
import type { Route } from './route';
import type { Notifier } from './notify';
import { PAUSED_MESSAGE, type PauseFlag } from './budget';
import { NoAnswer, within } from './within';

/** Time a queued job may take per attempt (it has no caller waiting on it). */
const JOB_TIME_MS = 120_000;
/** What a run may take beyond its time per attempt (its meter event, its response's owner, the pause read). */
const RUN_MARGIN_MS = 30_000;
/** How long a job may wait for a route (or the pause) in all before it is dead-lettered. */
const MAX_DEFER_MS = 24 * 3600_000;
/** How often a deferred job looks again when nothing says when (the pause, every route skipped). */
const RECHECK_MS = 30_000;
/**
 * How long past the next probe a job whose own probes failed waits: jobs deferred to that probe (at
 * most 50 ms late, as the queues look for due jobs) take it first, so one request that always fails
 * cannot take every probe and keep every route open.
 */
const YIELD_PROBE_MS = 500;
/** How long a job waits for the pause read before it goes by the value last read (Redis away or stalled). */
const PAUSE_READ_MS = 2000;
/** How long a job's answer waits for its response's owner to be stored. */
const CLAIM_WAIT_MS = 2000;

export interface WorkerDeps {
  failover: Failover;
  pause: PauseFlag;
  flags: FlagStore;
  notifier: Notifier;
  /** Routes to avoid while paused (the capped provider's). */
  skipWhilePaused: (route: Route) => boolean;
  log: { info: (m: string) => void; warn: (m: string) => void };
  jobTimeMs?: number;
  /** Shortened by tests and the drill; MAX_DEFER_MS and RECHECK_MS otherwise. */
  maxDeferMs?: number;
  recheckMs?: number;
  /** A running job's lock (tests shorten it; BullMQ's 30 s otherwise). */
  lockMs?: number;
  /** Makes the answers of queued Responses requests their tenant's, for the jobs that ask for it (ownershipOf). */
  ownership?: ResponseOwnership;
  /** This process's own GATEWAY_AUTH is `keys`: what jobs queued before their payload said so follow. */
  ownsResponses?: boolean;
  /** Counts a job's answer's tokens against the `--tpm` of the key that queued it (absent: not counted). */
  onTokens?: (key: TokensKey | undefined, tokens: number) => void;
  /** Meters the calls a killed run left marked (absent: they are left). */
  meter?: CallMeter;
  /** The providers over their token budget for this minute (absent: no budgets). */
  budgetsSpent?: () => Promise<BudgetsSpent>;
}

/** The error_code of a call its worker was killed during (its run gone, no event written): billed, and estimated. */
const WORKER_LOST = 'WORKER_LOST';

/**
 * The calls a run killed mid-call left marked, each metered once with an estimate (taken off first,
 * so no other run meters them). A failure is said and the run goes on: its marks are then left, or
 * the events lost if they were taken.
 */
async function meterLost(payload: ColdPayload, marks: RunMarks, deps: WorkerDeps): Promise<void> {
  const meter = deps.meter;
  if (!meter) return;
  try {
    const lost = await marks.takeAbandoned();
    const ctx = { jobId: payload.jobId, customerId: payload.customerId };
    const events = lost.map((c) =>
      meter.record({
        ctx,
        provider: c.provider,
        model: c.model,
        region: c.region,
        route: c.route,
        latencyMs: 0,
        usage: { input_tokens: c.inputTokens, output_tokens: 0, ...(c.serviceTier ? { service_tier: c.serviceTier } : {}) },
        errorCode: WORKER_LOST,
        estimated: true,
        decision: 'n/a',
      }),
    );
    await Promise.all(events);
    if (lost.length)
      deps.log.warn(
        `job ${payload.jobId || '(no job id)'}: ${lost.length} call(s) of a run killed mid-call metered ${WORKER_LOST} (estimated)`,
      );
  } catch (error) {
    deps.log.warn(`job ${payload.jobId || '(no job id)'}: the calls of a killed run could not be metered: ${(error as Error).message}`);
  }
}

interface JobResult {
  status: number;
  tier: string;
  provider: string;
  model: string;
  attempts: number;
  body: unknown;
}

/** A DeferJob to `until`, or, past the deferral limit, the end of the job (dead-lettered, a person told). */
function defer(deferred: Deferral | null, until: number, reason: string, deps: WorkerDeps): Error {
  const limit = deps.maxDeferMs ?? MAX_DEFER_MS;
  const since = deferred ? Date.parse(deferred.since) : Date.now();
  if (until - since <= limit) return new DeferJob(until, reason);
  const hours = limit / 3600_000;
  return new UnrecoverableError(`no route could take it for ${hours >= 1 ? `${hours} h` : `${limit / 1000} s`} (${reason})`);
}

/**
 * When a route of this job may next be called, and why none can now. Only routes that serve the
 * job's API (and, for embeddings, its model) count: a route that cannot serve it (a reload left no
 * chat route, only embeddings) has a closed breaker, so the job was deferred to "now" again and
 * again, a loop that held the in-process worker's event loop (the gateway answered nothing, not even
 * SIGTERM) and, with Redis, ran the job round without end.
 */
function nextRoute(deps: WorkerDeps, flags: Flags, skip: (r: Route) => boolean, ctx: RequestContext): { at: number; reason: string } {
  const recheck = Date.now() + (deps.recheckMs ?? RECHECK_MS);
  const candidates = deps.failover.candidates(flags, skip);
  if (!candidates.length) return { at: recheck, reason: 'every route is switched off or skipped' };
  const planner = new CallPlanner(ctx);
  const routes = candidates.filter((r) => planner.planFor(r) !== null);
  if (!routes.length) return { at: recheck, reason: `no route of the routing map serves its API (${ctx.api}) or model` };
  const at = Math.min(...routes.map((r) => r.breaker.nextCallAt()));
  return { at, reason: `every route's breaker is open; next probe at ${new Date(at).toISOString()}` };
}

/**
 * A queued request is run whole: `stream` false where the client sent it, and no `stream_options`
 * (providers refuse them without a stream, and an embeddings body that never had `stream`).
 */
function wholeBody<B extends object>(body: B): B {
  const { stream_options: _options, ...rest } = body as B & { stream_options?: unknown; stream?: unknown };
  return ('stream' in rest ? { ...rest, stream: false } : rest) as unknown as B;
}

/**
 * The provider that keeps the state a queued Responses request continues (null: none), whose routes
 * alone can serve it (its tenant was checked when it was queued). Owners that cannot be read fail the
 * run, to be tried again; an owner gone since (expired), or a provider no route serves any more, ends
 * the job (dead-lettered, a person told).
 */
async function stateProvider(ctx: RequestContext, deps: WorkerDeps): Promise<string | null> {
  if (!deps.ownership || ctx.api !== 'responses') return null;
  const continued = await deps.ownership.check(ctx, CLAIM_WAIT_MS);
  const refusal = continued.refusal;
  if (refusal) throw refusal.lasting ? new UnrecoverableError(refusal.error.error.message) : new Error(refusal.error.error.message);
  return continued.provider;
}

/**
 * The pause as Redis has it now; if Redis does not answer in time (or fails), the value last read
 * (the copy kept fresh every 100 ms, set at once by this instance's webhook), as requests use: a job
 * is neither held by a stalled Redis nor failed by it.
 */
function pausedNow(pause: PauseFlag): Promise<boolean> {
  return within(pause.refresh(), PAUSE_READ_MS, 'the pause flag').catch(() => pause.paused());
}

/**
 * Response owners are checked and recorded for a job as the gateway that queued it did (client keys
 * or not), not as this worker's own GATEWAY_AUTH says: `npm run worker` is started without it, and
 * a worker that disagreed recorded no owner for a tenant's answer (its continuation then refused),
 * or looked for owners an open gateway never recorded (the job dead-lettered as not found).
 */
function ownershipOf(payload: ColdPayload, deps: WorkerDeps): ResponseOwnership | undefined {
  return (payload.ownedResponses ?? deps.ownsResponses) ? deps.ownership : undefined;
}

/** One run of one job: the routing again, a deferral, or an error that makes the queue retry it. */
async function runJob(
  payload: ColdPayload,
  deferred: Deferral | null,
  workerDeps: WorkerDeps,
  stopping: CancelSignal,
  marks?: RunMarks,
  ended?: string,
): Promise<JobResult> {
  const deps = { ...workerDeps, ownership: ownershipOf(payload, workerDeps) };
  if (marks) await meterLost(payload, marks, deps);
  if (ended) throw new UnrecoverableError(ended);
  if (await pausedNow(deps.pause)) throw defer(deferred, Date.now() + (deps.recheckMs ?? RECHECK_MS), PAUSED_MESSAGE, deps);
  const ctx = jobContext(payload, deps);
  const flags = deps.flags.get();
  const stateWith = await stateProvider(ctx, deps);
  const skipped = (r: Route) => (deps.pause.paused() && deps.skipWhilePaused(r)) || (stateWith !== null && r.config.provider !== stateWith);
  // A provider over its token budget for this minute is skipped, as by a live request's admission.
  const spent = await deps.budgetsSpent?.();
  const skip = spent?.providers.size ? (r: Route) => skipped(r) || spent.providers.has(r.config.provider) : skipped;
  if (spent && skip !== skipped && !deps.failover.candidates(flags, skip).length && deps.failover.candidates(flags, skipped).length)
    throw defer(deferred, spent.until, 'every provider it may use is over its token budget for this minute', deps);
  const deadline = new Deadline(ctx.timeToAnswerMs);
  const queuedAt = Date.parse(payload.enqueuedAt); // failures where routes answer others are the job's (failover.ts)
  // Each call may take half the job's time, not a live request's 30 s (a job queued because its answer
  // was slow would never complete), nor all of it (a Hot route that hangs would leave Warm no time).
  const attemptMs = ctx.timeToAnswerMs / 2;
  let outcome = await deps.failover.route(ctx, deadline, { flags, skip, queuedAt, signal: stopping, marks, attemptMs });
  // A route passed over because its fleet probe lease was still being asked for can be callable by
  // now: once more at once, so that an attempt is spent only when a route that could be called failed.
  if (outcome.kind === 'exhausted' && outcome.attempts > 0 && !stopping.aborted && nextRoute(deps, flags, skip, ctx).at <= Date.now()) {
    outcome = await deps.failover.route(ctx, deadline, {
      flags,
      skip,
      queuedAt,
      signal: stopping,
      priorAttempts: outcome.attempts,
      marks,
      attemptMs,
    });
  }
  if (outcome.kind === 'exhausted') throw notAnswered(outcome, deferred, deps, { flags, skip, stopping, ctx });
  return jobResult(outcome, ctx, deps, payload.tokensKey);
}

/** The request a queued job runs: whole, with the job's time per attempt, an answer a must. */
function jobContext(payload: ColdPayload, deps: WorkerDeps): RequestContext {
  return {
    api: payload.api ?? 'chat',
    asChat: payload.asChat,
    body: wholeBody(payload.body),
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
}

/** What ends a run no route answered: handed back (the worker stops), a deferral, or a spent attempt. */
function notAnswered(
  outcome: Exhausted,
  deferred: Deferral | null,
  deps: WorkerDeps,
  run: { flags: Flags; skip: (r: Route) => boolean; stopping: CancelSignal; ctx: RequestContext },
): Error {
  if (run.stopping.aborted) return new DeferJob(Date.now(), HANDED_BACK);
  const next = nextRoute(deps, run.flags, run.skip, run.ctx);
  // No call made: no attempt spent.
  if (outcome.attempts === 0) return defer(deferred, next.at, next.reason, deps);
  // Its calls were the probes and left every route open (the outage goes on): no attempt spent, and
  // the next probe goes to a job queued behind it, which may succeed where this one fails.
  if (next.at > Date.now()) return defer(deferred, next.at + YIELD_PROBE_MS, next.reason, deps);
  return new Error(`no route answered (${outcome.lastError ?? outcome.reason})`);
}

/** The job's result from a provider's answer (its event on disk first), or the end of a job the provider refused. */
async function jobResult(outcome: Answer | ClientError, ctx: RequestContext, deps: WorkerDeps, key?: TokensKey): Promise<JobResult> {
  let text = outcome.upstream.body?.toString('utf8') ?? '';
  let body: unknown;
  if (outcome.kind === 'answer') {
    const whole = wholeAnswer(outcome);
    outcome.settle({ ok: true, usage: whole.usage });
    if (whole.usage) deps.onTokens?.(key, whole.usage.input_tokens + whole.usage.output_tokens);
    text = whole.body.toString();
    body = parseJson(text);
    // The response's owner stored before the client can read its id from the job.
    const owned =
      outcome.of.api === 'responses' ? deps.ownership?.claim(ctx, outcome.route.config.provider, body, CLAIM_WAIT_MS) : undefined;
    await outcome.durable; // the call's event on disk before the job completes with its answer
    if (owned) await owned;
  } else body = parseJson(text);
  body ??= text; // not JSON: the text as it came
  // A request the provider refuses as malformed will not heal with retries.
  if (outcome.kind === 'client_error')
    throw new UnrecoverableError(
      `provider refused the request: HTTP ${outcome.upstream.status} ${cutText(refusalBody(outcome).toString(), 300)}`,
    );
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
  /** Takes no more jobs; running ones finish within `graceMs` (default: however long they take), then are cut and handed back. */
  close(graceMs?: number): Promise<void>;
}

const HANDED_BACK = 'its worker stopped during the call: handed back for another worker';
/** How long past the grace a stopping worker waits for its cut jobs to be handed back and its connections closed. */
const CLOSE_MARGIN_MS = 2000;

/** Socket errors of a Redis that is away (each reconnection attempt raises one). */
const CONNECTION_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EPIPE',
  'ENOTFOUND',
  'EAI_AGAIN',
]);
const lostConnection = (error: Error) =>
  CONNECTION_CODES.has((error as NodeJS.ErrnoException).code ?? '') ||
  error.message === 'Connection is closed.' ||
  error.message.startsWith('Socket timeout.'); // a link given up as dead (stores.ts)

/** The worker over either queue (BullMQ's Worker in Redis, or the in-process one): same jobs, same notices. */
export function startWorker(queue: BullColdQueue | MemoryColdQueue, deps: WorkerDeps, concurrency = 4): ColdWorker {
  const stopping = new Cancel();
  const work = queue.work((payload, deferred, marks, ended) => runJob(payload, deferred, deps, stopping, marks, ended), {
    concurrency,
    lockMs: deps.lockMs,
    runMs: (deps.jobTimeMs ?? JOB_TIME_MS) + RUN_MARGIN_MS,
    onFailed: ({ id, payload, attemptsMade, error, dead }) => {
      deps.log.warn(`job ${id} attempt ${attemptsMade} failed: ${error.message}${dead ? ' (dead-lettered)' : ''}`);
      if (dead)
        deps.notifier.notify({ kind: 'dead_lettered', jobIds: [id], tenant: payload.customerId, detail: `last error: ${error.message}` });
    },
    // A lost connection is said once by the shared one (stores.ts); BullMQ's own connections report every attempt.
    onError: (error) => (lostConnection(error) ? undefined : deps.log.warn(`worker: ${error.message}`)),
  });
  let closing: Promise<void> | null = null;
  return {
    close(graceMs = Infinity) {
      if (closing) return closing;
      if (!Number.isFinite(graceMs)) return (closing = work.close());
      const cut = setTimeout(() => stopping.abort(), graceMs);
      // BullMQ's close waits on Redis (the cut job handed back, its connections closed): a Redis that
      // is connected but stalls would hold the stop for ever. Left after the grace and a margin; its
      // jobs are taken back by another worker once their locks lapse.
      closing = within(work.close(), graceMs + CLOSE_MARGIN_MS)
        .catch((error: unknown) => {
          if (!(error instanceof NoAnswer)) throw error;
          deps.log.warn(`worker: not closed ${CLOSE_MARGIN_MS} ms after the grace (Redis not answering?); left as it was`);
        })
        .finally(() => clearTimeout(cut));
      return closing;
    },
  };
}

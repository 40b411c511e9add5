/**
 * The Cold tier and the budget endpoints, mounted on the gateway:
 * - the Cold fallback: when no Hot or Warm route answered (or the time-to-answer leaves no room),
 *   the request is queued and the client gets `202 {"status":"queued","jobId"}` in time (a streamed
 *   request gets the same object as its one event, see `sendQueued`);
 * - `GET /v1/jobs/:id`: the job's state, attempts, last error, and its result once completed; with
 *   client keys, only to the tenant that queued it (another tenant's job is answered as absent);
 * - `POST /budget/webhook` and `POST /budget/resume` (operator token).
 */
import type express from 'express';
import type { OutgoingHttpHeaders, ServerResponse } from 'node:http';
import { BudgetWebhook, type PauseFlag } from './budget';
import { COLD_JOB_ID, QueueFull, type ColdPayload, type ColdQueue, type EnqueueResult } from './cold-queue';
import { openAiError } from './errors';
import { sendBody, sendJson } from './http-io';
import type { FlagStore } from './flags';
import { clientKeyOf } from './key-guard';
import type { Notifier } from './notify';
import { NONE_CALLED } from './outcome';
import type { ColdFallback, QueueReason, Queued } from './pipeline';
import type { RequestContext } from './request-context';
import { routeHeaders } from './route-headers';
import { serialize } from './sse';
import { RepeatLog } from './repeat-log';
import { NoAnswer, within } from './within';

export interface ColdTierDeps {
  queue: ColdQueue;
  pause: PauseFlag;
  flags: FlagStore;
  notifier: Notifier;
  cappedProvider: string;
  /** The providers of the routes in force (a reload may change them), to name a webhook's unknown one. */
  providers: () => string[];
  pauseAtPercent: number;
  log: { info: (m: string) => void; warn: (m: string) => void; error: (m: string) => void };
  /** How long a job's reader may take nothing before it is cut (default STALL_MS; tests shorten it). */
  stallMs?: number;
}

function coldPayload(ctx: RequestContext, reason: string, reviewRequired = false): ColdPayload {
  return {
    api: ctx.api,
    body: ctx.body,
    asChat: ctx.asChat,
    idempotencyKey: ctx.idempotencyKey,
    userId: ctx.userId,
    jobId: ctx.jobId,
    customerId: ctx.customerId,
    tokensKey: ctx.clientKey?.tpm ? { id: ctx.clientKey.id, tpm: ctx.clientKey.tpm } : undefined,
    ownedResponses: ctx.clientKey !== undefined, // every /v1 request has one with GATEWAY_AUTH=keys, none without
    jobType: ctx.jobType,
    reason,
    reviewRequired,
    enqueuedAt: new Date().toISOString(),
  };
}

/**
 * The failover's reserve for this answer: a queue slower than that, with no time left, is
 * unreachable. A job added after all is taken out again, unless a retry found it first (its id comes
 * from the idempotency key): see told.
 */
const ENQUEUE_FLOOR_MS = 25;
/** How long the budget endpoints wait for the pause flag's store before answering 503. */
const PAUSE_STORE_WAIT_MS = 2000;
/** How long a job's poll waits for the queue's store: a Redis away or stalled gets a 503 to retry, not a hang or a 500. */
const JOB_READ_MS = 2000;

/**
 * A person is told of a new job when it is made, and of a job found that this request put in a
 * person's hands (marked). One made after its client was told 503 (Redis
 * answered past the time-to-answer) is taken out again (EnqueueOptions.signal), and not told of,
 * unless the client's retry found it meanwhile or a worker took it: then it runs, and no later
 * moment would tell anyone.
 */
function told(deps: ColdTierDeps, ctx: RequestContext, why: QueueReason, job: EnqueueResult): EnqueueResult {
  if (job.created || job.marked) {
    const kind = (job.heldForReview ?? why.reviewRequired) ? 'human_review' : 'enqueued';
    deps.notifier.notify({ kind, jobIds: [job.jobId], tenant: ctx.customerId || undefined, detail: `reason: ${why.reason}` });
  }
  return job;
}

/**
 * The request's job id once its job is in the queue (`jobId`): whether this call made it (for the
 * notice) is found out after (`enqueued`).
 */
function inQueue(deps: ColdTierDeps, ctx: RequestContext, why: QueueReason, signal: AbortSignal) {
  const held = (heldForReview: boolean | undefined) => heldForReview ?? why.reviewRequired === true;
  let added!: (jobId: string, heldForReview?: boolean) => void;
  const inQueue = new Promise<{ jobId: string; held: boolean }>((resolve) => (added = (jobId, h) => resolve({ jobId, held: held(h) })));
  const payload = coldPayload(ctx, why.reason, why.reviewRequired);
  const enqueued = deps.queue.enqueue(payload, { delayMs: why.delayMs, added, signal }).then((job) => told(deps, ctx, why, job));
  return { jobId: Promise.race([inQueue, enqueued.then((job) => ({ jobId: job.jobId, held: held(job.heldForReview) }))]), enqueued };
}

/**
 * A 503 the `openai` SDKs must not retry by themselves (they retry a 5xx twice, 0.5 s and 1 s apart):
 * a retry would run the whole failover again, against providers that have just failed every attempt,
 * or meet a queue that only a person can switch on.
 */
const NO_RETRY = { 'x-should-retry': 'false' };

/**
 * The Cold fallback: queues the request and answers 202; 503 when the queue is switched off or
 * unreachable. A queue unreachable when no provider was called (spend-cap routing queued the request;
 * every route was switched off, or skipped for its open breaker) asks for a retry in 1 s: Redis is
 * back within seconds, and the retry calls no provider. After routes were called and failed, the
 * SDKs are told not to retry (NO_RETRY).
 */
export function coldFallback(deps: ColdTierDeps): ColdFallback {
  // Every request that would be queued meets a queue away or full: not a line each.
  const refusals = new RepeatLog();
  const late = new RepeatLog();
  return {
    async queue(ctx: RequestContext, res: ServerResponse, why: QueueReason): Promise<Queued | false> {
      const headers = routeHeaders('cold', 'queue', ctx.body.model, why.attempts);
      if (!deps.flags.get().enable_cold_queue) {
        const error = openAiError(
          `${whyQueued(why)}, and the Cold queue is switched off (enable_cold_queue)`,
          'upstream_error',
          null,
          'cold_queue_disabled',
        );
        // Only a person can switch it on: the SDKs' retries (two, within 2 s) would run the failover again for nothing.
        sendJson(res, 503, error, { ...headers, ...NO_RETRY });
        return false;
      }
      // Aborted once the client is told 503: a job added after that is taken out again.
      const answered = new AbortController();
      const job = inQueue(deps, ctx, why, answered.signal);
      try {
        const { jobId, held } = await within(job.jobId, Math.max(why.timeLeftMs, ENQUEUE_FLOOR_MS), 'the Cold queue');
        sendQueued(res, ctx, jobId, why, headers);
        return { heldForReview: held };
      } catch (error) {
        answered.abort();
        if (error instanceof NoAnswer)
          void job.enqueued.then(
            (j) => j.withdrawn && notKept(deps, j.jobId, late),
            () => undefined,
          );
        if (error instanceof QueueFull) {
          refuseFull(deps, ctx, res, why, error, headers, refusals);
          return false;
        }
        const more = refusals.due('unreachable');
        if (more !== null) deps.log.error(`cold queue unreachable: ${(error as Error).message}${more}`);
        sendJson(
          res,
          503,
          openAiError(`${whyQueued(why)}, and the Cold queue is unreachable`, 'upstream_error', null, 'cold_queue_unavailable'),
          { ...headers, ...(why.attempts > 0 ? NO_RETRY : { 'retry-after': '1' }) },
        );
        return false;
      }
    },
  };
}

/** The queue answered after its client was told 503, and the job was not kept: said once a minute at most. */
function notKept(deps: ColdTierDeps, jobId: string, repeats: RepeatLog): void {
  const more = repeats.due('late');
  if (more !== null) deps.log.warn(`cold queue answered after its client was told 503: job ${jobId} not kept${more}`);
}

/** How long a client refused by a full queue is asked to wait: the queue drains only once a provider is back. */
const FULL_RETRY_S = 30;

/** A request the queue has no room for: 503 `cold_queue_full`, and a person told (coalesced as every notice). */
function refuseFull(
  deps: ColdTierDeps,
  ctx: RequestContext,
  res: ServerResponse,
  why: QueueReason,
  full: QueueFull,
  headers: OutgoingHttpHeaders,
  refusals: RepeatLog,
): void {
  const more = refusals.due('full');
  if (more !== null) deps.log.error(`cold queue full: ${full.message}${more}`);
  deps.notifier.notify({ kind: 'queue_full', tenant: ctx.customerId || undefined, detail: full.message });
  const message = `${whyQueued(why)}, and the Cold queue is full: try again later`;
  sendJson(res, 503, openAiError(message, 'upstream_error', null, 'cold_queue_full'), {
    ...headers,
    'retry-after': String(FULL_RETRY_S),
  });
}

/**
 * Why a request went to the Cold tier, as its client is told: spend-cap routing queues requests no
 * route failed, and "no route answered" sent their readers looking for an outage; so did a request
 * no route was even called for (the operator's switches).
 */
function whyQueued({ reason, switchedOff }: Pick<QueueReason, 'reason' | 'switchedOff'>): string {
  if (reason === 'queue') return 'a spend cap is exceeded and the request may wait (x-must-have-answer: false)';
  if (reason === 'human_review') return 'a spend cap is exceeded: a person reviews the request first';
  if (reason === 'time_to_answer') return 'no route answered in time';
  return switchedOff ? NONE_CALLED : 'no route answered';
}

/**
 * `202 {"status":"queued","jobId"}`. A client that asked for a stream reads the answer as events
 * (the `openai` SDKs do, whatever its type): a JSON body would be an empty stream that ends without
 * an error, the job id unread. So it gets the same object as one event, with an `error` an SDK
 * raises (code `queued`), naming the job. On `/v1/responses` that event is also a Responses
 * `error` event (`type`, `code`, `message`, `sequence_number`), which clients that read the
 * stream by event type (as OpenAI's docs show) act on, and ignore when it has none.
 */
function sendQueued(res: ServerResponse, ctx: RequestContext, jobId: string, why: QueueReason, headers: OutgoingHttpHeaders): void {
  const queued = { status: 'queued', jobId };
  if (!ctx.stream) return sendJson(res, 202, queued, headers);
  const message = `${whyQueued(why)}; queued as job ${jobId}; GET /v1/jobs/${jobId} has its answer once done`;
  const error = openAiError(message, 'upstream_error', null, 'queued');
  const event =
    ctx.api === 'responses'
      ? {
          event: 'error',
          data: JSON.stringify({ type: 'error', code: 'queued', message, param: null, sequence_number: 0, ...queued, ...error }),
        }
      : { data: JSON.stringify({ ...queued, ...error }) };
  headers['cache-control'] = 'no-cache';
  sendBody(res, 202, serialize(event), 'text/event-stream; charset=utf-8', headers);
}

export function mountColdTier(app: express.Express, admin: express.RequestHandler, deps: ColdTierDeps): void {
  // Clients poll their jobs: with the queue away, not a line per poll.
  const unread = new RepeatLog();
  app.get('/v1/jobs/:id', async (req, res) => {
    const id = String(req.params.id);
    if (!COLD_JOB_ID.test(id)) {
      const message = `id: expected a job id as the gateway returns it ("llm-" and 40 hex digits), got "${id.slice(0, 80)}"`;
      res.status(400).json(openAiError(message, 'invalid_request_error', 'id', 'invalid_job_id'));
      return;
    }
    const job = await within(deps.queue.get(id), JOB_READ_MS, 'the Cold queue').catch((error: Error) => {
      const more = unread.due('get');
      if (more !== null) deps.log.warn(`job ${id} not read: ${error.message}${more}`);
      return undefined;
    });
    if (job === undefined) {
      const error = openAiError('the Cold queue is unreachable: try again', 'api_error', null, 'cold_queue_unavailable');
      res.status(503).set('retry-after', '1').json(error);
      return;
    }
    const key = clientKeyOf(res);
    // Another tenant's job is answered as absent: its existence is not theirs to learn.
    if (!job || (key && job.customerId !== key.tenant)) {
      res.status(404).json(openAiError(`no job ${id}`, 'invalid_request_error', 'id', 'job_not_found'));
      return;
    }
    if (job.answerDropped) {
      const message = `job ${id} completed at ${job.finishedAt}, but its answer is no longer kept: the in-process queue drops the oldest answers past its memory limit; send the request again to run it again`;
      res.status(410).json(openAiError(message, 'invalid_request_error', 'id', 'job_answer_dropped'));
      return;
    }
    // A result is a whole answer (up to the provider's answer limit): in pieces, and a client that
    // stops reading is cut, as on the OpenAI endpoints, not held in memory while it keeps the connection.
    sendBody(res, 200, JSON.stringify(job), 'application/json; charset=utf-8', {}, deps.stallMs);
  });

  // A sender repeats its alert: the unknown name is said once a minute, not per post.
  const unknown = new RepeatLog();
  app.post('/budget/webhook', admin, async (req, res) => {
    const parsed = BudgetWebhook.safeParse(req.body);
    if (!parsed.success) {
      const i = parsed.error.issues[0];
      res
        .status(400)
        .json({ error: `${i.path.join('.') || 'body'}: ${i.message}`, expected: '{"provider": string, "percentUsed": number}' });
      return;
    }
    const { provider, percentUsed } = parsed.data;
    if (!deps.providers().includes(provider)) warnUnknownProvider(deps, provider, unknown);
    if (provider === deps.cappedProvider && percentUsed >= deps.pauseAtPercent) {
      const setting = deps.pause.set();
      // Noticed when the store takes it, also if that is after this answer (Redis away).
      void setting.then((newly) => (newly ? noticePaused(deps, provider, percentUsed) : undefined)).catch(() => undefined);
      if (!(await stored(setting, res, 'set on this instance'))) return;
    }
    res.status(204).end();
  });

  app.post('/budget/resume', admin, async (_req, res) => {
    // Said from the clear itself: "lifted" for a store that was not paused (another database than the
    // paused fleet's) sent the operator away sure the queue was running again.
    const resuming = deps.pause
      .clear()
      .then((was) => deps.log.warn(was ? 'budget pause lifted' : 'budget resume: not paused (pause_ai_tasks was not set), nothing lifted'));
    if (!(await stored(resuming, res, 'lifted on this instance'))) return;
    res.status(204).end();
  });
}

/**
 * The sender still gets 204 (the docs promise it whether or not it pauses), but the operator is told:
 * `OpenAI` from a billing alert where the map says `openai` paused nothing, with nothing said.
 * Names are matched exactly, as everywhere else in the map (token budgets, CAPPED_PROVIDER).
 */
function warnUnknownProvider(deps: ColdTierDeps, provider: string, repeats: RepeatLog): void {
  const more = repeats.due('unknown provider');
  if (more === null) return;
  const name = JSON.stringify(provider.slice(0, 80));
  const known = deps.providers().join(', ');
  deps.log.warn(
    `budget webhook for provider ${name}, which the routing map has no route of (${known}): nothing paused; the budget pause is for ${deps.cappedProvider}${more}`,
  );
}

/** The pause's notice, with the queue's counts when the store gives them in time. */
async function noticePaused(deps: ColdTierDeps, provider: string, percentUsed: number): Promise<void> {
  deps.log.warn(`budget pause: ${provider} at ${percentUsed}% (threshold ${deps.pauseAtPercent}%)`);
  const counts = await within(deps.queue.counts(), PAUSE_STORE_WAIT_MS).catch(() => null);
  deps.notifier.notify({
    kind: 'paused',
    detail: `${provider} budget at ${percentUsed}% (pause at ${deps.pauseAtPercent}%).${counts ? ` Queue: ${counts.waiting} waiting, ${counts.delayed} delayed, ${counts.active} running (they finish).` : ''}`,
  });
}

/**
 * The pause flag's write, waited for at most PAUSE_STORE_WAIT_MS: Redis away holds it until Redis
 * is back (it is applied then), and the sender is told 503 meanwhile, so it sends again; false then.
 * A write Redis refuses is not in force anywhere, and the sender is told so.
 */
async function stored(write: Promise<unknown>, res: express.Response, here: string): Promise<boolean> {
  const error = await within(write, PAUSE_STORE_WAIT_MS, 'the store').then(
    () => null,
    (e: Error) => e,
  );
  if (!error) return true;
  const text =
    error instanceof NoAnswer
      ? `pause_ai_tasks: ${here}, but the store did not answer within ${PAUSE_STORE_WAIT_MS / 1000} s, so other instances may not have it yet (it is written once the store is back); send again`
      : `pause_ai_tasks: not set: the store refused it (${error.message}); send again once it takes writes`;
  res.status(503).set('retry-after', '1').json({ error: text });
  return false;
}

/**
 * The request pipeline every endpoint shares: admission (rate limits, spend-cap routing) → the
 * routing over the Hot and Warm tiers → the scope's fallback variant → the Cold fallback; an
 * answer is relayed (whole or streamed) and then settled (breaker, health, meter event). An
 * endpoint only reads and checks its body into a RequestContext and hands it here. A request that
 * sent an Idempotency-Key goes through idempotent replay first (idempotent-replay.ts).
 */
import type { ServerResponse } from 'node:http';
import { rejection, type Admission, type Admit } from './admission';
import { BodyQueue } from './body-queue';
import { Cancel } from './cancel';
import type { CallMeter } from './call-meter';
import { Deadline, type Clock } from './deadline';
import { refuse } from './refusal';
import { InFlight } from './in-flight';
import { openAiError } from './errors';
import type { Failover } from './failover';
import type { IdempotentReplay, ReplayRequest, Served } from './idempotent-replay';
import type { FlagStore } from './flags';
import { sendBody, sendJson } from './http-io';
import { parseJson } from './json-object';
import type { GatewayMetrics } from './metrics';
import { NONE_CALLED, type Answer, type Exhausted, type Outcome } from './outcome';
import type { Usage } from './providers/adapter';
import type { RequestContext } from './request-context';
import type { Route } from './route';
import { routeHeaders, withRequestId } from './route-headers';
import { fallbackVariant, scopeOf, type Scopes } from './scopes';
import { refusalBody, streamTransform, wholeAnswer } from './relay';
import { relaySse } from './sse';
import { estimateUsage } from './cut-estimate';
import type { ResponseOwnership } from './responses/ownership';

/** Why a request goes to the Cold queue, and how. */
export interface QueueReason {
  reason: string;
  attempts: number;
  /** What is left of the time-to-answer: the queue must answer within it. */
  timeLeftMs: number;
  delayMs?: number;
  reviewRequired?: boolean;
  /** Every route was switched off (Exhausted.switchedOff). */
  switchedOff?: boolean;
}

/**
 * A request queued (202). Whether its job is held for a person, as the queue said: a job found
 * (the same request sent before) keeps its own hold, or is put in a person's hands by this one.
 */
export interface Queued {
  heldForReview: boolean;
}

/** The Cold tier as the pipeline sees it: queue the request and answer the client (202, or 503). */
export interface ColdFallback {
  /** Queued (202); false when refused (503: the queue switched off, full or unreachable). */
  queue(ctx: RequestContext, res: ServerResponse, why: QueueReason): Promise<Queued | false>;
}

export interface PipelineDeps {
  failover: Failover;
  metrics: GatewayMetrics;
  meter: CallMeter;
  scopes: Scopes;
  flags: FlagStore;
  admit?: Admit;
  /** null: no Cold tier, an exhausted request answers 503 (or 504 when time ran out). */
  cold?: ColdFallback | null;
  /** Routes live requests must avoid now (the capped provider's while the budget pause is on). */
  skipRoute?: (route: Route) => boolean;
  now?: Clock;
  /** The tokens an answer used, once relayed (the client key's tokens per minute). */
  onTokens?: (ctx: RequestContext, tokens: number) => void;
  /** Idempotent replay (null: requests with an Idempotency-Key run every time). */
  replay?: IdempotentReplay | null;
  /** Which tenant owns each stored response (null: any caller may continue any response). */
  ownership?: ResponseOwnership | null;
}

/**
 * The owners' store is waited for at most this long (a whole answer: less when its time-to-answer
 * leaves less; a stream's end: this), as the replay store is: a Redis away or stalled must not hold
 * every Responses request for its whole time.
 */
const OWNER_WAIT_MS = 1000;

const ROUTE_ALL: Extract<Admission, { kind: 'route' }> = { kind: 'route', decision: 'default' };

/**
 * Whether a content type is JSON as OpenAI's SDKs tell it (`application/json`, or any `+json`): they
 * read a body of any other type as text, and `create` returned a provider's JSON labelled
 * `text/plain` (or a proxy's `text/html`) as a string. A whole 2xx answer is a JSON object by then
 * (failover.ts), so it goes out as one.
 */
function isJsonType(type: string): boolean {
  if (type.startsWith('application/json')) return true;
  const media = type.split(';')[0].trim().toLowerCase();
  return media.includes('application/json') || media.endsWith('+json');
}

/** Whether a stream's provider was cut for sending nothing past the idle limit (upstream.ts). */
const cutIdle = (answer: Answer) => answer.upstream.rest instanceof BodyQueue && answer.upstream.rest.silent;

/** What a client whose stream a stop cut reads in the stream's error event. */
const STOPPED = 'the gateway is shutting down: the stream was cut before it finished; send the request again';

export class Pipeline {
  /** Requests under way: a stop waits for them (a request cut at shutdown meters its call at its end). */
  private readonly inFlight = new InFlight();
  /** The streams being relayed, by their cancel: a stop at the end of its grace cuts them (cutStreams). */
  private readonly streams = new Set<Cancel>();
  private stopped = false;
  constructor(private readonly deps: PipelineDeps) {}

  /**
   * The end of a stop's grace: each stream still relayed is cut as its client going away would cut
   * it (the provider's call cancelled, metered CLIENT_CLOSED), and ends with its error event saying
   * why, where closing its connection left the client unable to tell a stop from a network failure.
   */
  cutStreams(): number {
    this.stopped = true;
    const cut = this.streams.size;
    for (const gone of this.streams) gone.abort();
    return cut;
  }

  /**
   * `replay`: the request's replay identity when it sent an Idempotency-Key. `spentMs`: what the
   * request already waited (its client key's lookup), taken from its time-to-answer.
   */
  handle(ctx: RequestContext, res: ServerResponse, replay?: ReplayRequest | null, spentMs = 0): Promise<void | Served> {
    // Started before the replay's claim: the time it waits for the store is part of the time-to-answer.
    const deadline = new Deadline(ctx.timeToAnswerMs - spentMs, this.deps.now);
    const work: Promise<void | Served> =
      replay && this.deps.replay
        ? this.deps.replay.guard(replay, ctx, res, deadline, () => this.serve(ctx, res, deadline))
        : this.serve(ctx, res, deadline);
    return this.inFlight.track(work);
  }

  /** Resolves once no request is under way, or after `ms`; true when none is. */
  idle(ms: number): Promise<boolean> {
    return this.inFlight.idle(ms);
  }

  private async serve(ctx: RequestContext, res: ServerResponse, deadline: Deadline): Promise<Served> {
    const gone = new Cancel();
    // A client gone during the steps before (its key's lookup, the replay claim) closed already.
    if (res.closed && !res.writableFinished) gone.abort();
    else
      res.on('close', () => {
        if (!res.writableFinished) gone.abort();
      });
    // The provider that keeps the state a Responses request continues: no other can serve it.
    let stateWith: string | null = null;
    if (ctx.api === 'responses' && this.deps.ownership) {
      const continued = await this.deps.ownership.check(ctx, Math.min(OWNER_WAIT_MS, deadline.storeWaitMs()));
      if (continued.refusal) {
        refuse(this.deps.metrics, res, continued.refusal.status, continued.refusal.error, continued.refusal.headers); // before admission: no tier
        // Before admission (no --rpm counted): kept, a client could fill the store with a day's refusals,
        // and a follow-up sent before its response was answered would be refused again for a day.
        return 'refused';
      }
      stateWith = continued.provider;
    }
    const admitted = this.deps.admit ? this.deps.admit(ctx) : ROUTE_ALL;
    const admission = admitted instanceof Promise ? await admitted : admitted;
    if (admission.kind !== 'route' || !admission.held) return this.admitted(ctx, res, deadline, gone, admission, stateWith);
    // What the call holds against the spend caps is given back however the request ends.
    try {
      return await this.admitted(ctx, res, deadline, gone, admission, stateWith);
    } finally {
      admission.release?.(admission.held);
    }
  }

  /** An admitted request: refused, queued, or routed and answered. */
  private async admitted(
    ctx: RequestContext,
    res: ServerResponse,
    deadline: Deadline,
    gone: Cancel,
    admission: Admission,
    stateWith: string | null,
  ): Promise<Served> {
    if (admission.kind === 'reject') {
      const refused = rejection(admission);
      refuse(this.deps.metrics, res, refused.status, refused.error, refused.headers);
      return 'complete';
    }
    if (admission.kind === 'queue' && this.deps.cold) {
      // Gone while admission decided: it would never read the job id (as fallBack's client_closed).
      if (gone.aborted) {
        this.deps.metrics.countRequest('none', 'client_closed');
        return 'broken';
      }
      const { decision, delayMs, reviewRequired } = admission;
      this.deps.metrics.countRequest('cold', decision); // as fallBack counts its own: answered by the Cold tier
      const why = { reason: decision, attempts: 0, timeLeftMs: deadline.remaining(), delayMs, reviewRequired };
      // Metered once queued: a request the queue refused (503) was neither queued nor given to a
      // person. As what its job is: one found (the request sent before) may be held for a person or not.
      const queued = await this.deps.cold.queue(ctx, res, why);
      // Recorded before the request ends: one waiting on the queue's later commands after the 202
      // was lost by a stop meanwhile (a Redis that stalls), the request ended and the process gone.
      if (queued)
        this.deps.meter.record({
          ctx,
          provider: 'queue',
          model: ctx.body.model,
          latencyMs: 0,
          usage: null,
          errorCode: '',
          decision: queued.heldForReview ? 'human_review' : 'queue',
          reviewRequired: queued.heldForReview,
        });
      return 'complete';
    }
    // A queue decision with no queue plugged in is routed as usual.
    const outcome = await this.route(ctx, deadline, gone, admission.kind === 'route' ? admission : ROUTE_ALL, stateWith);
    if (outcome.kind === 'exhausted') {
      await this.fallBack(ctx, outcome, res, deadline);
      return outcome.reason === 'client_closed' ? 'broken' : 'complete'; // nothing answered: no replay kept
    }
    this.deps.metrics.countRequest(outcome.route.tier, outcome.upstream.status);
    const route = routeHeaders(outcome.route.tier, outcome.route.config.provider, outcome.model, outcome.attempts);
    const headers = withRequestId(route, outcome.upstream.headers);
    if (outcome.kind === 'answer' && outcome.upstream.rest) return this.relayStream(outcome, res, headers, gone);
    const type = outcome.upstream.headers['content-type'];
    const contentType = typeof type === 'string' ? type : 'application/json';
    if (outcome.kind === 'client_error') {
      sendBody(res, outcome.upstream.status, refusalBody(outcome), contentType, headers);
      return 'complete';
    }
    const whole = wholeAnswer(outcome);
    // Its event durable before the answer is released, within the time-to-answer: a stalled Redis
    // leaves it to this process's spool rather than holding the answer.
    outcome.settle({ ok: true, usage: whole.usage, waitMs: deadline.storeWaitMs() });
    this.spent(ctx, whole.usage);
    // A native response's owner stored before its id is out: a follow-up naming it may come at once.
    const owned =
      outcome.of.api === 'responses'
        ? this.deps.ownership?.claim(
            ctx,
            outcome.route.config.provider,
            parseJson(whole.body.toString()),
            Math.min(OWNER_WAIT_MS, deadline.storeWaitMs()),
          )
        : undefined;
    await outcome.durable;
    if (owned) await owned;
    const json = typeof whole.body === 'string' || !isJsonType(contentType) ? 'application/json' : contentType;
    sendBody(res, outcome.upstream.status, whole.body, json, headers);
    return 'complete';
  }

  /** Hot → Warm, then once more with the scope's fallback variant (smaller or shorter) in the time left. */
  private async route(
    ctx: RequestContext,
    deadline: Deadline,
    signal: Cancel,
    admission: Extract<Admission, { kind: 'route' }>,
    stateWith: string | null = null,
  ): Promise<Outcome> {
    const { skipProviders, decision, model } = admission;
    const skipRoute = this.deps.skipRoute;
    const skip =
      skipRoute || skipProviders?.size || stateWith !== null
        ? (r: Route) =>
            (skipRoute?.(r) ?? false) ||
            (skipProviders?.has(r.config.provider) ?? false) ||
            (stateWith !== null && r.config.provider !== stateWith)
        : undefined;
    // Both passes on the routes in force when the request started (a reload does not move it).
    // Written out, not spread: `{ ...options, flags }` made an object of a new shape on every
    // request, and every read of it missed V8's caches.
    const set = this.deps.failover.current;
    const first = await this.deps.failover.route(ctx, deadline, { signal, skip, model, decision, set, flags: this.deps.flags.get() });
    const variant =
      first.kind === 'exhausted' && first.reason === 'all_failed'
        ? fallbackVariant(scopeOf(this.deps.scopes, ctx.jobType), ctx.body)
        : null;
    if (!variant || first.kind !== 'exhausted') return first;
    const second = await this.deps.failover.route({ ...ctx, body: variant.body }, deadline, {
      signal,
      skip,
      set,
      flags: this.deps.flags.get(),
      model: variant.model ?? model,
      decision: 'fallback_variant',
      priorAttempts: first.attempts,
    });
    if (second.kind !== 'exhausted') return second;
    // A second pass that called no route (its model killed) keeps what the first one found: that
    // routes were called, and how the last call failed.
    return {
      ...second,
      lastError: second.lastError ?? first.lastError,
      switchedOff: first.switchedOff === true && second.switchedOff === true,
    };
  }

  /**
   * No route answered: the Cold queue when there is one, else 503 (no route) or 504 (time ran out).
   * Not for a client that went away: it would never read the job id, and the job would spend on an
   * answer nobody waits for, with a notice to a person about it.
   */
  private async fallBack(ctx: RequestContext, outcome: Exhausted, res: ServerResponse, deadline: Deadline): Promise<void> {
    if (outcome.reason === 'client_closed') {
      this.deps.metrics.countRequest('none', 'client_closed');
      this.spent(ctx, outcome.estimate ?? null); // a call the provider received is billed all the same
      return;
    }
    this.deps.metrics.countRequest('cold', 'fallback');
    const why = { reason: outcome.reason, attempts: outcome.attempts, timeLeftMs: deadline.remaining(), switchedOff: outcome.switchedOff };
    if (this.deps.cold) {
      await this.deps.cold.queue(ctx, res, why);
      return;
    }
    const timeUp = outcome.reason === 'time_to_answer';
    const message = timeUp
      ? 'no route answered within the time-to-answer'
      : outcome.switchedOff
        ? NONE_CALLED
        : `no route answered (${outcome.lastError ?? 'all routes skipped'})`;
    const error = openAiError(message, 'upstream_error', null, timeUp ? 'time_to_answer' : 'all_routes_failed');
    sendJson(res, timeUp ? 504 : 503, error, routeHeaders('cold', 'none', 'none', outcome.attempts));
  }

  /**
   * A stream cut by the provider counts against the route; one our client hung up on does not. One
   * cut on our side (the client gone, given up as too large, its provider silent past the idle limit)
   * before the provider reported its usage is billed all the same: metered with an estimate, marked
   * ESTIMATED (cut-estimate.ts).
   */
  private async relayStream(answer: Answer, res: ServerResponse, headers: Record<string, unknown>, gone: Cancel): Promise<Served> {
    headers['content-type'] = 'text/event-stream; charset=utf-8';
    headers['cache-control'] = 'no-cache';
    const started = performance.now();
    this.streams.add(gone);
    try {
      // Sent with the first event (relaySse): one write, not two, per stream started.
      res.writeHead(answer.upstream.status, headers as Record<string, string>);
      // Settled before the stream's end is sent: the call's event is on disk when the client sees the end.
      let usage: Usage | null = null;
      // A native Responses stream's owner claims (with client keys); none made for any other stream.
      const ownership = answer.of.api === 'responses' ? this.deps.ownership : null;
      const claims: Array<Promise<void>> | null = ownership ? [] : null;
      const claim = ownership
        ? (response: unknown) => claims!.push(ownership.claim(answer.of.ctx, answer.route.config.provider, response, OWNER_WAIT_MS))
        : undefined;
      const relay = await relaySse(
        answer.upstream.first!,
        answer.upstream.rest!,
        res,
        streamTransform(answer, claim),
        undefined,
        (r) => {
          // A client that hung up after the provider reported the failure left a failed stream, not a
          // healthy one it gave up on: the openai SDKs hang up as soon as they raise the error.
          const code = !r.broken ? '' : gone.aborted && !r.failed ? 'CLIENT_CLOSED' : (r.tooLarge ?? 'STREAM_INTERRUPTED');
          // Its provider cut by our idle limit is a cut on our side too, as a call our timer cut (failover.ts).
          const estimated = r.broken && !r.usage && (gone.aborted || r.tooLarge !== null || cutIdle(answer));
          usage = estimated ? estimateUsage(answer.of.ctx.body, r.text, answer.of.api === answer.of.ctx.api) : r.usage;
          answer.settle({ ok: !r.broken, usage, code, relayMs: performance.now() - started, estimated });
          return claims?.length ? Promise.all([answer.durable, ...claims]).then(() => undefined) : answer.durable;
        },
        this.why,
      );
      this.spent(answer.of.ctx, usage);
      // A client gone before the end did not get what was written after it (a translation's closing
      // events): kept for replay, that half would be every repeat's answer.
      return relay.broken || relay.unsent ? 'broken' : 'complete';
    } finally {
      this.streams.delete(gone);
      // Whatever went wrong on the way, the call is settled once (a stream's breaker ticket, a
      // half-open probe among them, is released only here; settling twice does nothing).
      answer.settle({ ok: false, usage: null, code: gone.aborted ? 'CLIENT_CLOSED' : 'STREAM_INTERRUPTED' });
    }
  }

  private readonly why = () => (this.stopped ? STOPPED : undefined);

  private spent(ctx: RequestContext, usage: Usage | null): void {
    if (usage && this.deps.onTokens) this.deps.onTokens(ctx, usage.input_tokens + usage.output_tokens);
  }
}

/**
 * Routing order for one request: each Hot route in order, then each Warm route, skipping routes
 * whose breaker is open; each route called with retries; the first success answers. Everything
 * fits inside the request's time-to-answer.
 *
 * What counts as a failure (retries, breaker, next route): network errors, timeouts, 408, 429,
 * 5xx, and 401/403 (a revoked key; not retried on the same route, where it cannot heal in
 * milliseconds, but the next route is tried). A request the provider rejects as malformed (400,
 * 404, 413, 422 and other 4xx) goes back to the client as it is, without trying other routes:
 * another provider would reject it too, and each try costs.
 *
 * The routes and their keys come as one set that a reload of the routing map replaces (`use`); a
 * request routes over the set it started with to its end.
 */
import type { CallMeter } from './call-meter';
import type { CallMarker } from './cold-call-marks';
import { answerError, firstEventError } from './chat-stream-error';
import { estimateUsage } from './cut-estimate';
import { CallPlanner, type CallPlan } from './call-plan';
import type { CancelSignal } from './cancel';
import { Deadline, sleep, type Clock } from './deadline';
import { allowedBy, type Flags, type FlagStore } from './flags';
import type { KeyFor } from './keys';
import type { GatewayMetrics } from './metrics';
import { Answer, type Outcome } from './outcome';
import type { ApiKind, RequestContext } from './request-context';
import { backoffMs, RETRY, retryAfterMs } from './retry';
import type { Route } from './route';
import type { RouteConfig } from './routes-map';
import type { Usage } from './providers/adapter';
import { callUpstream, UpstreamError, type UpstreamAnswer } from './upstream';

/** Below this much time left, an attempt cannot answer in time: fall back instead. */
const MIN_ATTEMPT_MS = 50;
/** Kept back from every attempt so the Cold fallback still fits in the time-to-answer. */
const FALLBACK_RESERVE_MS = 25;
/** A live request's cap on each provider call (a queued job's is its own: RouteOptions.attemptMs). */
const ATTEMPT_TIMEOUT_MS = 30_000;

/** The routes of one routing map, with the provider keys that map assigns. */
export interface RouteSet {
  routes: Route[];
  keyFor: KeyFor;
}

export interface FailoverDeps extends RouteSet {
  meter: CallMeter;
  metrics?: GatewayMetrics;
  now?: Clock;
  random?: () => number;
  /** The flags in force now: a model killed while a request is under way is not called by it after. */
  flags?: Pick<FlagStore, 'get'>;
  /** The cap on each provider call unless the request has its own: ATTEMPT_TIMEOUT_MS (tests shorten it). */
  attemptMs?: number;
}

export interface RouteOptions {
  flags: Flags;
  signal?: CancelSignal;
  skip?: (route: Route) => boolean;
  /** Another model on the same routes (spend-cap routing's cheaper model, a scope's smaller one). */
  model?: string;
  /** The spend-cap routing decision, carried into the meter events. */
  decision?: string;
  /** Calls already made for this request (a second pass counts on from the first). */
  priorAttempts?: number;
  /** The route set to use (a second pass uses the first one's); default the current one. */
  set?: RouteSet;
  /**
   * A Cold job's: when it was queued. Its failure on a route that has answered a call since then
   * is the job's own (its request fails where others succeed), not the route's: it leaves the
   * breaker as it was, so a request that always fails cannot hold a route open for everyone.
   */
  queuedAt?: number;
  /** A Cold job's run: each call is marked in Redis while under way, until its meter event is durable (cold-call-marks.ts). */
  marks?: CallMarker;
  /** A Cold job's run: its cap on each provider call, longer than a live request's (no caller is waiting on it). */
  attemptMs?: number;
}

/** A call no mark stands for (a live request's): its meter event needs no one told. */
const unmarked = (_durable: Promise<void>): void => undefined;

/** A Cold job's failure on a route that has answered a call since it was queued is its own (`queuedAt`). */
const jobsOwn = (route: Route, queuedAt: number | undefined) => queuedAt !== undefined && route.breaker.answeredSince(queuedAt);

/**
 * A timeout the caller's own short time-to-answer made (the attempt had less time than the route's
 * slowest recent answer took) is the request's, not the route's: it goes on to the next route but
 * leaves the breaker as it was, so one tenant's short deadlines cannot open a route for everyone.
 * With no calls to go by, or time enough given, a timeout counts (a provider that hangs opens).
 */
const callersOwn = (route: Route, r: CallResult) =>
  r.code === 'TIMEOUT' && r.allowedMs !== undefined && r.allowedMs < (route.health.usualMs() ?? 0);

/** A failure that is the job's or the caller's own, not the route's. */
const notTheRoutes = (route: Route, r: CallResult, queuedAt: number | undefined) => jobsOwn(route, queuedAt) || callersOwn(route, r);

/** What an attempt needs from the request beyond the call itself. */
interface AttemptOf {
  keyFor: KeyFor;
  signal?: CancelSignal;
  attemptMs: number;
}

/**
 * `cancelled`: our client went away during the call; neither a success nor a failure of the route.
 * `allowedMs`: the time a call that failed without an answer was given.
 */
type CallResult = {
  kind: 'ok' | 'client_error' | 'failure' | 'cancelled';
  answer?: UpstreamAnswer;
  error?: UpstreamError;
  code: string;
  allowedMs?: number;
};

/**
 * A 2xx answer to a streamed request that is not an event stream (a provider that ignores
 * `stream: true`, or a proxy's page) cannot be relayed as one: a failure of the route, not retried
 * there (it would answer the same way), so the next route streams instead.
 */
const NOT_A_STREAM = 'NOT_A_STREAM';

/**
 * A whole chat answer whose body reports an error (OpenRouter's `200` with the model's failure in
 * it): the route did not answer, so the request is tried again and elsewhere, as after a 5xx.
 * Relayed as a success, it would have been kept for replay and scored as a working route.
 */
const PROVIDER_ERROR = 'PROVIDER_ERROR';

/**
 * A whole 2xx answer that is no JSON object (a proxy's or captive portal's HTML page, an empty body):
 * no client of an OpenAI API could read it. A failure of the route, not retried there (it would
 * answer the same way), and nothing in it to meter.
 */
const NOT_JSON = 'NOT_JSON';

/** Whether a body starts as a JSON object does (after white space, and a byte-order mark a client's decoder drops): one byte read, not a parse. */
function startsAsObject(body: Buffer): boolean {
  let i = body[0] === 0xef && body[1] === 0xbb && body[2] === 0xbf ? 3 : 0;
  while (body[i] === 0x20 || body[i] === 0x0a || body[i] === 0x0d || body[i] === 0x09) i++;
  return body[i] === 0x7b;
}

/** Codes of a 2xx answer counted as a failure: the provider may have billed it, so its usage is metered. */
const billedFailure = (code: string) => code === NOT_A_STREAM || code === PROVIDER_ERROR;

function classifyAnswer(answer: UpstreamAnswer, stream: boolean, api: ApiKind): CallResult {
  const s = answer.status;
  if (s >= 200 && s < 300) {
    if (stream && !answer.rest) return { kind: 'failure', answer, code: NOT_A_STREAM };
    if (answer.rest) return api === 'chat' ? firstEventFailed(answer) : { kind: 'ok', answer, code: '' };
    if (!answer.rest && !startsAsObject(answer.body!)) return { kind: 'failure', answer, code: NOT_JSON };
    // Not for a native Response: its `error` is part of the object (null, or why it failed).
    if (api !== 'responses' && !answer.rest && answerError(answer.body!) !== null) return { kind: 'failure', answer, code: PROVIDER_ERROR };
    return { kind: 'ok', answer, code: '' };
  }
  if (s === 408 || s === 429 || s >= 500 || s === 401 || s === 403) return { kind: 'failure', answer, code: String(s) };
  return { kind: 'client_error', answer, code: String(s) };
}

/**
 * A chat stream whose first event reports an error failed before the client saw anything: as a
 * whole answer reporting one, a failure of the route (its usage read from that event), the rest of
 * the stream given up.
 */
function firstEventFailed(answer: UpstreamAnswer): CallResult {
  const event = firstEventError(answer.first!);
  if (event === null) return { kind: 'ok', answer, code: '' };
  void answer.rest!.return?.();
  const { status, headers, latencyMs } = answer;
  return { kind: 'failure', answer: { status, headers, body: event, latencyMs }, code: PROVIDER_ERROR };
}

/** What the client's 503 says of a route whose 2xx answer failed. */
const FAILED_2XX: Record<string, string> = {
  [NOT_A_STREAM]: 'not an event stream',
  [PROVIDER_ERROR]: 'reported an error in its answer',
  [NOT_JSON]: 'answered with something that is not JSON',
};

/** A streamed answer: scored when the stream ends (Answer.settle), not at its first byte. */
const streamed = (r: CallResult) => r.answer?.rest !== undefined;

const metricOutcome = (r: CallResult) =>
  r.kind === 'ok' ? 'ok' : r.kind === 'client_error' ? 'client_error' : /^\d+$/.test(r.code) ? `http_${r.code}` : r.code.toLowerCase();

export class Failover {
  private set: RouteSet;
  private readonly now: Clock;
  private readonly attemptMs: number;
  constructor(private readonly deps: FailoverDeps) {
    this.set = { routes: deps.routes, keyFor: deps.keyFor };
    this.now = deps.now ?? Date.now;
    this.attemptMs = deps.attemptMs ?? ATTEMPT_TIMEOUT_MS;
  }

  /** The routes in force now. */
  get routes(): Route[] {
    return this.set.routes;
  }

  /** The route set in force now (a request keeps it for all its passes). */
  get current(): RouteSet {
    return this.set;
  }

  /** Puts another route set in force (a reload of the routing map); requests under way keep theirs. */
  use(set: RouteSet): void {
    this.set = set;
  }

  /** The routes this request may use, in order, after flags and the caller's filter (`model`: the one the calls name instead of the route's). */
  candidates(flags: Flags, skip?: (route: Route) => boolean, set = this.set, model?: string): Route[] {
    return set.routes.filter((r) => allowedBy(flags, r, model) && !(skip && skip(r)));
  }

  private async attempt(route: Route, config: RouteConfig, ctx: RequestContext, plan: CallPlan, deadline: Deadline, o: AttemptOf) {
    const out = route.adapter.request(config, plan.api, plan.body, o.keyFor(route.tier, config.provider), ctx.idempotencyKey);
    const signal = o.signal;
    const timeoutMs = Math.min(o.attemptMs, deadline.remaining() - FALLBACK_RESERVE_MS);
    try {
      return classifyAnswer(await callUpstream(out, { timeoutMs, signal, stream: ctx.stream }), ctx.stream, plan.api);
    } catch (error) {
      if (error instanceof UpstreamError)
        return {
          kind: error.code === 'CLIENT_CLOSED' ? 'cancelled' : 'failure',
          error,
          code: error.code,
          allowedMs: timeoutMs,
        } as CallResult;
      throw error;
    }
  }

  /** Tries the routes in order until one answers, or time or routes run out. */
  async route(ctx: RequestContext, deadline: Deadline, options: RouteOptions): Promise<Outcome> {
    let attempts = options.priorAttempts ?? 0;
    let lastError: string | null = null;
    /** A route passed over for its breaker: not every one switched off. */
    let notSwitchedOff = false;
    const planner = new CallPlanner(ctx);
    const set = options.set ?? this.set;
    const of: AttemptOf = { keyFor: set.keyFor, signal: options.signal, attemptMs: options.attemptMs ?? this.attemptMs };
    for (const route of this.candidates(options.flags, options.skip, set, options.model)) {
      const config = options.model ? { ...route.config, model: options.model } : route.config;
      const plan = planner.planFor(route, config.model);
      if (!plan) continue; // this route cannot serve this request's API or model: neither called nor switched off
      for (let n = 1; n <= RETRY.attempts; n++) {
        if (options.signal?.aborted) return { kind: 'exhausted', attempts, reason: 'client_closed', lastError: 'client went away' };
        if (deadline.remaining() < MIN_ATTEMPT_MS + FALLBACK_RESERVE_MS)
          return { kind: 'exhausted', attempts, reason: 'time_to_answer', lastError };
        // Asked again before each call: a budget pause or a kill-switch set since the routes were
        // listed (while an earlier route or attempt was under way) holds from now on.
        if (options.skip?.(route) || !this.allowedNow(route, options)) break;
        const ticket = route.breaker.tryAcquire();
        if (!ticket) {
          notSwitchedOff = true; // open (or a probe already in flight): skipped without a call
          break;
        }
        attempts++;
        // A translated request goes without its service_tier: its estimates are at the standard tier.
        const tierSent = plan.api === ctx.api;
        const estimate = options.marks ? estimateUsage(ctx.body, undefined, tierSent) : undefined;
        const mark = estimate
          ? await options.marks!.begin({
              route: route.label,
              provider: config.provider,
              model: config.model,
              region: config.region,
              inputTokens: estimate.input_tokens,
              serviceTier: estimate.service_tier,
              at: Date.now(),
            })
          : undefined;
        // A live request's calls are not marked: no closure made for them (the hot path).
        const metered = mark === undefined ? unmarked : (durable: Promise<void>) => options.marks!.end(mark, durable);
        const started = this.now();
        const call = route.breaker.run(
          ticket,
          () => this.attempt(route, config, ctx, plan, deadline, of),
          (r) => r.kind === 'failure' && !notTheRoutes(route, r, options.queuedAt),
          (r) => r.kind === 'cancelled' || (r.kind === 'failure' && notTheRoutes(route, r, options.queuedAt)),
          ctx.stream ? streamed : undefined,
        );
        const result = await (mark === undefined
          ? call
          : call.catch((error: unknown) => {
              metered(Promise.resolve()); // not a call left by a killed run: its mark goes (the error goes on as before)
              throw error;
            }));
        const latency = result.answer?.latencyMs ?? this.now() - started;
        // A whole answer to a stream, or one reporting an error, was billed all the same: its usage is
        // metered. One timed out on our side once the provider had it is billed too: an estimate.
        const usage = billedFailure(result.code) ? route.adapter.usage(result.answer!.body!, ctx.api) : null;
        const cutOff = result.kind === 'failure' && result.error?.received === true;
        const failedUsage = cutOff ? estimateUsage(ctx.body, result.error!.generated, tierSent) : usage;
        const failed = (code: string) =>
          metered(this.meterFailure(ctx, route.label, config, latency, code, options.decision, failedUsage, cutOff));
        if (result.kind === 'cancelled') {
          this.deps.metrics?.countCall(route.label, 'client_closed', latency / 1000);
          // Received by the provider, it is billed all the same (the prompt at least): an estimate,
          // marked ESTIMATED (cut-estimate.ts). A call it never received cost nothing.
          const estimate = result.error!.received ? estimateUsage(ctx.body, result.error!.generated, tierSent) : undefined;
          metered(
            this.meterFailure(ctx, route.label, config, latency, result.code, options.decision, estimate ?? null, estimate !== undefined),
          );
          return { kind: 'exhausted', attempts, reason: 'client_closed', lastError: 'client went away', estimate };
        }
        // A stream is counted when it ends (Answer.settle): by its first byte it has not yet succeeded.
        if (!streamed(result)) {
          if (!(result.kind === 'failure' && callersOwn(route, result))) route.health.record(result.kind !== 'failure');
          this.deps.metrics?.countCall(route.label, metricOutcome(result), latency / 1000);
        }
        if (result.kind === 'ok') {
          route.health.answeredIn(latency);
          return new Answer(route, config.model, attempts, result.answer!, ticket, {
            ctx,
            api: plan.api,
            meter: this.deps.meter,
            decision: options.decision ?? 'n/a',
            metrics: this.deps.metrics,
            onMetered: mark === undefined ? undefined : metered,
          });
        }
        failed(result.code);
        if (result.kind === 'client_error')
          return { kind: 'client_error', route, model: config.model, attempts, upstream: result.answer!, ctx, api: plan.api };
        lastError = `${route.label}: ${result.error ? result.error.message : (FAILED_2XX[result.code] ?? `HTTP ${result.code}`)}`;
        const wait = this.retryWait(result, n, ticket.probe, deadline);
        if (wait === null) break;
        await sleep(wait, options.signal);
      }
    }
    // The routes ran out; if the time did too, that is what the client is told (504, not 503).
    const timeUp = attempts > 0 && deadline.remaining() < MIN_ATTEMPT_MS + FALLBACK_RESERVE_MS;
    // Switched off: no route was called nor passed over for its breaker, and some route of the set
    // serves this request (its API, and for embeddings its model), so the switches took each one. A
    // route that cannot serve it (an embeddings route, to a chat request) takes no part: it is no switch.
    const switchedOff =
      attempts === (options.priorAttempts ?? 0) &&
      !notSwitchedOff &&
      set.routes.some((r) => planner.planFor(r, options.model ?? r.config.model) !== null);
    return { kind: 'exhausted', attempts, reason: timeUp ? 'time_to_answer' : 'all_failed', lastError, switchedOff };
  }

  /** Whether the flags in force now (not those the request started with) let this call go. */
  private allowedNow(route: Route, options: RouteOptions): boolean {
    const now = this.deps.flags?.get();
    return !now || now === options.flags || allowedBy(now, route, options.model);
  }

  /** How long to wait before retrying the same route; null to move on to the next route now. */
  private retryWait(result: CallResult, n: number, probe: boolean, deadline: Deadline): number | null {
    const status = result.answer?.status;
    // An answer too large would be as large again, and each try downloads it to the limit.
    const same = result.code === NOT_A_STREAM || result.code === NOT_JSON || result.code === 'ANSWER_TOO_LARGE';
    // A call that ran out of its time is not tried again on its route: a route that hangs would
    // take the time the next route needs (a queued job's call may take half of the job's).
    if (probe || status === 401 || status === 403 || same || result.code === 'TIMEOUT' || n === RETRY.attempts) return null;
    const wait = retryAfterMs(result.answer?.headers['retry-after'], Date.now()) ?? backoffMs(n, this.deps.random);
    // Wait only if an attempt still fits afterwards.
    return wait > deadline.remaining() - MIN_ATTEMPT_MS - FALLBACK_RESERVE_MS ? null : wait;
  }

  /** `route`: the route's id, which the metrics and /health name it by. */
  private meterFailure(
    ctx: RequestContext,
    route: string,
    config: RouteConfig,
    latencyMs: number,
    code: string,
    decision?: string,
    usage: Usage | null = null,
    estimated = false,
  ): Promise<void> {
    return this.deps.meter.record({
      ctx,
      provider: config.provider,
      model: config.model,
      region: config.region,
      route,
      latencyMs,
      usage,
      errorCode: code,
      estimated,
      decision,
    });
  }

  shutdown(): void {
    for (const r of this.set.routes) r.breaker.shutdown();
  }
}

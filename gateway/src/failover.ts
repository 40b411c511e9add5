/**
 * Routing order for one request (Document 1): each Hot route in order, then each Warm route,
 * skipping routes whose breaker is open; each route called with retries; the first success
 * answers. Everything fits inside the request's time-to-answer.
 *
 * What counts as a failure (retries, breaker, next route): network errors, timeouts, 408, 429,
 * 5xx, and 401/403 (a revoked key; not retried on the same route, where it cannot heal in
 * milliseconds, but the next route is tried). A request the provider rejects as malformed (400,
 * 404, 413, 422 and other 4xx) goes back to the client as it is, without trying other routes:
 * another provider would reject it too, and each try costs.
 */
import { randomUUID } from 'node:crypto';
import type { EventRecord } from '../../schema/event-record';
import { Breaker, type Ticket } from './breaker';
import type { CancelSignal } from './cancel';
import type { ChatContext } from './chat-request';
import { Deadline, sleep, type Clock } from './deadline';
import type { KeyFor } from './keys';
import type { GatewayMetrics } from './metrics';
import { costUsd } from './pricing';
import { adapterFor, type ProviderAdapter, type Usage } from './providers/adapter';
import { backoffMs, RETRY, retryAfterMs } from './retry';
import { RouteHealth } from './route-health';
import type { RouteConfig, RoutesMapConfig } from './routes-map';
import { callUpstream, UpstreamError, type UpstreamAnswer } from './upstream';
import type { Flags } from './flags';

/** Below this much time left, an attempt cannot answer in time: degrade instead. */
const MIN_ATTEMPT_MS = 50;
/** Kept back from every attempt so the degrade path (Cold) still fits in the time-to-answer. */
const DEGRADE_RESERVE_MS = 25;
const ATTEMPT_TIMEOUT_MS = 30_000;

export type Tier = 'hot' | 'warm';

export class Route {
  readonly label: string;
  readonly breaker: Breaker;
  readonly health = new RouteHealth();
  readonly adapter: ProviderAdapter;
  constructor(
    readonly tier: Tier,
    readonly config: RouteConfig,
    breakerOptions: ConstructorParameters<typeof Breaker>[1],
  ) {
    this.label = `${tier}:${config.provider}:${config.model}`;
    this.breaker = new Breaker(this.label, breakerOptions);
    this.adapter = adapterFor(config.provider);
  }
}

export type Outcome =
  | { kind: 'answer'; route: Route; model: string; attempts: number; upstream: UpstreamAnswer; ticket: Ticket }
  | { kind: 'client_error'; route: Route; model: string; attempts: number; upstream: UpstreamAnswer }
  | { kind: 'exhausted'; attempts: number; reason: 'all_failed' | 'time_to_answer'; lastError: string | null };

export interface FailoverDeps {
  map: RoutesMapConfig;
  keyFor: KeyFor;
  meter: (event: EventRecord) => void;
  metrics?: GatewayMetrics;
  warn: (message: string) => void;
  now?: Clock;
  breaker?: { failureThreshold?: number; openMs?: number; probesToClose?: number };
  random?: () => number;
}

/** `cancelled`: our client went away during the call; neither a success nor a failure of the route. */
type CallResult = { kind: 'ok' | 'client_error' | 'failure' | 'cancelled'; answer?: UpstreamAnswer; error?: UpstreamError; code: string };

function classify(answer: UpstreamAnswer): CallResult {
  const s = answer.status;
  if (s >= 200 && s < 300) return { kind: 'ok', answer, code: '' };
  if (s === 408 || s === 429 || s >= 500 || s === 401 || s === 403) return { kind: 'failure', answer, code: String(s) };
  return { kind: 'client_error', answer, code: String(s) };
}

export class Failover {
  readonly routes: Route[];
  private readonly now: Clock;
  constructor(private readonly deps: FailoverDeps) {
    this.now = deps.now ?? Date.now;
    const opts = { ...deps.breaker, now: this.now };
    this.routes = [...deps.map.hot.map((r) => new Route('hot', r, opts)), ...deps.map.warm.map((r) => new Route('warm', r, opts))];
  }

  /** The routes this request may use, in order, after flags and the caller's filter. */
  candidates(flags: Flags, skip?: (route: Route) => boolean): Route[] {
    return this.routes.filter(
      (r) => (r.tier === 'hot' || flags.enable_warm_fallback) && !flags.killed_models.includes(r.config.model) && !(skip && skip(r)),
    );
  }

  /** One meter event per provider call, success or failure (Document 2's record). */
  meterEvent(
    ctx: ChatContext,
    route: Pick<RouteConfig, 'provider' | 'model' | 'region'>,
    latencyMs: number,
    usage: Usage | null,
    errorCode: string,
    decision = 'n/a',
    reviewRequired = false,
  ): void {
    const cost = usage ? costUsd(route.provider, route.model, usage, this.deps.warn) : 0;
    this.deps.meter({
      event_id: randomUUID(),
      timestamp: new Date(),
      actor_type: 'agent',
      provider: route.provider,
      model: route.model,
      region: route.region ?? 'n/a',
      input_tokens: usage?.input_tokens ?? 0,
      output_tokens: usage?.output_tokens ?? 0,
      latency_ms: Math.round(latencyMs),
      cost_usd: cost,
      eval_score: null,
      confidence: null,
      job_id: ctx.jobId,
      customer_id: ctx.customerId,
      pii_flag: false,
      review_required: reviewRequired,
      reviewer_id: '',
      decision,
      error_code: errorCode,
    });
  }

  private async attempt(
    route: Route,
    config: RouteConfig,
    ctx: ChatContext,
    body: Record<string, unknown>,
    deadline: Deadline,
    signal: CancelSignal | undefined,
  ): Promise<CallResult> {
    const out = route.adapter.request(config, body, this.deps.keyFor(route.tier, config.provider), ctx.idempotencyKey);
    const timeoutMs = Math.min(ATTEMPT_TIMEOUT_MS, deadline.remaining() - DEGRADE_RESERVE_MS);
    try {
      return classify(await callUpstream(out, { timeoutMs, signal, stream: ctx.stream }));
    } catch (error) {
      if (error instanceof UpstreamError)
        return { kind: error.code === 'CLIENT_CLOSED' ? 'cancelled' : 'failure', error, code: error.code };
      throw error;
    }
  }

  /** Tries the routes in order until one answers, or time or routes run out. */
  async route(
    ctx: ChatContext,
    deadline: Deadline,
    options: { signal?: CancelSignal; flags: Flags; skip?: (route: Route) => boolean; model?: string; decision?: string },
  ): Promise<Outcome> {
    let attempts = 0;
    let lastError: string | null = null;
    const body: Record<string, unknown> = { ...ctx.body };
    if (ctx.stream) body.stream_options = { ...(ctx.body.stream_options ?? {}), include_usage: true };
    for (const route of this.candidates(options.flags, options.skip)) {
      // Degraded routing may ask for another (cheaper or smaller) model on the same routes.
      const config = options.model ? { ...route.config, model: options.model } : route.config;
      for (let n = 1; n <= RETRY.attempts; n++) {
        if (options.signal?.aborted) return { kind: 'exhausted', attempts, reason: 'all_failed', lastError: 'client went away' };
        if (deadline.remaining() < MIN_ATTEMPT_MS + DEGRADE_RESERVE_MS)
          return { kind: 'exhausted', attempts, reason: 'time_to_answer', lastError };
        const ticket = route.breaker.tryAcquire();
        if (!ticket) break; // open (or a probe already in flight): skipped without a call
        attempts++;
        const started = this.now();
        const result = await route.breaker.run(
          ticket,
          () => this.attempt(route, config, ctx, body, deadline, options.signal),
          (r) => r.kind === 'failure',
          (r) => r.kind === 'cancelled',
        );
        const latency = result.answer?.latencyMs ?? this.now() - started;
        if (result.kind === 'cancelled') {
          this.deps.metrics?.countCall(route.label, 'client_closed', latency / 1000);
          this.meterEvent(ctx, config, latency, null, result.code, options.decision);
          return { kind: 'exhausted', attempts, reason: 'all_failed', lastError: 'client went away' };
        }
        route.health.record(result.kind !== 'failure');
        this.deps.metrics?.countCall(
          route.label,
          result.kind === 'ok'
            ? 'ok'
            : result.kind === 'client_error'
              ? 'client_error'
              : result.error
                ? result.code.toLowerCase()
                : `http_${result.code}`,
          latency / 1000,
        );
        if (result.kind === 'ok') {
          // Streams are metered when they end (their usage comes last).
          if (!ctx.stream) this.meterEvent(ctx, config, latency, this.usageOf(route, result.answer!), '', options.decision);
          return { kind: 'answer', route, model: config.model, attempts, upstream: result.answer!, ticket };
        }
        this.meterEvent(ctx, config, latency, null, result.code, options.decision);
        if (result.kind === 'client_error') return { kind: 'client_error', route, model: config.model, attempts, upstream: result.answer! };
        lastError = `${route.label}: ${result.error ? result.error.message : `HTTP ${result.code}`}`;
        const status = result.answer?.status;
        if (ticket.probe || status === 401 || status === 403 || n === RETRY.attempts) break;
        const hinted = retryAfterMs(result.answer?.headers['retry-after'], Date.now());
        const wait = hinted ?? backoffMs(n, this.deps.random);
        // Wait only if an attempt still fits afterwards; otherwise move on to the next route now.
        if (wait > deadline.remaining() - MIN_ATTEMPT_MS - DEGRADE_RESERVE_MS) break;
        await sleep(wait, options.signal);
      }
    }
    return { kind: 'exhausted', attempts, reason: 'all_failed', lastError };
  }

  usageOf(route: Route, answer: UpstreamAnswer): Usage | null {
    return answer.body ? route.adapter.usage(answer.body) : null;
  }

  /** Metrics are made after the routes (they report on the breakers). */
  attachMetrics(metrics: GatewayMetrics): void {
    this.deps.metrics = metrics;
  }

  shutdown(): void {
    for (const r of this.routes) r.breaker.shutdown();
  }
}

/**
 * POST /v1/chat/completions: admission (rate limits, degraded routing), the Hot → Warm routing,
 * the scope's degrade pass, then the Cold tier; the answer relayed as the provider gave it.
 *
 * This is the gateway's hot path, so it runs on plain node:http request/response objects: the
 * server hands this exact path straight here, without Express's router walk, its req/res
 * prototype swap and its body parser (together about a third of the gateway's CPU per request
 * in `npm run bench:gateway`). Express still serves it (same handler) when the URL carries a
 * query string, and serves every other endpoint.
 */
import type { IncomingMessage, OutgoingHttpHeaders, ServerResponse } from 'node:http';
import type { Logger } from 'pino';
import { Cancel } from './cancel';
import { parseChatRequest, type ChatContext } from './chat-request';
import { Deadline, type Clock } from './deadline';
import { openAiError } from './errors';
import type { Failover, Outcome, Route } from './failover';
import type { FlagStore } from './flags';
import { readJsonBody, sendBody, sendJson } from './http-io';
import type { GatewayMetrics } from './metrics';
import { degradeVariant, type Scopes } from './scopes';
import { relaySse } from './sse';

/** What happens to a request before routing: refused (rate limit), queued (degraded), or routed. */
export type Admission =
  | { kind: 'reject'; status: number; retryAfterS: number; message: string; code: string }
  | { kind: 'queue'; delayMs: number; reviewRequired: boolean; decision: string }
  | { kind: 'route'; model?: string; decision: string; skipProviders?: Set<string> };

/** What the gateway does when no Hot or Warm route answered (the Cold tier plugs in here). */
export type Degrade = (
  ctx: ChatContext,
  outcome: Extract<Outcome, { kind: 'exhausted' }>,
  deadline: Deadline,
  res: ServerResponse,
) => Promise<void>;

export interface ChatEndpointDeps {
  failover: Failover;
  metrics: GatewayMetrics;
  scopes: Scopes;
  flags: FlagStore;
  log: Logger;
  now?: Clock;
  degrade?: Degrade;
  admit?: (ctx: ChatContext) => Admission | Promise<Admission>;
  enqueue?: (ctx: ChatContext, res: ServerResponse, admission: Extract<Admission, { kind: 'queue' }>) => Promise<void>;
  skipRoute?: (route: Route) => boolean;
}

/** The contract's response headers: which tier, provider and model answered, after how many calls. */
export function routeHeaders(tier: string, provider: string, model: string, attempts: number): OutgoingHttpHeaders {
  return { 'x-route-tier': tier, 'x-route-provider': provider, 'x-route-model': model, 'x-route-attempts': String(attempts) };
}

const ROUTE_ALL: Extract<Admission, { kind: 'route' }> = { kind: 'route', decision: 'default' };

/** 503 (no route answered) or 504 (time-to-answer used up), when no Cold tier is plugged in. */
const answerUnavailable: Degrade = async (_ctx, outcome, _deadline, res) => {
  const timeUp = outcome.reason === 'time_to_answer';
  const message = timeUp
    ? 'no route answered within the time-to-answer'
    : `no route answered (${outcome.lastError ?? 'all routes skipped'})`;
  sendJson(
    res,
    timeUp ? 504 : 503,
    openAiError(message, 'upstream_error', null, timeUp ? 'time_to_answer' : 'all_routes_failed'),
    routeHeaders('cold', 'none', 'none', outcome.attempts),
  );
};

export function chatEndpoint(deps: ChatEndpointDeps): (req: IncomingMessage, res: ServerResponse) => Promise<void> {
  const { failover, metrics } = deps;
  const degrade = deps.degrade ?? answerUnavailable;

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const body = await readJsonBody(req);
    if (!body.ok) {
      sendJson(res, body.status, openAiError(body.message));
      return;
    }
    const parsed = parseChatRequest(body.value, req.headers, deps.scopes);
    if (!parsed.ok) {
      sendJson(res, 400, openAiError(parsed.message, 'invalid_request_error', parsed.param));
      return;
    }
    const ctx = parsed.context;
    const deadline = new Deadline(ctx.timeToAnswerMs, deps.now);
    const gone = new Cancel();
    res.on('close', () => {
      if (!res.writableFinished) gone.abort();
    });
    const admitted = deps.admit ? deps.admit(ctx) : ROUTE_ALL;
    const admission = admitted instanceof Promise ? await admitted : admitted;
    if (admission.kind === 'reject') {
      sendJson(res, admission.status, openAiError(admission.message, 'rate_limit_error', null, admission.code), {
        'retry-after': String(admission.retryAfterS),
      });
      return;
    }
    if (admission.kind === 'queue' && deps.enqueue) {
      failover.meterEvent(ctx, { provider: 'queue', model: ctx.body.model }, 0, null, '', admission.decision, admission.reviewRequired);
      await deps.enqueue(ctx, res, admission);
      return;
    }
    // A queue decision with no queue plugged in is routed as usual.
    const { skipProviders, decision, model } = admission.kind === 'route' ? admission : ROUTE_ALL;
    const skipRoute = deps.skipRoute;
    const skip =
      skipRoute || skipProviders?.size
        ? (r: Route) => (skipRoute?.(r) ?? false) || (skipProviders?.has(r.config.provider) ?? false)
        : undefined;
    let outcome = await failover.route(ctx, deadline, { signal: gone, flags: deps.flags.get(), skip, model, decision });
    // The scope's degrade mode, when it is not "queue": one more pass, smaller or shorter, in the time left.
    const variant =
      outcome.kind === 'exhausted' && outcome.reason === 'all_failed' ? degradeVariant(deps.scopes[ctx.jobType], ctx.body) : null;
    if (variant && outcome.kind === 'exhausted') {
      const before = outcome.attempts;
      const second = await failover.route({ ...ctx, body: variant.body }, deadline, {
        signal: gone,
        flags: deps.flags.get(),
        skip,
        model: variant.model ?? model,
        decision: 'degraded',
      });
      outcome = { ...second, attempts: before + second.attempts };
    }
    if (outcome.kind === 'exhausted') {
      metrics.countRequest('cold', 'degraded');
      await degrade(ctx, outcome, deadline, res);
      return;
    }
    const { upstream } = outcome;
    const headers = routeHeaders(outcome.route.tier, outcome.route.config.provider, outcome.model, outcome.attempts);
    metrics.countRequest(outcome.route.tier, upstream.status);
    if (outcome.kind === 'answer' && upstream.first && upstream.rest) {
      headers['content-type'] = 'text/event-stream; charset=utf-8';
      headers['cache-control'] = 'no-cache';
      res.writeHead(upstream.status, headers);
      res.flushHeaders();
      const relayStart = performance.now();
      const relay = await relaySse(upstream.first, upstream.rest, res, ctx.body.stream_options?.include_usage === true);
      // A stream cut by the provider counts against the route; one our client hung up on does not.
      const code = !relay.broken ? '' : gone.aborted ? 'CLIENT_CLOSED' : 'STREAM_INTERRUPTED';
      if (code === 'STREAM_INTERRUPTED') {
        outcome.route.breaker.record(outcome.ticket, false);
        outcome.route.health.record(false);
      }
      const config = { ...outcome.route.config, model: outcome.model };
      failover.meterEvent(ctx, config, upstream.latencyMs + (performance.now() - relayStart), relay.usage, code, decision);
      return;
    }
    const type = upstream.headers['content-type'];
    sendBody(res, upstream.status, upstream.body!, typeof type === 'string' ? type : 'application/json', headers);
  }

  return async (req, res) => {
    try {
      await handle(req, res);
    } catch (error) {
      // Anything unexpected gets a JSON error, never a stack trace; the log says what happened.
      deps.log.error({ err: (error as Error).message, path: '/v1/chat/completions' }, 'request failed');
      if (!res.headersSent) sendJson(res, 500, openAiError('internal error', 'api_error'));
      else res.end();
    }
  };
}

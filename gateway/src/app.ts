/**
 * The gateway's HTTP surface (Express 5): the OpenAI-compatible chat endpoint, and the operator
 * endpoints (health, metrics, flags) behind ADMIN_TOKEN.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { Server } from 'node:http';
import express, { type NextFunction, type Request, type Response } from 'express';
import type { Logger } from 'pino';
import { z } from 'zod';
import { parseChatRequest, type ChatContext } from './chat-request';
import { Deadline, type Clock } from './deadline';
import { openAiError } from './errors';
import { Failover, type Outcome } from './failover';
import type { FlagStore } from './flags';
import type { KeyFor } from './keys';
import type { MeterSink } from './meter-sink';
import { GatewayMetrics } from './metrics';
import type { RoutesMapConfig } from './routes-map';
import { degradeVariant, type Scopes } from './scopes';
import { relaySse } from './sse';

/** What happens to a request before routing: refused (rate limit), queued (degraded), or routed. */
export type Admission =
  | { kind: 'reject'; status: number; retryAfterS: number; message: string; code: string }
  | { kind: 'queue'; delayMs: number; reviewRequired: boolean; decision: string }
  | { kind: 'route'; model?: string; decision: string; skipProviders?: Set<string> };

/** What the gateway does when no Hot or Warm route answered (the Cold tier plugs in here). */
export type Degrade = (ctx: ChatContext, outcome: Extract<Outcome, { kind: 'exhausted' }>, deadline: Deadline, res: Response) => Promise<void>;

export interface GatewayOptions {
  map: RoutesMapConfig;
  scopes: Scopes;
  keyFor: KeyFor;
  meter: MeterSink;
  flags: FlagStore;
  log: Logger;
  adminToken?: string;
  now?: Clock;
  breaker?: { failureThreshold?: number; openMs?: number; probesToClose?: number };
  degrade?: Degrade;
  /** Extra operator state for /health (pause flag, queue counts, ...). */
  healthExtras?: () => Promise<Record<string, unknown>>;
  /** Rate limits and degraded routing (Document 2), decided before routing. */
  admit?: (ctx: ChatContext) => Promise<Admission>;
  /** Queues a request that admission sent to the Cold queue (degraded routing). */
  enqueue?: (ctx: ChatContext, res: Response, admission: Extract<Admission, { kind: 'queue' }>) => Promise<void>;
  /** Routes live requests must avoid now (the capped provider's while the budget pause is on). */
  skipRoute?: (route: import('./failover').Route) => boolean;
  /** Mounts more routers (budget, jobs, voice) on the same app. */
  extend?: (app: express.Express, helpers: { admin: express.RequestHandler; failover: Failover }) => void;
}

export interface Gateway {
  app: express.Express;
  failover: Failover;
  metrics: GatewayMetrics;
  listen(port: number, host?: string): Promise<Server>;
}

function sameSecret(a: string, b: string): boolean {
  const h = (s: string) => createHash('sha256').update(s).digest();
  return timingSafeEqual(h(a), h(b));
}

/** Bearer-token guard; no token configured means the endpoints are closed (never open by default). */
export function bearerGuard(token: string | undefined): express.RequestHandler {
  return (req: Request, res: Response, next: NextFunction) => {
    const sent = /^Bearer (.+)$/.exec(req.get('authorization') ?? '')?.[1];
    if (!token || !sent || !sameSecret(sent, token)) {
      res.status(401).json({ error: 'unauthorized: send Authorization: Bearer <token>' });
      return;
    }
    next();
  };
}

function routeHeaders(res: Response, tier: string, provider: string, model: string, attempts: number): void {
  res.setHeader('x-route-tier', tier);
  res.setHeader('x-route-provider', provider);
  res.setHeader('x-route-model', model);
  res.setHeader('x-route-attempts', String(attempts));
}

const FlagsChange = z.strictObject({
  enable_warm_fallback: z.boolean().optional(),
  enable_cold_queue: z.boolean().optional(),
  killed_models: z.array(z.string().min(1)).optional(),
});

export function createGateway(opts: GatewayOptions): Gateway {
  const failover = new Failover({
    map: opts.map,
    keyFor: opts.keyFor,
    meter: (e) => opts.meter.send(e),
    warn: (m) => opts.log.warn(m),
    now: opts.now,
    breaker: opts.breaker,
  });
  const metrics = new GatewayMetrics(failover.routes.map((r) => ({ label: r.label, breaker: r.breaker })));
  failover.attachMetrics(metrics);
  for (const r of failover.routes) r.breaker.onChange((state) => opts.log.warn({ route: r.label, breaker: state }, `breaker ${state}`));
  const admin = bearerGuard(opts.adminToken);
  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);
  app.use(express.json({ limit: '20mb' }));

  const degrade: Degrade =
    opts.degrade ??
    (async (_ctx, outcome, _deadline, res) => {
      routeHeaders(res, 'cold', 'none', 'none', outcome.attempts);
      const timeUp = outcome.reason === 'time_to_answer';
      res
        .status(timeUp ? 504 : 503)
        .json(openAiError(timeUp ? 'no route answered within the time-to-answer' : `no route answered (${outcome.lastError ?? 'all routes skipped'})`, 'upstream_error', null, timeUp ? 'time_to_answer' : 'all_routes_failed'));
    });

  app.post('/v1/chat/completions', async (req: Request, res: Response) => {
    const parsed = parseChatRequest(req.body, req.headers, opts.scopes);
    if (!parsed.ok) {
      res.status(400).json(openAiError(parsed.message, 'invalid_request_error', parsed.param));
      return;
    }
    const ctx = parsed.context;
    const deadline = new Deadline(ctx.timeToAnswerMs, opts.now);
    const abort = new AbortController();
    res.on('close', () => {
      if (!res.writableFinished) abort.abort();
    });
    const admission: Admission = opts.admit ? await opts.admit(ctx) : { kind: 'route', decision: 'default' };
    if (admission.kind === 'reject') {
      res.setHeader('retry-after', String(admission.retryAfterS));
      res.status(admission.status).json(openAiError(admission.message, 'rate_limit_error', null, admission.code));
      return;
    }
    if (admission.kind === 'queue' && opts.enqueue) {
      failover.meterEvent(ctx, { provider: 'queue', model: ctx.body.model }, 0, null, '', admission.decision, admission.reviewRequired);
      await opts.enqueue(ctx, res, admission);
      return;
    }
    const route = admission.kind === 'route' ? admission : { decision: 'default' as const, model: undefined, skipProviders: undefined };
    const skipProviders = route.skipProviders;
    const skip = (r: import('./failover').Route) => (opts.skipRoute?.(r) ?? false) || (skipProviders?.has(r.config.provider) ?? false);
    let outcome = await failover.route(ctx, deadline, { signal: abort.signal, flags: opts.flags.get(), skip, model: route.model, decision: route.decision });
    // The scope's degrade mode, when it is not "queue": one more pass, smaller or shorter, in the time left.
    const variant = outcome.kind === 'exhausted' && outcome.reason === 'all_failed' ? degradeVariant(opts.scopes[ctx.jobType], ctx.body) : null;
    if (variant && outcome.kind === 'exhausted') {
      const before = outcome.attempts;
      const second = await failover.route({ ...ctx, body: variant.body }, deadline, { signal: abort.signal, flags: opts.flags.get(), skip, model: variant.model ?? route.model, decision: 'degraded' });
      outcome = { ...second, attempts: before + second.attempts };
    }
    if (outcome.kind === 'exhausted') {
      metrics.requests.inc({ tier: 'cold', status: 'degraded' });
      await degrade(ctx, outcome, deadline, res);
      return;
    }
    const { upstream } = outcome;
    routeHeaders(res, outcome.route.tier, outcome.route.config.provider, outcome.model, outcome.attempts);
    metrics.requests.inc({ tier: outcome.route.tier, status: String(upstream.status) });
    if (outcome.kind === 'answer' && upstream.first && upstream.rest) {
      res.status(upstream.status);
      res.setHeader('content-type', 'text/event-stream; charset=utf-8');
      res.setHeader('cache-control', 'no-cache');
      res.flushHeaders();
      const relayStart = performance.now();
      const relay = await relaySse(upstream.first, upstream.rest, res, ctx.body.stream_options?.include_usage === true);
      if (relay.broken) {
        outcome.route.breaker.record(outcome.ticket, false);
        outcome.route.health.record(false);
      }
      const config = { ...outcome.route.config, model: outcome.model };
      failover.meterEvent(ctx, config, upstream.latencyMs + (performance.now() - relayStart), relay.usage, relay.broken ? 'STREAM_INTERRUPTED' : '', route.decision);
      return;
    }
    const type = upstream.headers['content-type'];
    res.status(upstream.status).setHeader('content-type', typeof type === 'string' ? type : 'application/json');
    res.end(upstream.body);
  });

  app.get('/health', admin, async (_req, res) => {
    const flags = opts.flags.get();
    res.json({
      ok: true,
      routes: failover.routes.map((r) => ({
        tier: r.tier,
        provider: r.config.provider,
        model: r.config.model,
        breaker: r.breaker.state(),
        breaker_open_seconds: r.breaker.secondsOpen(),
        killed: flags.killed_models.includes(r.config.model),
        ...r.health.snapshot(r.breaker),
      })),
      flags,
      meter: opts.meter.kind,
      ...(opts.healthExtras ? await opts.healthExtras() : {}),
    });
  });

  app.get('/metrics', admin, async (_req, res) => {
    res.setHeader('content-type', metrics.registry.contentType);
    res.end(await metrics.registry.metrics());
  });

  app.get('/admin/flags', admin, (_req, res) => {
    res.json(opts.flags.get());
  });
  app.put('/admin/flags', admin, async (req, res) => {
    const parsed = FlagsChange.safeParse(req.body);
    if (!parsed.success) {
      const i = parsed.error.issues[0];
      res.status(400).json({ error: `${i.path.join('.') || 'body'}: ${i.message}` });
      return;
    }
    const flags = await opts.flags.update(parsed.data);
    opts.log.warn({ flags }, 'flags changed');
    res.json(flags);
  });

  opts.extend?.(app, { admin, failover });

  // Bodies that are not JSON, and anything that throws, get a JSON error (never a stack trace).
  app.use((error: Error & { status?: number; type?: string }, req: Request, res: Response, _next: NextFunction) => {
    if (res.headersSent) return;
    const status = error.status && error.status < 500 ? error.status : 500;
    if (status >= 500) opts.log.error({ err: error.message, path: req.path }, 'request failed');
    const message = error.type === 'entity.parse.failed' ? 'body: expected a JSON object' : status >= 500 ? 'internal error' : error.message;
    if (req.path.startsWith('/v1/chat')) res.status(status).json(openAiError(message));
    else res.status(status).json({ error: message });
  });

  return {
    app,
    failover,
    metrics,
    listen: (port, host = '0.0.0.0') =>
      new Promise((resolve, reject) => {
        const server = app.listen(port, host, (error?: Error) => (error ? reject(error) : resolve(server)));
        server.keepAliveTimeout = 65_000;
      }),
  };
}

/**
 * The gateway's HTTP surface: one node:http server whose hot path (POST /v1/chat/completions,
 * chat-endpoint.ts) goes straight to its handler, and an Express 5 app for everything else: the
 * operator endpoints (health, metrics, flags) behind ADMIN_TOKEN, and what `extend` mounts.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import express, { type NextFunction, type Request, type Response } from 'express';
import type { Logger } from 'pino';
import { z } from 'zod';
import { chatEndpoint, type ChatEndpointDeps, type Degrade } from './chat-endpoint';
import type { Clock } from './deadline';
import { openAiError } from './errors';
import { Failover } from './failover';
import type { FlagStore } from './flags';
import type { KeyFor } from './keys';
import type { MeterSink } from './meter-sink';
import { GatewayMetrics } from './metrics';
import type { RoutesMapConfig } from './routes-map';
import type { Scopes } from './scopes';

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
  admit?: ChatEndpointDeps['admit'];
  /** Queues a request that admission sent to the Cold queue (degraded routing). */
  enqueue?: ChatEndpointDeps['enqueue'];
  /** Routes live requests must avoid now (the capped provider's while the budget pause is on). */
  skipRoute?: (route: import('./failover').Route) => boolean;
  /** Mounts more routers (budget, jobs, voice) on the same app. */
  extend?: (app: express.Express, helpers: { admin: express.RequestHandler; failover: Failover }) => void;
  /** WebSocket upgrades (the phone bridge's media stream); true when it took the request. */
  upgrade?: (req: import('node:http').IncomingMessage, socket: import('node:stream').Duplex, head: Buffer) => boolean;
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
  const chat = chatEndpoint({
    failover,
    metrics,
    scopes: opts.scopes,
    flags: opts.flags,
    log: opts.log,
    now: opts.now,
    degrade: opts.degrade,
    admit: opts.admit,
    enqueue: opts.enqueue,
    skipRoute: opts.skipRoute,
  });
  // Before the JSON parser: the chat endpoint reads its own body (see chat-endpoint.ts).
  app.post('/v1/chat/completions', (req, res) => chat(req, res));
  app.use(express.json({ limit: '20mb' }));

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
    const message =
      error.type === 'entity.parse.failed' ? 'body: expected a JSON object' : status >= 500 ? 'internal error' : error.message;
    if (req.path.startsWith('/v1/chat')) res.status(status).json(openAiError(message));
    else res.status(status).json({ error: message });
  });

  return {
    app,
    failover,
    metrics,
    listen: (port, host = '0.0.0.0') =>
      new Promise((resolve, reject) => {
        // The hot path goes straight to the chat endpoint; everything else through Express.
        const server = createServer((req, res) => {
          if (req.method === 'POST' && req.url === '/v1/chat/completions') void chat(req, res);
          else app(req, res);
        });
        server.keepAliveTimeout = 65_000;
        server.on('upgrade', (req, socket, head) => opts.upgrade?.(req, socket, head) || socket.destroy());
        server.once('error', reject);
        server.listen(port, host, () => {
          server.off('error', reject);
          resolve(server);
        });
      }),
  };
}

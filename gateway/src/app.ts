/**
 * The gateway's HTTP surface: one node:http server whose hot path (POST /v1/chat/completions,
 * chat-endpoint.ts) goes straight to its handler, and an Express 5 app for everything else: the
 * operator endpoints (health, metrics, flags) behind ADMIN_TOKEN, and what `extend` mounts. With
 * client keys (`auth`), every /v1 request needs one (key-guard.ts), the voice endpoints aside.
 */
import { createServer, type Server } from 'node:http';
import express, { type NextFunction, type Request, type Response } from 'express';
import type { Logger } from 'pino';
import { bearerGuard } from './bearer';
import { chatEndpoint } from './chat-endpoint';
import type { ClientAuth } from './client-auth';
import { openAiError } from './errors';
import type { FlagStore } from './flags';
import { keyGuard } from './key-guard';
import { mountOperator } from './operator';
import type { RequestPath } from './request-path';
import type { Scopes } from './scopes';

export interface GatewayOptions {
  path: RequestPath;
  scopes: Scopes;
  flags: FlagStore;
  log: Logger;
  /** What kind of meter sink events go to, for /health. */
  meterKind: string;
  adminToken?: string;
  /** Client keys (GATEWAY_AUTH=keys); null or absent: /v1 is open. */
  auth?: ClientAuth | null;
  /** Extra operator state for /health (pause flag, queue counts, ...). */
  healthExtras?: () => Promise<Record<string, unknown>>;
  /** Mounts more routers (budget, jobs, voice) on the same app. */
  extend?: (app: express.Express, helpers: { admin: express.RequestHandler }) => void;
}

export interface Gateway {
  app: express.Express;
  path: RequestPath;
  listen(port: number, host?: string): Promise<Server>;
}

export function createGateway(opts: GatewayOptions): Gateway {
  const admin = bearerGuard(opts.adminToken);
  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);
  const chat = chatEndpoint({ pipeline: opts.path.pipeline, scopes: opts.scopes, log: opts.log, auth: opts.auth });
  // Before the JSON parser: the chat endpoint reads its own body (see chat-endpoint.ts).
  app.post('/v1/chat/completions', (req, res) => chat(req, res));
  // Before the parser too: a request without a valid key is refused unread.
  if (opts.auth) app.use('/v1', keyGuard(opts.auth));
  app.use(express.json({ limit: '20mb' }));

  mountOperator(app, admin, opts);
  opts.extend?.(app, { admin });

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
    path: opts.path,
    listen: (port, host = '0.0.0.0') =>
      new Promise((resolve, reject) => {
        // The hot path goes straight to the chat endpoint; everything else through Express.
        const server = createServer((req, res) => {
          if (req.method === 'POST' && req.url === '/v1/chat/completions') void chat(req, res);
          else app(req, res);
        });
        server.keepAliveTimeout = 65_000;
        server.once('error', reject);
        server.listen(port, host, () => {
          server.off('error', reject);
          resolve(server);
        });
      }),
  };
}

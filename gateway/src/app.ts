/**
 * The gateway's HTTP surface: one node:http server whose hot path (POST /v1/chat/completions)
 * goes straight to its handler, and an Express 5 app for everything else: the other OpenAI
 * endpoints (responses, embeddings, models), the operator endpoints behind ADMIN_TOKEN, and what
 * `extend` mounts. With client keys (`auth`), every /v1 request needs one (endpoint.ts,
 * key-guard.ts), the voice endpoints aside. Every error, on every path and method, is JSON in
 * OpenAI's shape.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import express, { type NextFunction, type Request, type Response } from 'express';
import type { Logger } from 'pino';
import { cutText } from '../../schema/cut-text';
import { bearerGuard } from './bearer';
import { noChatRoute, parseChatRequest } from './chat-request';
import type { ClientAuth } from './client-auth';
import { embeddingsParser } from './embeddings-request';
import { endpoint } from './endpoint';
import { openAiError } from './errors';
import type { FlagStore } from './flags';
import { continueIfKeyed, keyGuard } from './key-guard';
import { answerUnreadable, refuseConnect, refuseExpectation } from './malformed-request';
import type { GatewayMetrics } from './metrics';
import { mountModels } from './models';
import { mountOperator } from './operator';
import type { RequestPath } from './request-path';
import { lastOf, servesChat } from './route';
import { responsesParser } from './responses-request';
import type { Scopes } from './scopes';
import { serveOffer } from './upgrade-offer';

export interface GatewayOptions {
  path: RequestPath;
  scopes: Scopes;
  /** The map's `cheaper_model`, for the flags' check of killed model names. */
  cheaperModel?: string;
  /** The map's `shared_objects` (read at start): stored objects any client key may name. */
  sharedObjects?: ReadonlySet<string>;
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
  /** WebSocket upgrades (the phone bridge's media stream); true when it took the request. */
  upgrade?: (req: import('node:http').IncomingMessage, socket: import('node:stream').Duplex, head: Buffer) => boolean;
}

export interface Gateway {
  app: express.Express;
  path: RequestPath;
  listen(port: number, host?: string): Promise<Server>;
}

interface RouteLayer {
  route?: { methods: Record<string, boolean> };
  match(path: string): boolean;
}

/** The endpoints gateway_requests_total counts, as Express routes them (any case, a trailing slash, a query string). */
const COUNTED = /^\/v1\/(?:chat\/completions|responses|embeddings)\/?(?:\?|$)/i;

/**
 * A request node:http answers before its endpoint sees it (a refused key with `Expect: 100-continue`,
 * an `Expect` not met), counted as the endpoint counts its own refusals: answered by no tier.
 */
function countRefused(metrics: GatewayMetrics) {
  return (req: IncomingMessage, status: number) => {
    if (req.method === 'POST' && COUNTED.test(req.url ?? '')) metrics.countRequest('none', status);
  };
}

/** The caller's path in a message: a known route's may carry a long id of theirs (`/v1/models/…`). */
const QUOTED_PATH = 200;

/** 405 with `Allow` for a known path asked with another method; 404 for a path the gateway does not serve. */
function notFound(app: express.Express): express.RequestHandler {
  return (req, res) => {
    const path = req.path.slice(0, QUOTED_PATH);
    const layers = (app as unknown as { router: { stack: RouteLayer[] } }).router.stack;
    const allowed = new Set<string>();
    for (const layer of layers)
      if (layer.route && layer.match(req.path)) for (const m of Object.keys(layer.route.methods)) allowed.add(m.toUpperCase());
    if (allowed.has('GET')) allowed.add('HEAD'); // Express answers HEAD wherever GET is served
    if (allowed.size) {
      const allow = [...allowed].join(', ');
      res.setHeader('allow', allow);
      res
        .status(405)
        .json(openAiError(`${req.method} is not allowed on ${path}: use ${allow}`, 'invalid_request_error', null, 'method_not_allowed'));
      return;
    }
    res.status(404).json(openAiError(`no endpoint ${req.method} ${path}`, 'invalid_request_error', null, 'not_found'));
  };
}

export function createGateway(opts: GatewayOptions): Gateway {
  const admin = bearerGuard(opts.adminToken);
  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);
  const { pipeline } = opts.path;
  const routes = () => opts.path.routes; // the routes in force now (a reload replaces them)
  const deps = {
    pipeline,
    metrics: opts.path.metrics,
    log: opts.log,
    auth: opts.auth,
    sharedObjects: opts.sharedObjects,
    scopes: opts.scopes,
  };
  // A map serving no chat (embeddings routes only) refuses chat at once: queued, it waited 24 h for a route.
  const chatServed = lastOf(routes, servesChat);
  const chat = endpoint(deps, (body, headers, key) =>
    chatServed() ? parseChatRequest(body, headers, opts.scopes, key) : noChatRoute(body),
  );
  // Before the JSON parser: the OpenAI endpoints read their own bodies (http-io.ts) and check their keys.
  app.post('/v1/chat/completions', (req, res) => chat(req, res));
  const responses = endpoint(deps, responsesParser(routes, opts.scopes, opts.flags));
  app.post('/v1/responses', (req, res) => responses(req, res));
  const embeddings = endpoint(deps, embeddingsParser(routes, opts.scopes));
  app.post('/v1/embeddings', (req, res) => embeddings(req, res));
  // Before the parser too: any other /v1 request without a valid key is refused unread.
  if (opts.auth) app.use('/v1', keyGuard(opts.auth));
  mountModels(app, routes, opts.flags);

  mountOperator(app, admin, opts);
  opts.extend?.(app, { admin });
  app.use(notFound(app));

  // Bodies that are not JSON, and anything that throws, get a JSON error (never a stack trace).
  app.use((error: Error & { status?: number; type?: string }, req: Request, res: Response, _next: NextFunction) => {
    if (res.headersSent) return;
    const status = error.status && error.status < 500 ? error.status : 500;
    if (status >= 500) opts.log.error({ err: error.message, path: req.path }, 'request failed');
    // Cut: Express quotes what it could not read (a path segment it cannot decode) whole.
    const message =
      error.type === 'entity.parse.failed'
        ? 'body: expected a JSON object'
        : status >= 500
          ? 'internal error'
          : cutText(error.message, QUOTED_PATH);
    res.status(status).json(openAiError(message, status >= 500 ? 'api_error' : 'invalid_request_error'));
  });

  return {
    app,
    path: opts.path,
    listen: (port, host = '0.0.0.0') =>
      new Promise((resolve, reject) => {
        // The hot path goes straight to the chat endpoint; everything else through Express.
        const handle = (req: IncomingMessage, res: ServerResponse) => {
          if (req.method === 'POST' && req.url === '/v1/chat/completions') void chat(req, res);
          else app(req, res);
        };
        const server = createServer(handle);
        // Expect: 100-continue: without a valid key the body is refused before it is sent, not read and dropped.
        // One let in goes on as a 'request', so that a stop counts it in flight (shutdown.ts) and lets it finish.
        const asRequest = (req: IncomingMessage, res: ServerResponse) => server.emit('request', req, res);
        const refused = countRefused(opts.path.metrics);
        if (opts.auth) server.on('checkContinue', (req, res) => void continueIfKeyed(opts.auth!, req, res, asRequest, refused));
        // A request node cannot read as HTTP is answered with no path known: it is not counted.
        server.on('clientError', answerUnreadable);
        server.on('connect', refuseConnect);
        server.on('checkExpectation', (req: IncomingMessage, res: ServerResponse) => {
          refused(req, 417);
          refuseExpectation(req, res);
        });
        server.keepAliveTimeout = 65_000;
        server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
          if (!opts.upgrade?.(req, socket, head)) serveOffer(server, req, socket, head, refused);
        });
        server.once('error', reject);
        server.listen(port, host, () => {
          server.off('error', reject);
          resolve(server);
        });
      }),
  };
}

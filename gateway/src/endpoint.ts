/**
 * An OpenAI endpoint on the shared pipeline: check the client key (GATEWAY_AUTH=keys; before the
 * body is read, so a refused request costs nothing), read the JSON body (http-io.ts), check it with
 * the endpoint's parser into a request context, check what the key allows, hand it to the
 * pipeline. Every failure is an error in OpenAI's shape; nothing unexpected leaks a stack trace.
 *
 * The chat endpoint is the gateway's hot path, so endpoints run on plain node:http objects: the
 * server hands POST /v1/chat/completions straight here, without Express's router walk, its req/res
 * prototype swap and its body parser (together about a third of the gateway's CPU per request in
 * `npm run bench:gateway`).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Logger } from 'pino';
import type { ClientAuth } from './client-auth';
import type { ClientKey } from './client-keys';
import { openAiError } from './errors';
import { refuse } from './refusal';
import { replayRequestOf } from './idempotent-replay';
import { readJsonBody } from './http-io';
import { keyRefusal } from './key-policy';
import type { GatewayMetrics } from './metrics';
import type { Pipeline } from './pipeline';
import { textHeader, timeToAnswerOf, type Headers, type RequestContext } from './request-context';
import type { Scopes } from './scopes';
import { storedObjectRefusal } from './stored-objects';

const NONE: ReadonlySet<string> = new Set();

export type Handler = (req: IncomingMessage, res: ServerResponse) => Promise<void>;

/** What a parser found wrong: the status (400 unless said), message, the parameter and a code. */
export interface Refused {
  ok: false;
  message: string;
  param: string | null;
  status?: number;
  code?: string;
}
export type Parsed = { ok: true; context: RequestContext } | Refused;
/** `clientKey`: the request's key with GATEWAY_AUTH=keys (its tenant is the request's). */
export type Parser = (body: unknown, headers: Headers, clientKey?: ClientKey) => Parsed;

export interface EndpointDeps {
  pipeline: Pipeline;
  /** The endpoint's own refusals count in gateway_requests_total as the pipeline's answers do. */
  metrics: GatewayMetrics;
  log: Logger;
  auth?: ClientAuth | null;
  /** The routing map's `shared_objects`: stored objects any client key may name. */
  sharedObjects?: ReadonlySet<string>;
  /** Bound a key lookup's wait by the request's time-to-answer (none: the lookup's own 1 s). */
  scopes?: Scopes;
}

export function endpoint(deps: EndpointDeps, parse: Parser): Handler {
  // Read before the body and its parser: an invalid header waits as long as none (it is refused after).
  const timeToAnswer = deps.scopes && ((h: Headers) => Number(timeToAnswerOf(h, deps.scopes!)) || Infinity);
  /** `who` tells the error log which key (by id, never the key) and tenant the request came with. */
  async function handle(req: IncomingMessage, res: ServerResponse, who: { key?: ClientKey }): Promise<void> {
    /** How long the key's lookup took: part of the time-to-answer. */
    let waitedMs = 0;
    if (deps.auth) {
      let auth = deps.auth.check(req.headers.authorization, timeToAnswer, req.headers);
      if (auth instanceof Promise) {
        const asked = performance.now();
        auth = await auth;
        waitedMs = performance.now() - asked;
      }
      if (!auth.ok) {
        req.resume();
        return refuse(deps.metrics, res, auth.status, auth.error, auth.headers);
      }
      who.key = auth.key;
    }
    const body = await readJsonBody(req);
    if (!body.ok) return refuse(deps.metrics, res, body.status, openAiError(body.message));
    const parsed = parse(body.value, req.headers, who.key);
    if (!parsed.ok) {
      const error = openAiError(parsed.message, 'invalid_request_error', parsed.param, parsed.code ?? null);
      return refuse(deps.metrics, res, parsed.status ?? 400, error);
    }
    const refusal = who.key && keyRefusal(who.key, parsed.context.body.model, textHeader(req.headers, 'x-customer-id'));
    if (refusal) return refuse(deps.metrics, res, refusal.status, refusal.error);
    // Before the pipeline: a request naming the operator's stored objects is neither called nor queued.
    const foreign = who.key && storedObjectRefusal(parsed.context, deps.sharedObjects ?? NONE);
    if (foreign) return refuse(deps.metrics, res, 400, foreign);
    // Only a client's own Idempotency-Key asks for replay (nothing is hashed without one).
    const replay = replayRequestOf(req.headers['idempotency-key'], req.url ?? '', body.value, parsed.context.customerId);
    await deps.pipeline.handle(parsed.context, res, replay, waitedMs);
  }

  return async (req, res) => {
    const who: { key?: ClientKey } = {};
    try {
      await handle(req, res, who);
    } catch (error) {
      // Anything unexpected gets a JSON error, never a stack trace; the log says what happened.
      const caller = who.key ? { key_id: who.key.id, tenant: who.key.tenant } : {};
      // The path without its query string, where some clients put a key.
      const path = (req.url ?? '').split('?')[0];
      deps.log.error({ err: (error as Error).message, path, ...caller }, 'request failed');
      // Not when an answer is under way: the pipeline counted it as it began.
      if (!res.headersSent) refuse(deps.metrics, res, 500, openAiError('internal error', 'api_error'));
      else res.end();
    }
  };
}

/**
 * POST /v1/chat/completions: checks the client key (GATEWAY_AUTH=keys; before the body is read, so
 * a refused request costs nothing), reads and checks the body and our headers and what the key
 * allows, then hands the request to the shared pipeline (pipeline.ts).
 *
 * This is the gateway's hot path, so it runs on plain node:http request/response objects: the
 * server hands this exact path straight here, without Express's router walk, its req/res
 * prototype swap and its body parser (together about a third of the gateway's CPU per request
 * in `npm run bench:gateway`). Express still serves it (same handler) when the URL carries a
 * query string, and serves every other endpoint.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Logger } from 'pino';
import { parseChatRequest } from './chat-request';
import type { ClientAuth } from './client-auth';
import type { ClientKey } from './client-keys';
import { openAiError } from './errors';
import { readJsonBody, sendJson } from './http-io';
import { keyRefusal } from './key-policy';
import type { Pipeline } from './pipeline';
import type { Scopes } from './scopes';

export type Handler = (req: IncomingMessage, res: ServerResponse) => Promise<void>;

export function chatEndpoint(deps: { pipeline: Pipeline; scopes: Scopes; log: Logger; auth?: ClientAuth | null }): Handler {
  /** `who` tells the error log which key (by id, never the key) and tenant the request came with. */
  async function handle(req: IncomingMessage, res: ServerResponse, who: { key?: ClientKey }): Promise<void> {
    let key: ClientKey | undefined;
    if (deps.auth) {
      const checked = deps.auth.check(req.headers.authorization);
      const auth = checked instanceof Promise ? await checked : checked;
      if (!auth.ok) {
        req.resume();
        return sendJson(res, auth.status, auth.error);
      }
      key = who.key = auth.key;
    }
    const body = await readJsonBody(req);
    if (!body.ok) return sendJson(res, body.status, openAiError(body.message));
    const parsed = parseChatRequest(body.value, req.headers, deps.scopes, key);
    if (!parsed.ok) return sendJson(res, 400, openAiError(parsed.message, 'invalid_request_error', parsed.param));
    const refusal = key && keyRefusal(key, parsed.context.body.model, req.headers['x-customer-id'] as string | undefined);
    if (refusal) return sendJson(res, refusal.status, refusal.error);
    await deps.pipeline.handle(parsed.context, res);
  }

  return async (req, res) => {
    const who: { key?: ClientKey } = {};
    try {
      await handle(req, res, who);
    } catch (error) {
      // Anything unexpected gets a JSON error, never a stack trace; the log says what happened.
      const caller = who.key ? { key_id: who.key.id, tenant: who.key.tenant } : {};
      deps.log.error({ err: (error as Error).message, path: req.url, ...caller }, 'request failed');
      if (!res.headersSent) sendJson(res, 500, openAiError('internal error', 'api_error'));
      else res.end();
    }
  };
}

/**
 * POST /v1/chat/completions: reads and checks the body and our headers, then hands the request
 * to the shared pipeline (pipeline.ts).
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
import { openAiError } from './errors';
import { readJsonBody, sendJson } from './http-io';
import type { Pipeline } from './pipeline';
import type { Scopes } from './scopes';

export type Handler = (req: IncomingMessage, res: ServerResponse) => Promise<void>;

export function chatEndpoint(deps: { pipeline: Pipeline; scopes: Scopes; log: Logger }): Handler {
  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const body = await readJsonBody(req);
    if (!body.ok) return sendJson(res, body.status, openAiError(body.message));
    const parsed = parseChatRequest(body.value, req.headers, deps.scopes);
    if (!parsed.ok) return sendJson(res, 400, openAiError(parsed.message, 'invalid_request_error', parsed.param));
    await deps.pipeline.handle(parsed.context, res);
  }

  return async (req, res) => {
    try {
      await handle(req, res);
    } catch (error) {
      // Anything unexpected gets a JSON error, never a stack trace; the log says what happened.
      deps.log.error({ err: (error as Error).message, path: req.url }, 'request failed');
      if (!res.headersSent) sendJson(res, 500, openAiError('internal error', 'api_error'));
      else res.end();
    }
  };
}

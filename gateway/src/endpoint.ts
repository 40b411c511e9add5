/**
 * An OpenAI endpoint on the shared pipeline: read the JSON body (http-io.ts), check it with the
 * endpoint's parser into a request context, hand it to the pipeline. Every failure is an error in
 * OpenAI's shape; nothing unexpected leaks a stack trace.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Logger } from 'pino';
import { openAiError } from './errors';
import { readJsonBody, sendJson } from './http-io';
import type { Pipeline } from './pipeline';
import type { Headers, RequestContext } from './request-context';

export type Handler = (req: IncomingMessage, res: ServerResponse) => Promise<void>;

/** What a parser found wrong: the status (400 unless said), message, the parameter and a code. */
interface Refused {
  ok: false;
  message: string;
  param: string | null;
  status?: number;
  code?: string;
}
export type Parsed = { ok: true; context: RequestContext } | Refused;
export type Parser = (body: unknown, headers: Headers) => Parsed;

export function endpoint(deps: { pipeline: Pipeline; log: Logger }, parse: Parser): Handler {
  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const body = await readJsonBody(req);
    if (!body.ok) return sendJson(res, body.status, openAiError(body.message));
    const parsed = parse(body.value, req.headers);
    if (!parsed.ok) {
      return sendJson(res, parsed.status ?? 400, openAiError(parsed.message, 'invalid_request_error', parsed.param, parsed.code ?? null));
    }
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

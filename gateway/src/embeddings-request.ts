/**
 * The embeddings request: OpenAI's body, checked. Only routes serving this very model may answer
 * (call-plan.ts), so a model no route serves is refused here, before anything is called.
 */
import { z } from 'zod';
import type { ClientKey } from './client-keys';
import type { Parsed, Refused } from './endpoint';
import { ModelName, readRoutingHeaders, requestContext, type Headers } from './request-context';
import { lastOf, type Route } from './route';
import type { Scopes } from './scopes';
import { bodyRefusal, paramOf } from './param-path';
import { inputIssue, inputTooLong, type InputIssue } from './embeddings-input';

/** The input is checked by plain loops (embeddings-input.ts): zod walks millions of token ids slowly. */
const Input = z.unknown().superRefine((input, ctx) => {
  const issue = inputIssue(input);
  if (!issue) return;
  const params = issue.wrongType ? { code: 'invalid_type' } : undefined;
  ctx.addIssue({ code: 'custom', message: issue.message, path: issue.path, params });
});

const EmbeddingsBody = z.looseObject({
  model: ModelName,
  input: Input,
  encoding_format: z.enum(['float', 'base64']).optional(),
  dimensions: z.number().int().positive().optional(),
  user: z.string().optional(),
});

/** An input over a model's limit: a value out of range (OpenAI's `invalid_value`), as one over the request's limits is. */
function inputRefusal(issue: InputIssue): Refused {
  const param = paramOf(['input', ...issue.path]);
  return { ok: false, message: `${param}: ${issue.message}`, param, code: 'invalid_value' };
}

export function embeddingsParser(routes: () => Route[], scopes: Scopes) {
  const models = lastOf(routes, (all) => new Set(all.filter((r) => r.apis.has('embeddings')).map((r) => r.config.model)));
  return (body: unknown, headers: Headers, clientKey?: ClientKey): Parsed => {
    const parsed = EmbeddingsBody.safeParse(body);
    if (!parsed.success) {
      return bodyRefusal(parsed.error, body);
    }
    const tooLong = inputTooLong(parsed.data.model, parsed.data.input);
    if (tooLong) return inputRefusal(tooLong);
    const served = models();
    // A key that names its models is told of those only, as GET /v1/models lists it no others: one
    // outside them is its 403 (endpoint.ts), served or not (a 404 for those alone told which are).
    const allowed = clientKey?.models.length ? clientKey.models : null;
    if (!served.has(parsed.data.model) && (!allowed || allowed.includes(parsed.data.model))) {
      const known = [...served].filter((m) => !allowed || allowed.includes(m)).join(', ') || 'none';
      return {
        ok: false,
        status: 404,
        code: 'model_not_found',
        param: 'model',
        message: `model: no route serves embeddings of "${parsed.data.model}" (served: ${known})`,
      };
    }
    const routing = readRoutingHeaders(headers, scopes, parsed.data.input, clientKey);
    if (!routing.ok) return { ok: false, message: routing.message, param: null };
    return { ok: true, context: requestContext('embeddings', parsed.data, false, routing.value) };
  };
}

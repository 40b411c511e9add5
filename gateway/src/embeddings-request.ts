/**
 * The embeddings request: OpenAI's body, checked. Only routes serving this very model may answer
 * (call-plan.ts), so a model no route serves is refused here, before anything is called.
 */
import { z } from 'zod';
import type { ClientKey } from './client-keys';
import type { Parsed } from './endpoint';
import { ModelName, readRoutingHeaders, requestContext, type Headers } from './request-context';
import { lastOf, type Route } from './route';
import type { Scopes } from './scopes';
import { bodyRefusal } from './param-path';

const TEXT = { error: 'expected a non-empty string' };
const Text = z.string(TEXT).min(1, TEXT);
// A refinement, not .int().min(0): zod's union reports a refinement's issue (input[3]: …) where
// an .int() failure would leave only the union's own message.
const TOKEN_ID = { error: 'expected a token id (an integer from 0)' };
const TokenId = z.number(TOKEN_ID).refine((n) => Number.isInteger(n) && n >= 0, TOKEN_ID);
const TokenIds = z.array(TokenId).min(1, { error: 'expected at least one token id' });
/** One array of token ids is one input, however long; else at most 2048 inputs (OpenAI's limit). */
const fewEnough = (input: string | unknown[]) => typeof input === 'string' || typeof input[0] === 'number' || input.length <= 2048;

const EmbeddingsBody = z.looseObject({
  model: ModelName,
  input: z
    .union([Text, z.array(Text).min(1), TokenIds, z.array(TokenIds).min(1)], {
      error: 'expected a non-empty string, an array of strings, an array of token ids or an array of token-id arrays',
    })
    .refine(fewEnough, { error: 'expected at most 2048 inputs' }),
  encoding_format: z.enum(['float', 'base64']).optional(),
  dimensions: z.number().int().positive().optional(),
  user: z.string().optional(),
});

export function embeddingsParser(routes: () => Route[], scopes: Scopes) {
  const models = lastOf(routes, (all) => new Set(all.filter((r) => r.apis.has('embeddings')).map((r) => r.config.model)));
  return (body: unknown, headers: Headers, clientKey?: ClientKey): Parsed => {
    const parsed = EmbeddingsBody.safeParse(body);
    if (!parsed.success) {
      return bodyRefusal(parsed.error);
    }
    const served = models();
    if (!served.has(parsed.data.model)) {
      // A key that names its models is told of those only, as GET /v1/models lists it no others.
      const allowed = clientKey?.models.length ? clientKey.models : null;
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

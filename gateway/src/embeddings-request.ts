/**
 * The embeddings request: OpenAI's body, checked. Only routes serving this very model may answer
 * (call-plan.ts), so a model no route serves is refused here, before anything is called.
 */
import { z } from 'zod';
import type { ClientKey } from './client-keys';
import type { Parsed } from './endpoint';
import { readRoutingHeaders, type Headers } from './request-context';
import { lastOf, type Route } from './route';
import type { Scopes } from './scopes';

const EmbeddingsBody = z.looseObject({
  model: z.string().min(1),
  input: z.union([
    z.string().min(1),
    z.array(z.string().min(1)).min(1).max(2048),
    z.array(z.number().int()).min(1),
    z.array(z.array(z.number().int()).min(1)).min(1).max(2048),
  ]),
  encoding_format: z.enum(['float', 'base64']).optional(),
  dimensions: z.number().int().positive().optional(),
  user: z.string().optional(),
});

export function embeddingsParser(routes: () => Route[], scopes: Scopes) {
  const models = lastOf(routes, (all) => new Set(all.filter((r) => r.apis.has('embeddings')).map((r) => r.config.model)));
  return (body: unknown, headers: Headers, clientKey?: ClientKey): Parsed => {
    const parsed = EmbeddingsBody.safeParse(body);
    if (!parsed.success) {
      const issue = parsed.error.issues[0];
      const param = issue.path.length ? issue.path.map(String).join('.') : null;
      return { ok: false, message: `${param ?? 'body'}: ${issue.message}`, param };
    }
    const served = models();
    if (!served.has(parsed.data.model)) {
      const known = [...served].join(', ') || 'none';
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
    return { ok: true, context: { api: 'embeddings', body: parsed.data, stream: false, ...routing.value } };
  };
}

/**
 * The Responses request: OpenAI's body (checked loosely: the provider checks the rest), and its
 * chat translation for the routes that offer only chat completions. A request that cannot be
 * translated (built-in tools, `previous_response_id`, …) is served by the routes that offer the
 * Responses API natively, and refused with a 400 naming the parameter when no route does.
 */
import { z } from 'zod';
import type { ClientKey } from './client-keys';
import type { Parsed } from './endpoint';
import { ModelName, readRoutingHeaders, requestContext, type Headers } from './request-context';
import { responsesToChat } from './responses/request';
import { allowedBy, type FlagStore } from './flags';
import { lastOf, type Route } from './route';
import type { Scopes } from './scopes';
import { bodyRefusal } from './param-path';

const ResponsesBody = z.looseObject({
  model: ModelName,
  // Optional: a stored prompt, or a stored conversation continued, may bring all of it (native
  // routes only: the translation refuses a request without input).
  input: z.union([z.string(), z.array(z.looseObject({}))], { error: 'expected a string or an array of input items' }).optional(),
  instructions: z.string().nullish(),
  // The id the owner check looks up (responses/ownership.ts): refused here in any other form, not sent on.
  previous_response_id: z.string({ error: 'expected a response id (a string) or null' }).nullish(),
  stream: z.boolean().nullish(),
});
type ResponsesBody = z.infer<typeof ResponsesBody>;

/**
 * What the default idempotency key hashes as the request's input: its instructions and input, and
 * the stored state it continues, if any (the same `input` in two conversations is two requests).
 */
function keyInput(body: ResponsesBody): unknown[] {
  const { previous_response_id: previous, conversation, prompt } = body as Record<string, unknown>;
  const mine = [body.instructions ?? null, body.input];
  return previous === undefined && conversation === undefined && prompt === undefined
    ? mine
    : [...mine, { previous, conversation, prompt }];
}

/**
 * A background response is read back with GET /v1/responses/{id}, which the gateway does not serve,
 * and is answered queued, without usage: a tenant could never read it, and its tokens would count
 * against no --tpm and be metered as none. Without keys a backend may poll the provider itself.
 */
const BACKGROUND: Parsed = {
  ok: false,
  param: 'background',
  code: 'unsupported_parameter',
  message:
    "'background' is not supported with a client key: a background response is read back with GET /v1/responses/{id}, which this gateway does not serve; send the request without it (stream: true for a long answer).",
};

export function responsesParser(routes: () => Route[], scopes: Scopes, flags: FlagStore) {
  // Asked only of a request that cannot be translated: a route the flags switch off serves nothing.
  const native = () => routes().some((r) => r.apis.has('responses') && allowedBy(flags.get(), r));
  // None serving responses nor chat (embeddings routes only): refused at once, as a chat request is (app.ts).
  const served = lastOf(routes, (all) => all.some((r) => r.apis.has('responses') || r.apis.has('chat')));
  return (body: unknown, headers: Headers, clientKey?: ClientKey): Parsed => {
    if (!served()) {
      const model = (body as { model?: unknown } | null)?.model;
      const asked = typeof model === 'string' ? ` of "${model}"` : '';
      const message = `model: no route serves responses${asked} (the routing map in force has no route with the responses or chat api)`;
      return { ok: false, status: 404, code: 'model_not_found', param: 'model', message };
    }
    const parsed = ResponsesBody.safeParse(body);
    if (!parsed.success) {
      return bodyRefusal(parsed.error, body);
    }
    if (clientKey && (parsed.data as { background?: unknown }).background === true) return BACKGROUND;
    const translated = responsesToChat(parsed.data);
    // A value of the wrong type is refused here: passed to the native routes, it was a 503 while they were down.
    if (!translated.ok && (translated.everywhere || !native())) {
      const why = translated.everywhere ? '' : ' (no route in service offers the Responses API natively)';
      return { ok: false, param: translated.param, code: translated.code, message: `${translated.message}${why}` };
    }
    const routing = readRoutingHeaders(headers, scopes, keyInput(parsed.data), clientKey);
    if (!routing.ok) return { ok: false, message: routing.message, param: null };
    const asChat = translated.ok ? translated.chat : undefined;
    return { ok: true, context: requestContext('responses', parsed.data, parsed.data.stream === true, routing.value, asChat) };
  };
}

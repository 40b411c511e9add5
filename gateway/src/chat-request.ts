/**
 * The chat-completions request: OpenAI's body (checked, other fields passed through untouched)
 * and the routing context from our headers.
 */
import { z } from 'zod';
import type { ClientKey } from './client-keys';
import { cutText } from '../../schema/cut-text';
import type { Parsed } from './endpoint';
import { ModelName, readRoutingHeaders, requestContext, type Headers, type RequestContext } from './request-context';
import type { Scopes } from './scopes';
import { bodyRefusal } from './param-path';

const Message = z.looseObject({
  role: z.enum(['system', 'developer', 'user', 'assistant', 'tool', 'function']),
  content: z
    .union([z.string(), z.array(z.unknown()), z.null()], { error: 'expected a string, an array of content parts, or null' })
    .optional(),
});

/** What the caller sent, briefly; numbers as themselves (JSON would show Infinity as null). */
const shown = (v: unknown) => (typeof v === 'number' ? String(v) : cutText(JSON.stringify(v), 50));

/**
 * A parameter OpenAI allows absent or null, else `ok`. A plain predicate, not a chain of zod
 * checks: this is the hot path, and one message per field says all that was expected. `type`: the
 * JS type it takes, which tells a refusal's invalid_type from invalid_value (param-path.ts).
 */
function nullable<T>(ok: (v: unknown) => boolean, expected: string, type: 'number' | 'integer' | 'boolean') {
  const error = (issue: { input?: unknown }) => `expected ${expected} or null, got ${shown(issue.input)}`;
  return z.custom<T>(ok, { error, params: { type } }).nullish();
}
const count = () => nullable<number>((v) => Number.isInteger(v) && (v as number) > 0, 'a positive integer', 'integer');
// NaN and ±Infinity fail both comparisons.
const within = (min: number, max: number) =>
  nullable<number>((v) => typeof v === 'number' && v >= min && v <= max, `a number from ${min} to ${max}`, 'number');

const ChatBody = z.looseObject({
  model: ModelName,
  messages: z.array(Message).min(1),
  stream: nullable<boolean>((v) => typeof v === 'boolean', 'true, false', 'boolean'),
  stream_options: z.looseObject({ include_usage: z.boolean().optional() }).nullish(),
  max_tokens: count(),
  max_completion_tokens: count(),
  n: count(),
  temperature: within(0, 2),
  top_p: within(0, 1),
  presence_penalty: within(-2, 2),
  frequency_penalty: within(-2, 2),
  seed: nullable<number>(Number.isInteger, 'an integer', 'integer'),
});
type ChatBodyT = z.infer<typeof ChatBody>;

type ChatContext = RequestContext<ChatBodyT>;

export function parseChatRequest(body: unknown, headers: Headers, scopes: Scopes, clientKey?: ClientKey): Parsed {
  const parsed = ChatBody.safeParse(body);
  if (!parsed.success) {
    return bodyRefusal(parsed.error, body);
  }
  const routing = readRoutingHeaders(headers, scopes, parsed.data.messages, clientKey);
  if (!routing.ok) return { ok: false, message: routing.message, param: null };
  const context: ChatContext = requestContext('chat', parsed.data, parsed.data.stream === true, routing.value);
  return { ok: true, context };
}

/**
 * A chat request while no route serves chat (a map of embeddings routes only): refused at once, as
 * embeddings of a model no route serves are, rather than queued for a route no reload may bring.
 */
export function noChatRoute(body: unknown): Parsed {
  const model = (body as { model?: unknown } | null)?.model;
  const asked = typeof model === 'string' ? ` of "${model}"` : '';
  return {
    ok: false,
    status: 404,
    code: 'model_not_found',
    param: 'model',
    message: `model: no route serves chat completions${asked} (the routing map in force has no route with the chat api)`,
  };
}

/**
 * Mistral's adapter: OpenAI's format, but Mistral refuses what it does not know (a 422, not failed
 * over: forMistral below, and ANSWER_ONLY), and a tool call id that is not exactly 9 letters and
 * digits (a 400), where a conversation whose calls another provider made carries ids such as
 * OpenAI's `call_…`. Each such id is sent as 9 letters and digits of its SHA-256 hash, in the
 * assistant's `tool_calls` and the `tool` messages alike, so a call and its output still match;
 * valid ids are sent as they are. Answers are not mapped back: they hold only the ids Mistral makes
 * (already 9 letters and digits, which every provider takes), never the ones sent.
 */
import { createHash } from 'node:crypto';
import { isObject } from '../json-object';
import type { ProviderAdapter } from './adapter';
import { openAiCompatible } from './openai-compatible';

const VALID_ID = /^[a-zA-Z0-9]{9}$/;
const ALPHANUMERIC = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';

/** The id Mistral takes for `id`: the same for the same id, so a call and its output keep matching. */
function mistralId(id: string): string {
  if (VALID_ID.test(id)) return id;
  const hash = createHash('sha256').update(id).digest();
  let out = '';
  for (let i = 0; i < 9; i++) out += ALPHANUMERIC[hash[i] % ALPHANUMERIC.length];
  return out;
}

/**
 * The fields of OpenAI's answer message besides its role, content and tool calls: a client passes
 * that message back as it came (`refusal: null`, `annotations: []`), and Mistral refuses a field
 * it does not know (a 422). None says anything a Mistral model could read.
 */
const ANSWER_ONLY = ['refusal', 'annotations', 'audio', 'function_call'];

/** `message` as Mistral takes it; the same object when nothing needed changing. */
function mistralMessage(message: unknown): unknown {
  if (!isObject(message)) return message;
  if (message.role === 'tool') {
    const id = message.tool_call_id;
    return typeof id === 'string' && !VALID_ID.test(id) ? { ...message, tool_call_id: mistralId(id) } : message;
  }
  if (message.role !== 'assistant') return message;
  const calls = message.tool_calls;
  let mapped: unknown[] | undefined;
  if (Array.isArray(calls))
    calls.forEach((call: unknown, i) => {
      if (isObject(call) && typeof call.id === 'string' && !VALID_ID.test(call.id)) {
        mapped ??= calls.slice();
        mapped[i] = { ...call, id: mistralId(call.id) };
      }
    });
  const extra = ANSWER_ONLY.some((field) => field in message);
  if (!mapped && !extra) return message;
  const sent: Record<string, unknown> = { ...message, ...(mapped ? { tool_calls: mapped } : {}) };
  if (extra) for (const field of ANSWER_ONLY) delete sent[field];
  return sent;
}

/** A chat body with its messages as Mistral takes them; the body itself (shared by every route) is not changed. */
function withMistralMessages(body: Record<string, unknown>): Record<string, unknown> {
  const messages = body.messages;
  if (!Array.isArray(messages)) return body;
  let mapped: unknown[] | undefined;
  messages.forEach((message: unknown, i) => {
    const sent = mistralMessage(message);
    if (sent !== message) {
      mapped ??= messages.slice();
      mapped[i] = sent;
    }
  });
  return mapped ? { ...body, messages: mapped } : body;
}

/**
 * A chat body as Mistral takes it. Mistral refuses fields it does not know (a 422), among them
 * `stream_options`, which a chat stream always carries (call-plan.ts asks for the usage): it is left
 * out, and the usage still comes, in the stream's last chunk, where the meter and the client read it;
 * and `max_completion_tokens`, OpenAI's newer name for `max_tokens`: sent as `max_tokens` (the lower
 * of the two when both are given).
 */
function forMistral(body: Record<string, unknown>): Record<string, unknown> {
  const sent = withMistralMessages(body);
  if (!('stream_options' in sent) && !('max_completion_tokens' in sent)) return sent;
  const { stream_options: _asked, max_completion_tokens: limit, ...rest } = sent;
  if (typeof limit === 'number' && !(typeof rest.max_tokens === 'number' && rest.max_tokens <= limit)) rest.max_tokens = limit;
  return rest;
}

export const mistral: ProviderAdapter = {
  request(route, api, body, apiKey, idempotencyKey) {
    return openAiCompatible.request(route, api, api === 'chat' ? forMistral(body) : body, apiKey, idempotencyKey);
  },
  usage: openAiCompatible.usage,
};

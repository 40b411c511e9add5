/**
 * Mistral's adapter: OpenAI's format, but Mistral refuses what it does not know (a 422, not failed
 * over: BODY and forMistral below), and a tool call id that is not exactly 9 letters and
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
 * What Mistral's chat API documents, by level: it refuses any other field (a 422, not failed over),
 * where a request written for OpenAI carries many (`store`, `user`, `logprobs`, a message's `name`,
 * the `refusal: null` of OpenAI's answer passed back…). Those are left out, as LiteLLM's
 * `drop_params` does: the answer simply lacks what they asked for (logprobs, audio, a web search).
 * `seed` and `max_completion_tokens` go under Mistral's own names (forMistral). Mistral documents
 * `reasoning_effort`, but a model asked to reason answers with a list of thinking and text parts
 * where OpenAI's chat clients read a string: it is left out too, and the model answers in text.
 */
const BODY = new Set([
  'model',
  'messages',
  'temperature',
  'top_p',
  'max_tokens',
  'stream',
  'stop',
  'random_seed',
  'metadata',
  'response_format',
  'tools',
  'tool_choice',
  'presence_penalty',
  'frequency_penalty',
  'n',
  'prediction',
  'parallel_tool_calls',
  'prompt_mode',
  'guardrails',
  'prompt_cache_key',
  'safe_prompt',
]);
const MESSAGE = new Map<unknown, ReadonlySet<string>>([
  ['system', new Set(['role', 'content'])],
  ['user', new Set(['role', 'content'])],
  ['assistant', new Set(['role', 'content', 'tool_calls', 'prefix'])],
  ['tool', new Set(['role', 'content', 'tool_call_id', 'name'])],
]);
const TOOL = new Set(['type', 'function']);
const FUNCTION = new Set(['name', 'description', 'parameters', 'strict']);
const NO_PARAMETERS = { type: 'object', properties: {} };
/** Mistral's embeddings request; OpenAI's `dimensions` is its `output_dimension` (embeddingsForMistral). */
const EMBEDDINGS = new Set(['model', 'input', 'metadata', 'output_dimension', 'output_dtype', 'encoding_format']);

/** `object` with only the `allowed` fields; the same object when it has no other. */
function only(object: Record<string, unknown>, allowed: ReadonlySet<string>): Record<string, unknown> {
  const keys = Object.keys(object);
  if (keys.every((key) => allowed.has(key))) return object;
  const kept: Record<string, unknown> = {};
  for (const key of keys) if (allowed.has(key)) kept[key] = object[key];
  return kept;
}

/** `list` with each item as `map` gives it; the same array when no item changed. */
function mapped(list: unknown, map: (item: unknown) => unknown): unknown {
  if (!Array.isArray(list)) return list;
  let out: unknown[] | undefined;
  list.forEach((item: unknown, i) => {
    const sent = map(item);
    if (sent !== item) {
      out ??= list.slice();
      out[i] = sent;
    }
  });
  return out ?? list;
}

/** `message` as Mistral takes it; the same object when nothing needed changing. */
function mistralMessage(message: unknown): unknown {
  if (!isObject(message)) return message;
  // OpenAI's `developer` message, which its reasoning models take for `system`, is Mistral's `system`.
  const role = message.role === 'developer' ? 'system' : message.role;
  const allowed = MESSAGE.get(role);
  if (!allowed) return message;
  let sent: Record<string, unknown> = role === message.role ? message : { ...message, role };
  if (message.role === 'tool') {
    const id = message.tool_call_id;
    if (typeof id === 'string' && !VALID_ID.test(id)) sent = { ...message, tool_call_id: mistralId(id) };
  } else if (message.role === 'assistant') {
    const calls = mapped(message.tool_calls, (call) =>
      isObject(call) && typeof call.id === 'string' && !VALID_ID.test(call.id) ? { ...call, id: mistralId(call.id) } : call,
    );
    if (calls !== message.tool_calls) sent = { ...message, tool_calls: calls };
  }
  return only(sent, allowed);
}

/** A function `tool` as Mistral takes it (its other kinds have fields of their own); the same object when nothing needed changing. */
function mistralTool(tool: unknown): unknown {
  if (!isObject(tool) || (tool.type !== undefined && tool.type !== 'function')) return tool;
  const sent = only(tool, TOOL);
  const fn = sent.function;
  if (!isObject(fn)) return sent;
  let fnSent = only(fn, FUNCTION);
  // OpenAI takes a function without `parameters` for one without any; Mistral requires them (a 422).
  if (!('parameters' in fnSent)) fnSent = { ...fnSent, parameters: NO_PARAMETERS };
  return fnSent === fn ? sent : { ...sent, function: fnSent };
}

/**
 * A chat body as Mistral takes it (see BODY); the body itself (shared by every route) is not
 * changed. Among the fields left out is `stream_options`, which a chat stream always carries
 * (call-plan.ts asks for the usage): the usage still comes, in the stream's last chunk, where the
 * meter and the client read it. OpenAI's `max_completion_tokens` goes as `max_tokens` (the lower of
 * the two when both are given), its `seed` as `random_seed` (Mistral's own, when given, wins).
 */
function forMistral(body: Record<string, unknown>): Record<string, unknown> {
  const messages = mapped(body.messages, mistralMessage);
  const tools = mapped(body.tools, mistralTool);
  let sent = only(body, BODY);
  if (sent === body && messages === body.messages && tools === body.tools) return body;
  if (sent === body) sent = { ...body };
  if ('messages' in sent) sent.messages = messages;
  if ('tools' in sent) sent.tools = tools;
  const limit = body.max_completion_tokens;
  if (typeof limit === 'number' && !(typeof sent.max_tokens === 'number' && sent.max_tokens <= limit)) sent.max_tokens = limit;
  if ('seed' in body && !('random_seed' in body)) sent.random_seed = body.seed;
  return sent;
}

/**
 * An embeddings body as Mistral takes it: OpenAI's `user` left out, its `dimensions` sent as
 * `output_dimension` (left out, the vectors would come at the model's own size, useless to an
 * index of the size asked for; a model that has only one refuses it, as it should).
 */
function embeddingsForMistral(body: Record<string, unknown>): Record<string, unknown> {
  const sent = only(body, EMBEDDINGS);
  if ('dimensions' in body && !('output_dimension' in body)) sent.output_dimension = body.dimensions;
  return sent;
}

export const mistral: ProviderAdapter = {
  request(route, api, body, apiKey, idempotencyKey) {
    const sent = api === 'chat' ? forMistral(body) : api === 'embeddings' ? embeddingsForMistral(body) : body;
    return openAiCompatible.request(route, api, sent, apiKey, idempotencyKey);
  },
  usage: openAiCompatible.usage,
};

/**
 * The Response object around its output: what a translated answer says about itself (id, status,
 * usage) and the request fields OpenAI's Responses API echoes back (instructions, tools,
 * temperature, …), with the API's defaults for those the client left out. answer.ts and stream.ts
 * both build their Response objects here, so a streamed and a whole answer read the same.
 *
 * `output_text` is left out on purpose: it is not part of the API's JSON, the SDKs compute it.
 */
import type { Response, ResponseOutputItem, ResponseUsage } from 'openai/resources/responses/responses';
import { unixSeconds, type ResponseIds } from './ids';
import { fieldsOf, isObject } from '../json-object';

/** A Response as the API sends it (without the SDK's computed `output_text`). */
export type ResponseObject = Omit<Response, 'output_text'>;

export interface ResponseState {
  model: string;
  status: 'in_progress' | 'completed' | 'incomplete' | 'failed';
  output: ResponseOutputItem[];
  usage: ResponseUsage | null;
  incompleteReason?: 'max_output_tokens' | 'content_filter';
  error?: { code: 'server_error'; message: string };
}

const num = (v: unknown): number | undefined => (typeof v === 'number' && Number.isFinite(v) ? v : undefined);

/**
 * Why a chat answer stopped, as the Responses API says it: only a length limit and the content
 * filter leave it incomplete. The limit is `length`, or Mistral's `model_length` (its context
 * window, not `max_tokens`, ran out: cut all the same, and the Responses API has no other reason).
 */
export function incompleteReason(finishReason: unknown): ResponseState['incompleteReason'] {
  if (finishReason === 'length' || finishReason === 'model_length') return 'max_output_tokens';
  if (finishReason === 'content_filter') return 'content_filter';
  return undefined;
}

/** The request's own model: the one called when a translation runs without a route (as tests run it). */
export function requestedModel(request: Record<string, unknown>): string {
  return typeof request.model === 'string' ? request.model : '';
}

/**
 * The model a translated Response names, in every event of a stream and in a whole answer: the
 * provider's own name for it (OpenAI names the snapshot that answered, not the alias asked for),
 * else the model the gateway called (`x-route-model`). Never the client's: the route replaced it.
 */
export function answeringModel(providerModel: unknown, called: string): string {
  return typeof providerModel === 'string' && providerModel ? providerModel : called;
}

/** Chat usage (prompt/completion tokens and their details) in the Responses shape; null without one. */
export function responseUsage(chatUsage: unknown): ResponseUsage | null {
  if (!isObject(chatUsage)) return null;
  // Some OpenAI-compatible providers name them as the Responses API does (the meter reads both too).
  const input = num(chatUsage.prompt_tokens) ?? num(chatUsage.input_tokens);
  const output = num(chatUsage.completion_tokens) ?? num(chatUsage.output_tokens);
  if (input === undefined && output === undefined) return null;
  // Their details too, so the Response says the cached tokens the meter prices (adapter.ts reads both).
  const inputDetails = fieldsOf(chatUsage.prompt_tokens_details ?? chatUsage.input_tokens_details);
  const outputDetails = fieldsOf(chatUsage.completion_tokens_details ?? chatUsage.output_tokens_details);
  return {
    input_tokens: input ?? 0,
    input_tokens_details: {
      cached_tokens: num(inputDetails.cached_tokens) ?? 0,
      cache_write_tokens: num(inputDetails.cache_write_tokens) ?? 0,
    },
    output_tokens: output ?? 0,
    output_tokens_details: { reasoning_tokens: num(outputDetails.reasoning_tokens) ?? 0 },
    total_tokens: num(chatUsage.total_tokens) ?? (input ?? 0) + (output ?? 0),
  };
}

/** The whole Response object for the request and the state of its answer. */
export function responseObject(request: Record<string, unknown>, ids: ResponseIds, state: ResponseState): ResponseObject {
  const createdAt = unixSeconds(ids.now);
  // The request's value of a field the Response echoes, else the API's default. The request was
  // checked by responsesToChat before any answer exists, so its fields have their documented types.
  const echo = <K extends keyof ResponseObject>(key: K, fallback: ResponseObject[K]): ResponseObject[K] =>
    request[key] === undefined || request[key] === null ? fallback : (request[key] as ResponseObject[K]);
  const reasoning = (isObject(request.reasoning) ? request.reasoning : {}) as NonNullable<ResponseObject['reasoning']>;
  const text = (isObject(request.text) ? request.text : {}) as NonNullable<ResponseObject['text']>;
  const done = state.status === 'completed' || state.status === 'incomplete';
  return {
    id: ids.responseId,
    object: 'response',
    created_at: createdAt,
    status: state.status,
    background: false,
    completed_at: done ? Math.max(createdAt, unixSeconds(Date.now())) : null,
    error: state.error ?? null,
    incomplete_details: state.incompleteReason ? { reason: state.incompleteReason } : null,
    instructions: typeof request.instructions === 'string' ? request.instructions : null,
    max_output_tokens: echo('max_output_tokens', null),
    model: state.model,
    output: state.output,
    parallel_tool_calls: echo('parallel_tool_calls', true),
    previous_response_id: null,
    prompt_cache_key: echo('prompt_cache_key', null),
    reasoning: { effort: reasoning.effort ?? null, summary: reasoning.summary ?? null },
    safety_identifier: echo('safety_identifier', null),
    service_tier: 'default', // the request's service_tier is not sent on (request.ts)
    temperature: echo('temperature', 1),
    text: { format: text.format ?? { type: 'text' }, verbosity: text.verbosity ?? 'medium' },
    tool_choice: echo('tool_choice', 'auto'),
    tools: echo('tools', []),
    top_logprobs: echo('top_logprobs', 0),
    top_p: echo('top_p', 1),
    truncation: echo('truncation', 'disabled'),
    // Before the usage is known the API sends null (the SDK's type says optional); a finished
    // Response whose provider reported none leaves it out, as that type allows (never a made-up 0).
    ...(state.usage || state.status === 'in_progress' ? { usage: state.usage as ResponseUsage } : {}),
    user: echo('user', null as unknown as string),
    metadata: echo('metadata', {}),
  };
}

/**
 * How an answer reaches the client: whole or streamed, as the provider gave it, or translated when
 * a Responses request was served by a chat-only route (a provider's refusal of it too, naming the
 * Responses parameters), embeddings in the encoding asked for. The pipeline and the Cold worker both use it.
 */
import { inEncodingAsked } from './embeddings-encoding';
import { newResponseId } from './responses/ids';
import { chatToResponse } from './responses/answer';
import type { Answer, ClientError } from './outcome';
import { renameErrorParam } from './responses/error-param';
import { readUsage, type Usage } from './providers/adapter';
import type { StreamTransform } from './sse';
import { chatPassthrough, chatToResponses, responsesPassthrough } from './stream-transforms';
import { maxAnswerBytes } from './upstream';
import { isObject, jsonText, parseJson } from './json-object';

const translated = (answer: Answer) => answer.of.ctx.api === 'responses' && answer.of.api === 'chat';

/** `onResponse`: told of the response a native Responses stream creates and completes (its owner is claimed). */
export function streamTransform(answer: Answer, onResponse?: (response: unknown) => void): StreamTransform {
  const { ctx } = answer.of;
  if (translated(answer))
    return chatToResponses(ctx.body, { responseId: newResponseId(), now: Date.now() }, answer.model, maxAnswerBytes());
  if (answer.of.api === 'responses') return responsesPassthrough(maxAnswerBytes(), onResponse);
  const wantsUsage = (ctx.body.stream_options as { include_usage?: boolean } | null | undefined)?.include_usage === true;
  return chatPassthrough(wantsUsage, typeof ctx.body.n === 'number' ? ctx.body.n : 1);
}

/** A whole (non-streamed) answer's body for the client, and its usage for the meter. */
export function wholeAnswer(answer: Answer): { body: Buffer | string; usage: Usage | null } {
  const raw = answer.upstream.body!;
  if (!translated(answer)) {
    const body = answer.of.ctx.api === 'embeddings' ? inEncodingAsked(raw, answer.of.ctx.body) : raw;
    return { body, usage: answer.route.adapter.usage(raw, answer.of.ctx.api) };
  }
  // Read as the client would read it: a byte-order mark before it is no reason to pass it on untranslated.
  const chat = parseJson(raw.toString('utf8')) as { usage?: unknown; service_tier?: unknown } | null;
  if (chat === null) return { body: raw, usage: null }; // not JSON: passed on as the provider sent it
  const response = chatToResponse(chat, answer.of.ctx.body, { responseId: newResponseId(), now: Date.now() }, answer.model);
  return { body: JSON.stringify(response), usage: readUsage(chat?.usage, undefined, chat?.service_tier) };
}

/**
 * A provider's refusal (4xx) in OpenAI's shape, naming the parameters the client sent when the
 * request was translated.
 */
export function refusalBody(refused: ClientError): Buffer | string {
  const shaped = openAiError(refused.upstream.body!);
  const raw = shaped === null ? refused.upstream.body! : Buffer.from(shaped);
  if (refused.ctx.api !== 'responses' || refused.api !== 'chat') return raw;
  return renameErrorParam(raw, refused.ctx.body) ?? raw;
}

const stringOrNull = (v: unknown): string | null => (typeof v === 'string' ? v : null);

/**
 * A JSON refusal whose message is not where OpenAI's clients read it (`error.message`), moved
 * there; null for one already so (passed on as it came) or none to move. Mistral and vLLM give
 * OpenAI's fields at the top level (`{"object":"error","message",…}`, Mistral's validation errors
 * as a `message` object with their list in `detail`), Ollama and TGI the error as a string
 * (`{"error":"…"}`), servers built on FastAPI its `detail` (a string, or the validation errors as a
 * list): the SDK read each as no error at all ("422 status code (no body)").
 */
function openAiError(raw: Buffer): string | null {
  const parsed = parseJson(raw.toString('utf8'));
  if (Array.isArray(parsed)) return listedError(parsed);
  if (!isObject(parsed) || isObject(parsed.error)) return null;
  const detail = typeof parsed.detail === 'string' || parsed.detail === undefined ? parsed.detail : jsonText(parsed.detail);
  const nested = isObject(parsed.message) && parsed.message.detail !== undefined ? jsonText(parsed.message.detail) : undefined;
  const message =
    typeof parsed.error === 'string' ? parsed.error : typeof parsed.message === 'string' ? parsed.message : (nested ?? detail);
  if (typeof message !== 'string' || !message) return null;
  const type = stringOrNull(parsed.type) ?? stringOrNull(parsed.error_type) ?? 'invalid_request_error';
  return JSON.stringify({ error: { message, type, param: stringOrNull(parsed.param), code: stringOrNull(parsed.code) } });
}

/**
 * Gemini's OpenAI-compatible endpoint gives its error object in a list of one
 * (`[{"error":{"code":400,"message","status":"INVALID_ARGUMENT"}}]`), where the SDK finds no error.
 */
function listedError(list: unknown[]): string | null {
  const error = list.length === 1 && isObject(list[0]) && isObject(list[0].error) ? list[0].error : null;
  if (!error || typeof error.message !== 'string' || !error.message) return null;
  const type = stringOrNull(error.type) ?? 'invalid_request_error';
  const code = stringOrNull(error.code) ?? stringOrNull(error.status);
  return JSON.stringify({ error: { message: error.message, type, param: stringOrNull(error.param), code } });
}

/**
 * The error a provider reports inside its chat-completions stream, or null: a chunk
 * `{"error": …}`, or a choice that finished with `error` (OpenRouter's way, the error beside it).
 * One rule for the chat stream passed through and for its Responses translation, streamed or whole
 * (a whole answer may carry one the same way): either way the call failed, though the stream may
 * end properly after it.
 */
import { isObject } from './json-object';
type Json = Record<string, unknown>;
const REPORTED = 'the provider reported an error';

export function chatStreamError(chunk: Json): string | null {
  const error = chunk.error;
  if (isObject(error) && typeof error.message === 'string' && error.message) return error.message;
  if (typeof error === 'string' && error) return error;
  if (error !== undefined && error !== null) return REPORTED;
  const choices = Array.isArray(chunk.choices) ? chunk.choices : [];
  return choices.some((c) => isObject(c) && c.finish_reason === 'error') ? REPORTED : null;
}

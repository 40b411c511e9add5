/**
 * The error a provider reports inside its chat-completions stream, or null: a chunk
 * `{"error": …}`, or a choice that finished with `error` (OpenRouter's way, the error beside it)
 * or `abort` (vLLM's for a generation its engine aborted: a shutdown, a pause).
 * One rule for the chat stream passed through and for its Responses translation: either way the
 * call failed, though the stream may end properly after it.
 */
import { isObject, parseJson } from './json-object';
import { firstEventData } from './sse';
type Json = Record<string, unknown>;
const REPORTED = 'the provider reported an error';
const FAILED: Record<string, string> = { error: REPORTED, abort: 'the provider aborted the answer' };

export function chatStreamError(chunk: Json): string | null {
  const error = chunk.error;
  if (isObject(error) && typeof error.message === 'string' && error.message) return error.message;
  if (typeof error === 'string' && error) return error;
  if (error !== undefined && error !== null) return REPORTED;
  const choices = Array.isArray(chunk.choices) ? chunk.choices : [];
  const failed = choices.find((c) => isObject(c) && typeof c.finish_reason === 'string' && Object.hasOwn(FAILED, c.finish_reason));
  return failed ? FAILED[failed.finish_reason] : null;
}

/** A literal `"error"` or `"abort"` cannot occur inside a JSON string (its quotes would be escaped). */
const ERROR_KEY = Buffer.from('"error"');
const ABORT = Buffer.from('"abort"');

/**
 * The error a whole chat answer reports in its body, or null (OpenRouter answers `200` once
 * generation began, and a failure after that comes in the body). Most answers have no `"error"`
 * (nor `"abort"`) at all and are not parsed (this runs on every whole answer); a body that is not JSON reports none.
 */
export function answerError(body: Buffer): string | null {
  if (body.indexOf(ERROR_KEY) === -1 && body.indexOf(ABORT) === -1) return null;
  const json = parseJson(body.toString('utf8')); // after a byte-order mark too, as the client reads it
  return isObject(json) ? chatStreamError(json) : null;
}

/**
 * The data of a chat stream's first event when `first` (the chunk it begins in) holds it whole and
 * it reports an error, else null. OpenRouter answers `200` and sends comments while the model has
 * not started: a failure before its first token then comes as that first event, when the client
 * has seen nothing yet. Most first chunks have no `"error"` (nor `"abort"`) at all and are not parsed.
 */
export function firstEventError(first: Buffer): Buffer | null {
  if (first.indexOf(ERROR_KEY) === -1 && first.indexOf(ABORT) === -1) return null;
  // A CR it ends in ends its line (the stream is handed on at a blank line, upstream.ts), though the
  // parser alone would wait for a LF: CR-only line ends, or a CRLF split between its CR and LF.
  const data = firstEventData(first);
  if (data === null) return null;
  const event = Buffer.from(data);
  return answerError(event) === null ? null : event;
}

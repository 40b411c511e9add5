/**
 * A chat choice's logprobs (`choice.logprobs.content`, whole or one chunk's) as the Responses API
 * gives them on the output text: each token with its bytes, log probability and top alternatives.
 */
import type { ResponseOutputText } from 'openai/resources/responses/responses';
import { isObject } from '../json-object';

type Logprob = ResponseOutputText.Logprob;

const isByte = (b: unknown) => Number.isInteger(b) && (b as number) >= 0 && (b as number) <= 255;

/**
 * The token's bytes as given, else its UTF-8 bytes (some providers leave them out): anything but
 * bytes is not passed on (a client could not read it, nor could deep nesting be serialized again).
 */
function bytesOf(entry: Record<string, unknown>, token: string): number[] {
  return Array.isArray(entry.bytes) && entry.bytes.every(isByte) ? (entry.bytes as number[]) : [...Buffer.from(token)];
}

function tokenOf(entry: unknown): Omit<Logprob, 'top_logprobs'> | null {
  if (!isObject(entry) || typeof entry.token !== 'string' || typeof entry.logprob !== 'number') return null;
  return { token: entry.token, bytes: bytesOf(entry, entry.token), logprob: entry.logprob };
}

/** The output text's logprobs in a chat choice (an empty list when it has none). */
export function logprobsOf(choiceLogprobs: unknown): Logprob[] {
  const content = isObject(choiceLogprobs) && Array.isArray(choiceLogprobs.content) ? choiceLogprobs.content : [];
  return content.flatMap((entry: unknown) => {
    const token = tokenOf(entry);
    if (!token) return [];
    const top = isObject(entry) && Array.isArray(entry.top_logprobs) ? entry.top_logprobs : [];
    return [{ ...token, top_logprobs: top.flatMap((t: unknown) => tokenOf(t) ?? []) }];
  });
}

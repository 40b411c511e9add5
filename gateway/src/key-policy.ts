/**
 * What a valid client key may do: the models it may ask for, the tenant it speaks for, and its own
 * requests and tokens per minute (fixed one-minute windows on the shared limiter, so they hold
 * across instances with Redis).
 *
 * `x-customer-id` may repeat the key's tenant or be left out; naming another tenant is refused
 * (403) rather than ignored: a backend that sends it believes it bills that tenant, and quietly
 * billing another would hide its mistake. (OpenAI refuses an `OpenAI-Organization` header that does
 * not match the key in the same way.)
 */
import { cutText } from '../../schema/cut-text';
import type { Admission, Rejection } from './admission';
import type { ClientKey } from './client-keys';
import { openAiError, type OpenAiError } from './errors';
import type { KeyRequests, Limiter } from './rate-limit';

export interface KeyRefusal {
  status: 403;
  error: OpenAiError;
}

const quoted = (names: string[]) => names.map((n) => `"${n}"`).join(', ');

/** Why this key may not make this request (403), or null. */
export function keyRefusal(key: ClientKey, model: string, customerHeader: string | undefined): KeyRefusal | null {
  if (key.models.length && !key.models.includes(model)) {
    const message = `model "${model}" is not allowed for this API key; it may use ${quoted(key.models)}`;
    return { status: 403, error: openAiError(message, 'invalid_request_error', 'model', 'model_not_allowed') };
  }
  return tenantRefusal(key, customerHeader);
}

/** Why this key may not speak for the tenant `x-customer-id` names (403), or null. */
export function tenantRefusal(key: ClientKey, customerHeader: string | undefined): KeyRefusal | null {
  if (!customerHeader || customerHeader === key.tenant) return null;
  // Quoted cut short: the caller's header, up to the 1,000 characters a meter event holds.
  const message = `x-customer-id "${cutText(customerHeader, 100)}" does not match this API key's tenant "${key.tenant}": send the key's tenant or leave the header out`;
  return { status: 403, error: openAiError(message, 'invalid_request_error', 'x-customer-id', 'tenant_mismatch') };
}

/** What counting tokens against a key's `--tpm` needs of it: all a queued job keeps of its key (cold-queue.ts). */
export type TokensKey = Pick<ClientKey, 'id' | 'tpm'>;

const requestsCounter = (key: ClientKey) => `key:${key.id}:requests`;
const tokensCounter = (key: Pick<ClientKey, 'id'>) => `key:${key.id}:tokens`;

function over(retryAfterS: number, code: string, message: string): Rejection {
  return { kind: 'reject', status: 429, retryAfterS, code, message };
}

/**
 * The key's `--tpm`, before routing: a 429 admission, or null. A store that fails lets the request
 * through (as the tenant limit does). Read before the request is counted (admission.ts counts it
 * against the key's `--rpm` and its tenant's limit in one step): one refused for its tokens takes
 * none of the key's requests of the minute (which later said `key_requests_per_minute` instead).
 */
export async function keyTokenLimit(limiter: Limiter, key: ClientKey): Promise<Admission | null> {
  if (!key.tpm) return null;
  const { count, retryAfterS } = await limiter.countWindow(tokensCounter(key), 0).catch(() => ({ count: 0, retryAfterS: 0 }));
  if (count < key.tpm) return null;
  return over(retryAfterS, 'key_tokens_per_minute', `API key ${key.id} has used its limit of ${key.tpm} tokens per minute`);
}

/** The key's requests per minute for the limiter, when it has `--rpm`. */
export const keyRequests = (key: ClientKey | undefined): KeyRequests | undefined =>
  key?.rpm ? { counter: requestsCounter(key), rpm: key.rpm } : undefined;

/** The refusal of a key at its `--rpm`. */
export const overKeyRequests = (key: ClientKey, retryAfterS: number): Rejection =>
  over(retryAfterS, 'key_requests_per_minute', `API key ${key.id} is over its limit of ${key.rpm} requests per minute`);

/** Counts an answer's tokens against its key's tokens per minute (off the request path): a live request's, or a queued job's. */
export function spendKeyTokens(limiter: Limiter, key: TokensKey | undefined, tokens: number): void {
  if (key?.tpm && tokens > 0) void limiter.countWindow(tokensCounter(key), tokens).catch(() => undefined);
}

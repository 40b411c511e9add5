/**
 * The response headers every routed answer carries: which tier, provider and model answered, after
 * how many calls; and a provider's answer, its request id.
 */
import type { OutgoingHttpHeaders } from 'node:http';

const LONE_SURROGATES = /\p{Cs}/gu;

/**
 * A header value as it may be sent: printable ASCII stays as it is; anything else (a model name
 * with an emoji, a newline from a caller) is percent-encoded, so no caller text can make a header
 * invalid (a 500 after the work was accepted) or inject another header.
 */
function headerValue(text: string): string {
  if (/^[\x20-\x7e]*$/.test(text)) return text;
  // encodeURIComponent throws on a lone surrogate (half a UTF-16 pair): it becomes U+FFFD first.
  return encodeURIComponent(text.replace(LONE_SURROGATES, '\ufffd'));
}

export function routeHeaders(tier: string, provider: string, model: string, attempts: number): OutgoingHttpHeaders {
  return {
    'x-route-tier': tier,
    'x-route-provider': headerValue(provider),
    'x-route-model': headerValue(model),
    'x-route-attempts': String(attempts),
  };
}

/** Longer ids are not a provider's (OpenAI's are `req_` and 32 hex digits). */
const MAX_REQUEST_ID = 200;

/**
 * The provider's own id of its answer (`x-request-id`), passed on: OpenAI's SDKs give it as
 * `_request_id` (and an error's `requestID`), which the provider's support asks for, as they would
 * have had it calling the provider directly.
 */
export function withRequestId(headers: OutgoingHttpHeaders, upstream: Record<string, string | string[] | undefined>): OutgoingHttpHeaders {
  const id = upstream['x-request-id'];
  if (typeof id === 'string' && id) headers['x-request-id'] = headerValue(id.slice(0, MAX_REQUEST_ID));
  return headers;
}

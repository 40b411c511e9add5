/**
 * Token check for every web-app request: `?token=` first, else the body's `token` field.
 * The comparison takes the same time wherever the first difference is, so response timing does
 * not reveal how much of a guess was right.
 */

export function constantTimeEqual(a: string, b: string): boolean {
  let diff = a.length ^ b.length;
  const n = Math.max(a.length, b.length);
  for (let i = 0; i < n; i++) {
    diff |= (a.charCodeAt(i % (a.length || 1)) || 0) ^ (b.charCodeAt(i % (b.length || 1)) || 0);
  }
  return diff === 0;
}

/** The token a request carries: the query parameter wins over the body field. */
export function requestToken(query: Record<string, unknown> | undefined, body: unknown): string {
  const fromQuery = query?.token;
  if (typeof fromQuery === 'string' && fromQuery !== '') return fromQuery;
  if (body && typeof body === 'object' && !Array.isArray(body)) {
    const fromBody = (body as Record<string, unknown>).token;
    if (typeof fromBody === 'string') return fromBody;
  }
  return '';
}

/** No secret configured means the web app is open (docs/meter.md: setup() makes one); otherwise the token must match. */
export function isAuthorized(secret: string, token: string): boolean {
  if (secret === '') return true;
  return constantTimeEqual(secret, token);
}

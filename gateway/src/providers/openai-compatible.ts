/**
 * The OpenAI-compatible adapter: `POST {baseUrl}/chat/completions` with a bearer key, and the
 * usage read from the answer's `usage` object.
 */
import type { ApiKind } from '../request-context';
import { searchesIn } from '../searches';
import { readUsage, type ProviderAdapter, type Usage } from './adapter';

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const USAGE_KEY = Buffer.from('"usage"');
const TIER_KEY = Buffer.from('"service_tier"');
/** The tier of nearly every OpenAI answer: priced as no tier at all, so not read into a string. */
const DEFAULT_TIER = Buffer.from('"default"');

const isSpace = (c: number | undefined) => c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;

/** Where the value of a key that ends at `i` begins (past `:` and the spaces around it); -1 without a `:`. */
function valueAfter(body: Buffer, i: number): number {
  while (isSpace(body[i])) i++;
  if (body[i] !== 0x3a /* : */) return -1;
  i++;
  while (isSpace(body[i])) i++;
  return i;
}

/**
 * The `"usage": {...}` object of an OpenAI-style response, parsed on its own: the usage comes
 * last, after the choices, whose text is most of the body, so reading only it spares a parse of
 * the whole answer on every call. A literal `"usage"` cannot occur inside a JSON string (its
 * quotes would be escaped), so the last one followed by `:` and `{` is the key. Anything
 * unexpected → undefined, and the caller parses the whole body. `end`: where the object ends.
 */
function usageObject(body: Buffer): { usage: unknown; end: number } | undefined {
  const at = body.lastIndexOf(USAGE_KEY);
  if (at < 1 || body[at - 1] === BACKSLASH) return undefined;
  let i = valueAfter(body, at + USAGE_KEY.length);
  if (i < 0 || body[i] !== 0x7b /* { */) return undefined;
  const start = i;
  let depth = 0;
  let inString = false;
  for (; i < body.length; i++) {
    const c = body[i];
    if (inString) {
      if (c === BACKSLASH) i++;
      else if (c === QUOTE) inString = false;
    } else if (c === QUOTE) inString = true;
    else if (c === 0x7b) depth++;
    else if (c === 0x7d && --depth === 0) {
      try {
        return { usage: JSON.parse(body.toString('utf8', start, i + 1)), end: i + 1 };
      } catch {
        return undefined;
      }
    }
  }
  return undefined;
}

/**
 * The answer's `"service_tier": "…"` from `from` on, as usageObject reads the usage (the key cannot
 * occur inside a string); undefined without one.
 */
function tierAfter(body: Buffer, from: number): string | undefined {
  const at = body.indexOf(TIER_KEY, from);
  const i = at === -1 ? -1 : valueAfter(body, at + TIER_KEY.length);
  if (i < 0 || body.indexOf(DEFAULT_TIER, i) === i) return undefined;
  const end = body[i] === QUOTE ? body.indexOf(QUOTE, i + 1) : -1;
  return end > i && end - i <= 32 ? body.toString('latin1', i + 1, end) : undefined;
}

/** The provider path of each API, under the route's base URL. */
const API_PATH: Record<ApiKind, string> = { chat: '/chat/completions', responses: '/responses', embeddings: '/embeddings' };

// Each route's URL per API made once (this runs on every call).
const urls = new Map<string, string>();
function urlOf(baseUrl: string, api: ApiKind): string {
  const key = `${api} ${baseUrl}`;
  let url = urls.get(key);
  if (url === undefined) {
    url = `${baseUrl.replace(/\/+$/, '')}${API_PATH[api]}`;
    urls.set(key, url);
  }
  return url;
}

export const openAiCompatible: ProviderAdapter = {
  request(route, api, body, apiKey, idempotencyKey) {
    return {
      url: urlOf(route.baseUrl, api),
      headers: {
        authorization: `Bearer ${apiKey}`,
        'content-type': 'application/json',
        'idempotency-key': idempotencyKey,
      },
      body: JSON.stringify({ ...body, model: route.model }),
    };
  },
  usage(body, api) {
    const usage = usageOf(body, api);
    return usage && api === 'responses' ? { ...usage, ...searchesIn(body) } : usage;
  },
};

/** The usage of a whole answer, with the tier it names. */
function usageOf(body: Buffer, api: ApiKind): Usage | null {
  const found = usageObject(body);
  // OpenAI's chat answer names its tier after the usage (a short tail to search); a response before it.
  if (found !== undefined) return readUsage(found.usage, api, tierAfter(body, api === 'responses' ? 0 : found.end));
  try {
    const whole = JSON.parse(body.toString('utf8')) as { usage?: unknown; service_tier?: unknown } | null;
    return readUsage(whole?.usage, api, whole?.service_tier);
  } catch {
    return null;
  }
}

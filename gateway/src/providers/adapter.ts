/**
 * One interface for every provider (after Portkey's gateway): how to call it and how to read its
 * usage. Document 1 calls every provider at `POST {baseUrl}/chat/completions` in OpenAI's format;
 * a provider that is not natively compatible is reached through a gateway that offers that path,
 * so today one adapter serves every kind. A native adapter would be added here, by kind.
 */
import type { RouteConfig } from '../routes-map';

export interface Usage {
  input_tokens: number;
  output_tokens: number;
  /** Cost in USD when the provider reports it (some gateways do); else computed from prices. */
  cost_usd?: number;
}

export interface OutboundRequest {
  url: string;
  headers: Record<string, string>;
  body: string;
}

export interface ProviderAdapter {
  request(route: RouteConfig, body: Record<string, unknown>, apiKey: string, idempotencyKey: string): OutboundRequest;
  /** Usage of a whole (non-streamed) response body, as the provider sent it. */
  usage(body: Buffer): Usage | null;
}

function readUsage(u: unknown): Usage | null {
  if (!u || typeof u !== 'object') return null;
  const x = u as Record<string, unknown>;
  const num = (v: unknown) => (typeof v === 'number' && Number.isFinite(v) ? v : undefined);
  const input = num(x.prompt_tokens) ?? num(x.input_tokens);
  const output = num(x.completion_tokens) ?? num(x.output_tokens);
  if (input === undefined && output === undefined) return null;
  const cost = num(x.cost) ?? num(x.total_cost);
  return { input_tokens: input ?? 0, output_tokens: output ?? 0, ...(cost === undefined ? {} : { cost_usd: cost }) };
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const USAGE_KEY = Buffer.from('"usage"');

/**
 * The `"usage": {...}` object of an OpenAI-style response, parsed on its own: the usage comes
 * last, after the choices, whose text is most of the body, so reading only it spares a parse of
 * the whole answer on every call. A literal `"usage"` cannot occur inside a JSON string (its
 * quotes would be escaped), so the last one followed by `:` and `{` is the key. Anything
 * unexpected → undefined, and the caller parses the whole body.
 */
function usageObject(body: Buffer): unknown {
  const at = body.lastIndexOf(USAGE_KEY);
  if (at < 1 || body[at - 1] === BACKSLASH) return undefined;
  let i = at + USAGE_KEY.length;
  const skipSpace = () => {
    while (i < body.length && (body[i] === 0x20 || body[i] === 0x0a || body[i] === 0x0d || body[i] === 0x09)) i++;
  };
  skipSpace();
  if (body[i] !== 0x3a /* : */) return undefined;
  i++;
  skipSpace();
  if (body[i] !== 0x7b /* { */) return undefined;
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
        return JSON.parse(body.toString('utf8', start, i + 1));
      } catch {
        return undefined;
      }
    }
  }
  return undefined;
}

export const openAiCompatible: ProviderAdapter = {
  request(route, body, apiKey, idempotencyKey) {
    return {
      url: `${route.baseUrl.replace(/\/+$/, '')}/chat/completions`,
      headers: {
        authorization: `Bearer ${apiKey}`,
        'content-type': 'application/json',
        'idempotency-key': idempotencyKey,
      },
      body: JSON.stringify({ ...body, model: route.model }),
    };
  },
  usage(body) {
    const usage = usageObject(body);
    if (usage !== undefined) return readUsage(usage);
    try {
      return readUsage((JSON.parse(body.toString('utf8')) as { usage?: unknown } | null)?.usage);
    } catch {
      return null;
    }
  },
};

const ADAPTERS: Record<string, ProviderAdapter> = {};

export function adapterFor(kind: string): ProviderAdapter {
  return ADAPTERS[kind] ?? openAiCompatible;
}

export { readUsage };

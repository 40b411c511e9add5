/**
 * cost_usd of a call: the provider's own figure when it reports one, else computed from model
 * prices (@pydantic/genai-prices, pinned: prices change only when we upgrade it), cached input
 * tokens at the model's cache-read price (those written to it at its cache-write price), audio
 * tokens at its audio rates, at the rates of the service tier the answer names (service-tier.ts),
 * and a response's searches at the model's per-search prices (searches.ts).
 * A model with no known price (or none at that tier) leaves cost empty (never a silent 0) and says
 * so once in the log.
 */
import { calcPrice, type ModelPrice } from '@pydantic/genai-prices';
import type { Usage } from './providers/adapter';
import { tierFactor } from './service-tier';

const unpriced = new Set<string>();
/**
 * calcPrice matches the model against every known model (~30 µs); remember answers per usage, of
 * models whose price does not depend on when the call is made (DeepSeek's cheaper hours, a price
 * that changes from a date: those are priced each time).
 */
const cache = new Map<string, number | null>();
const CACHE_LIMIT = 10_000;

export function costUsd(provider: string, model: string, usage: Usage, warn: (message: string) => void): number | null {
  if (usage.cost_usd !== undefined) return usage.cost_usd;
  const cacheKey = `${provider}\u0000${model}\u0000${usage.input_tokens}\u0000${usage.output_tokens}\u0000${usage.cached_input_tokens ?? 0}\u0000${usage.cache_write_tokens ?? 0}\u0000${usage.input_audio_tokens ?? 0}\u0000${usage.output_audio_tokens ?? 0}${usage.service_tier || usage.web_searches || usage.file_searches ? `\u0000${usage.service_tier}\u0000${usage.web_searches}\u0000${usage.file_searches}` : ''}`;
  const hit = cache.get(cacheKey);
  if (hit !== undefined) return hit;
  const { cost, fixed } = compute(provider, model, usage, warn);
  if (!fixed) return cost;
  if (cache.size >= CACHE_LIMIT) cache.clear();
  cache.set(cacheKey, cost);
  return cost;
}

/**
 * The usage in genai-prices' terms. Cached input is part of input_tokens, as genai-prices counts it,
 * and priced at the cache-read rate, input written to the cache at the cache-write rate; so is
 * audio (a transcription model's input, a spoken chat answer's), at the model's audio rates. How
 * much of the cached input was audio no answer says: the least it can be (a model with a
 * cached-audio price needs the figure).
 */
function priceUsage(usage: Usage): Record<string, number> {
  const cached = usage.cached_input_tokens ?? 0;
  const inAudio = usage.input_audio_tokens ?? 0;
  return {
    input_tokens: usage.input_tokens,
    output_tokens: usage.output_tokens,
    cache_read_tokens: cached,
    ...(usage.cache_write_tokens ? { cache_write_tokens: usage.cache_write_tokens } : {}),
    ...(inAudio ? { input_audio_tokens: inAudio, cache_audio_read_tokens: Math.max(0, cached + inAudio - usage.input_tokens) } : {}),
    ...(usage.output_audio_tokens ? { output_audio_tokens: usage.output_audio_tokens } : {}),
  };
}

/** OpenAI's price of its search tools, per thousand calls, for any model (the list gives some models none). */
const OPENAI_SEARCH_KCOUNT = { web_searches_kcount: 10, storage_searches_kcount: 2.5 };

/**
 * What the searches of a response cost at the model's per-thousand prices (tokens aside, at any
 * tier); null when one has none.
 */
function searchFees(provider: string, prices: ModelPrice, usage: Usage): number | null {
  const fallback = provider === 'openai' ? OPENAI_SEARCH_KCOUNT : undefined;
  let fees = 0;
  for (const [count, key] of [
    [usage.web_searches, 'web_searches_kcount'],
    [usage.file_searches, 'storage_searches_kcount'],
  ] as const) {
    if (!count) continue;
    const price = prices[key] ?? fallback?.[key];
    if (typeof price !== 'number') return null;
    fees += (count * price) / 1000;
  }
  return fees;
}

function compute(provider: string, model: string, usage: Usage, warn: (message: string) => void): { cost: number | null; fixed: boolean } {
  const tokens = priceUsage(usage);
  let price: ReturnType<typeof calcPrice>;
  try {
    price = calcPrice(tokens, model, { providerId: provider }) ?? calcPrice(tokens, model);
  } catch {
    price = null;
  }
  const factor = price ? tierFactor(provider, price.model.id, usage.service_tier) : null;
  const fees = price ? searchFees(provider, price.model_price, usage) : null;
  const fixed = !price || !Array.isArray(price.model.prices); // a list of prices: each for its own time
  // The price table's binary arithmetic leaves tails (11 tokens at $0.15/M: 0.0000016499999999999999);
  // kept to the nano-dollar, as the archive stores costs (DECIMAL(18,9)) and the phone bridge rounds its own.
  if (price && factor !== null && fees !== null) return { cost: Number((price.total_price * factor + fees).toFixed(9)), fixed };
  const key = !price
    ? `${provider}/${model}`
    : factor === null
      ? `${provider}/${model} at service tier ${usage.service_tier}`
      : `${provider}/${model} searches`;
  if (!unpriced.has(key)) {
    unpriced.add(key);
    warn(`no price known for ${key}: its events carry an empty cost_usd (set prices or report cost upstream)`);
  }
  return { cost: null, fixed };
}

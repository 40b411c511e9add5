/**
 * What a call served at one of OpenAI's service tiers costs against its standard price: the
 * price list (genai-prices) has standard rates only, while OpenAI's answer names the tier that
 * served it (`service_tier`), asked for by the client or set as its project's default. Flex is
 * billed at half the standard rates (Batch's), every part of the usage alike. Priority ("fast")
 * has a premium per model, the same for input, cached input and output: OpenAI's priority rates
 * over its standard ones (gpt-4.1 $3.50/$0.875/$14.00 per million against $2/$0.50/$8), for the
 * models it lists, by the price list's model id. Another tier, or priority for a model not listed,
 * has no known price (null).
 */
const PRIORITY: Record<string, number> = {
  'gpt-5': 2,
  'gpt-5.1': 2,
  'gpt-5.2': 2,
  'gpt-5.4': 2,
  'gpt-5.4-mini': 2,
  'gpt-5-mini': 1.8,
  'gpt-4.1': 1.75,
  'gpt-4.1-mini': 1.75,
  'gpt-4.1-nano': 2,
  'gpt-4o': 1.7,
  'gpt-4o-2024-05-13': 1.75,
  'gpt-4o-mini': 5 / 3,
  o3: 1.75,
  'o4-mini': 20 / 11,
};

/** Tiers billed at the standard rates: `scale` draws on units bought ahead, billed as standard beyond them. */
const STANDARD = new Set(['default', 'auto', 'standard', 'scale']);

/** The factor on the standard price of `modelId` (the price list's) at `tier`; null when no price is known. */
export function tierFactor(provider: string, modelId: string, tier: string | undefined): number | null {
  if (tier === undefined || provider !== 'openai' || STANDARD.has(tier)) return 1;
  if (tier === 'flex') return 0.5;
  if (tier === 'priority' || tier === 'fast') return PRIORITY[modelId] ?? null;
  return null;
}

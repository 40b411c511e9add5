/** The adapter of each provider kind; every kind without its own speaks OpenAI's format. */
import type { ProviderAdapter } from './adapter';
import { mistral } from './mistral';
import { openAiCompatible } from './openai-compatible';

const ADAPTERS: Record<string, ProviderAdapter> = { mistral };

export function adapterFor(kind: string): ProviderAdapter {
  return ADAPTERS[kind] ?? openAiCompatible;
}

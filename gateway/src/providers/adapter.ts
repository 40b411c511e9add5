/**
 * One interface for every provider: how to call it and how to read its usage. Every provider is
 * called in OpenAI's format (`POST {baseUrl}/chat/completions`); a provider that is not natively
 * compatible is reached through a gateway that offers that path, so one adapter serves every kind
 * but `mistral`, whose own (mistral.ts) sends a request as Mistral takes it (registry.ts).
 */
import type { ApiKind } from '../request-context';
import type { RouteConfig } from '../routes-map';
import { fieldsOf } from '../json-object';

export interface Usage {
  /** All input tokens, cached ones included (the meter's input_tokens). */
  input_tokens: number;
  output_tokens: number;
  /** Of the input, tokens read from the provider's prompt cache (priced lower). */
  cached_input_tokens?: number;
  /** Of the input, tokens written to the provider's prompt cache (some models price them higher). */
  cache_write_tokens?: number;
  /** Of the input, audio tokens (priced at the model's audio rate, as a transcription model's are). */
  input_audio_tokens?: number;
  /** Of the output, audio tokens (a chat answer spoken: priced at the model's audio rate). */
  output_audio_tokens?: number;
  /** Cost in USD when the provider reports it (some gateways do); else computed from prices. */
  cost_usd?: number;
  /** Web searches a Responses answer made (`web_search_call` items), billed per search. */
  web_searches?: number;
  /** File searches a Responses answer made (`file_search_call` items), billed per search. */
  file_searches?: number;
  /** The tier the answer says served the call (OpenAI's `service_tier`: `priority`, `flex`), priced at its rates. */
  service_tier?: string;
}

export interface OutboundRequest {
  url: string;
  headers: Record<string, string>;
  body: string;
}

export interface ProviderAdapter {
  request(route: RouteConfig, api: ApiKind, body: Record<string, unknown>, apiKey: string, idempotencyKey: string): OutboundRequest;
  /** Usage of a whole (non-streamed) response body, as the provider sent it. */
  usage(body: Buffer, api: ApiKind): Usage | null;
}

/**
 * `api`: for embeddings, which have no output, a lone `total_tokens` is the input (Voyage AI's
 * answer carries nothing else); for the others it mixes input and output, so it is no usage.
 * `tier`: the answer's `service_tier`, beside its usage (not inside it).
 */
export function readUsage(u: unknown, api?: ApiKind, tier?: unknown): Usage | null {
  if (!u || typeof u !== 'object') return null;
  const x = u as Record<string, unknown>;
  const num = (v: unknown) => (typeof v === 'number' && Number.isFinite(v) ? v : undefined);
  const input = num(x.prompt_tokens) ?? num(x.input_tokens) ?? (api === 'embeddings' ? num(x.total_tokens) : undefined);
  const output = num(x.completion_tokens) ?? num(x.output_tokens);
  if (input === undefined && output === undefined) return null;
  const cost = num(x.cost) ?? num(x.total_cost);
  // Chat's prompt_tokens_details, Responses' input_tokens_details; audio only in chat's.
  const inDetails = fieldsOf(x.prompt_tokens_details ?? x.input_tokens_details);
  const cached = num(inDetails.cached_tokens);
  const written = num(inDetails.cache_write_tokens);
  const inAudio = num(inDetails.audio_tokens);
  const outAudio = num(fieldsOf(x.completion_tokens_details).audio_tokens);
  return {
    input_tokens: input ?? 0,
    output_tokens: output ?? 0,
    ...(cached ? { cached_input_tokens: cached } : {}),
    ...(written ? { cache_write_tokens: written } : {}),
    ...(inAudio ? { input_audio_tokens: inAudio } : {}),
    ...(outAudio ? { output_audio_tokens: outAudio } : {}),
    ...(cost === undefined ? {} : { cost_usd: cost }),
    ...(typeof tier === 'string' && tier ? { service_tier: tier } : {}),
  };
}

/**
 * Each realtime response is a model call of the meter (one row per model call), sent through the
 * same sink as chat calls so the daily and 7-day caps, the digest and the archive include the
 * phone. Tokens are the response's usage; the cost is its audio and text tokens at the
 * configuration's per-million prices (cached input at the cached price, if set), exactly what the
 * spend guard bills (usageCost), so the meter, the guard and the call record agree. The
 * usage is the cleaned one (usage.ts), the same the guard is given: every count whole and >= 0.
 * A response that reported no usage (none, not an object, or no audio count the cleaning kept) has
 * an unknown cost, not $0: its event carries an empty cost and `UNPRICED` (schema/unpriced.ts),
 * which the meter counts and shows. A response with text tokens and a configuration without text
 * prices has a cost known only in part: its event carries the part known (the audio, which the
 * totals keep) and `UNPRICED`, so the meter shows the cost is not whole.
 */
import { randomUUID } from 'node:crypto';
import type { RealtimeResponse } from 'openai/resources/realtime/realtime';
import type { EventRecord } from '../../../../schema/event-record';
import { markUnpriced } from '../../../../schema/unpriced';
import type { Concierge } from '../config';
import { tokenPrices, usageCost } from '../spend-guard';
import type { Usage } from './usage';

export interface ResponseFacts {
  config: Pick<Concierge, 'meta' | 'spend_guard'>;
  provider: string;
  tenant: string;
  callId: string;
  response: RealtimeResponse | undefined;
  /** The response's usage, cleaned (never the raw one). */
  usage: Usage | undefined;
  latencyMs: number;
  confidence: number | null;
}

const STATUS_CODE: Record<string, string> = { cancelled: 'CANCELLED', incomplete: 'INCOMPLETE', failed: 'FAILED' };

export function responseEvent(f: ResponseFacts): EventRecord {
  const u = f.usage ?? {};
  const status = f.response?.status;
  // Its own names only: a status of `constructor` would put a function in the record.
  const code = status && Object.hasOwn(STATUS_CODE, status) ? STATUS_CODE[status] : '';
  // Without an audio count the guard bills the response its estimate, as one without usage: no price here either.
  const cost = f.usage ? usageCost(f.usage, tokenPrices(f.config.spend_guard)) : null;
  return callEvent(f, f.config.meta.model, {
    input_tokens: u.input_tokens ?? 0,
    output_tokens: u.output_tokens ?? 0,
    latency_ms: Math.max(0, Math.round(f.latencyMs)),
    cost_usd: cost === null ? null : Number(cost.usd.toFixed(9)),
    error_code: cost === null || cost.unpricedTextTokens > 0 ? markUnpriced(code) : code,
  });
}

/** A model call of a phone call as a meter event: the call's fields, and what this call used. */
export function callEvent(
  call: { provider: string; tenant: string; callId: string; confidence: number | null },
  model: string,
  used: Pick<EventRecord, 'input_tokens' | 'output_tokens' | 'latency_ms' | 'cost_usd' | 'error_code'>,
): EventRecord {
  return {
    event_id: randomUUID(),
    timestamp: new Date(),
    actor_type: 'agent',
    provider: call.provider,
    model,
    region: 'n/a',
    input_tokens: used.input_tokens,
    output_tokens: used.output_tokens,
    latency_ms: used.latency_ms,
    cost_usd: used.cost_usd,
    eval_score: null,
    confidence: call.confidence,
    job_id: call.callId,
    customer_id: call.tenant,
    pii_flag: false,
    review_required: false,
    reviewer_id: '',
    decision: 'n/a',
    error_code: used.error_code,
  };
}

/**
 * After each call: the call record built from the guard's state and the voice
 * server's body; the summary POSTed to the configuration's `log_to`; the record sent to the meter
 * (`{"calls":[...]}`, batched and spooled like events, none lost); and the call's audio cost (and,
 * with a rates file, its telephony cost) sent as ordinary meter events, so the spend caps and
 * alerts see voice spend. Ending a call twice answers the same record and sends nothing twice.
 */
import { createHash, randomUUID } from 'node:crypto';
import type { CallRecord } from '../../../schema/call-record';
import type { EventRecord } from '../../../schema/event-record';
import { markUnpriced } from '../../../schema/unpriced';
import { retrying, type RetryPolicy } from '../backoff';
import { MAX_CALL_S, type EndCallBody } from './bodies';
import type { StoredCall } from './call-store';
import type { Concierge } from './config';
import { inboundRate, type RatesFile } from './rates';

/** The summary is posted up to 3 times, 0.5 s then 1 s apart; an answer under 500 is not retried. */
const SUMMARY_RETRY: RetryPolicy = { attempts: 3, firstMs: 500 };

class RefusedSummary extends Error {}

const avg = (xs: number[]) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : null);
const round = (n: number, d: number) => Number(n.toFixed(d));

/**
 * Why this end cannot make the call's record, or null. Without `duration_s` the duration runs from
 * the start: an end before it, or a start longer ago than a call lasts (a start sent late, with an
 * old `at`), would be a wrong bill, so the sender is asked for the duration instead.
 */
export function endRefusal(call: StoredCall, body: EndCallBody, now: Date): string | null {
  if (call.record || body.duration_s !== undefined) return null;
  const ended = body.ended_at ? Date.parse(body.ended_at) : now.getTime();
  const seconds = (ended - Date.parse(call.started_at)) / 1000;
  if (body.ended_at && seconds < 0) return `ended_at: expected a time after the call's start (${call.started_at})`;
  if (seconds <= MAX_CALL_S) return null;
  const hours = Math.floor(seconds / 3600);
  return `duration_s: required for this call: from its start (${call.started_at}) to its end is ${hours} hours, longer than a phone call lasts (${MAX_CALL_S / 3600} hours)`;
}

export function buildCallRecord(call: StoredCall, body: EndCallBody, config: Concierge, now: Date): CallRecord {
  const s = call.state;
  const ended = body.ended_at ? Date.parse(body.ended_at) : now.getTime();
  const duration = body.duration_s ?? Math.max(0, (ended - Date.parse(call.started_at)) / 1000);
  const ttfb = avg(s.ttfbMs);
  const confidence = avg(s.confidences);
  return {
    call_id: call.call_id,
    started_at: call.started_at,
    duration_s: round(duration, 1),
    model: config.meta.model,
    intent_primary: body.intent_primary ?? s.intent,
    turns: s.turns,
    ttfb_s: ttfb === null ? null : round(ttfb / 1000, 3),
    asr_wer: body.asr_wer ?? null,
    confidence_avg: confidence === null ? null : round(confidence, 3),
    escalated: body.escalated ?? s.action === 'escalate',
    outcome: body.outcome,
    est_audio_cost_usd: round(s.estUsd, 6),
    // Telephony is billed per started minute.
    telephony_minutes: Math.ceil(duration / 60),
    country: call.country ?? '',
    // A call refused while new calls were paused says so, as the phone bridge's records do.
    ended_reason:
      body.ended_reason ?? s.reason ?? (call.action === 'voicemail' && call.voicemail_reason === 'monthly_cap' ? 'monthly_cap' : ''),
  };
}

export interface CallEndDeps {
  config: Concierge;
  /** The call record sink (the meter's `calls`, or a local CSV). */
  calls: { send(record: CallRecord): void };
  /** The event sink (the same one the gateway's model calls use). */
  events: { send(event: EventRecord): void };
  rates: () => RatesFile;
  voiceProvider: string;
  log: { warn: (m: string) => void; error: (m: string) => void };
}

function event(fields: Partial<EventRecord> & Pick<EventRecord, 'provider' | 'model' | 'cost_usd' | 'job_id'>): EventRecord {
  return {
    event_id: randomUUID(),
    timestamp: new Date(),
    actor_type: 'agent',
    region: 'n/a',
    input_tokens: 0,
    output_tokens: 0,
    latency_ms: 0,
    eval_score: null,
    confidence: null,
    customer_id: '',
    pii_flag: false,
    review_required: false,
    reviewer_id: '',
    decision: 'n/a',
    error_code: '',
    ...fields,
  };
}

/**
 * What a call cost, as the meter counts it: the model's audio and text with the caller's
 * transcriptions (the record's est_audio_cost_usd), and its telephony when priced in USD (null: not
 * metered). The month's voice spend adds this at the call's end.
 */
export function callCostUsd(record: CallRecord, telephonyUsd: number | null): number {
  return record.est_audio_cost_usd + (telephonyUsd ?? 0);
}

/** Sends everything that follows from a finished call. Nothing here is awaited by the caller's answer except the record. */
/** `tenant`: the customer_id of the call's events (the phone bridge's VOICE_TENANT; none for the endpoints'). */
/** Answers what the call cost, as metered (callCostUsd). */
export function afterCall(record: CallRecord, call: StoredCall, deps: CallEndDeps, responsesMetered = false, tenant = ''): number {
  deps.calls.send(record);
  const s = call.state;
  // Each response already went to the meter with its own usage: sending the total again would count it twice.
  if (!responsesMetered)
    deps.events.send(
      event({
        provider: deps.voiceProvider,
        model: record.model,
        input_tokens: Math.round(s.inputMs / 100),
        output_tokens: Math.round(s.outputMs / 50),
        latency_ms: Math.round(record.duration_s * 1000),
        cost_usd: record.est_audio_cost_usd,
        job_id: record.call_id,
        customer_id: tenant,
        confidence: record.confidence_avg,
        review_required: record.escalated,
        // Text tokens without a price: the cost is the part known, marked short as the bridge's events are.
        ...(s.unpricedTextTokens ? { error_code: markUnpriced('') } : {}),
      }),
    );
  const telephony = record.telephony_minutes > 0 ? telephonyCost(record, deps, tenant) : null;
  void postSummary(record, deps);
  return callCostUsd(record, telephony);
}

/**
 * The call's telephony cost as a meter event, from the rates file; a file that cannot be read, or
 * whose rate for the country is not a price, is logged (the call's end, record and summary go on).
 * Answers the USD metered (null: none).
 */
function telephonyCost(record: CallRecord, deps: CallEndDeps, tenant: string): number | null {
  let rate: ReturnType<typeof inboundRate>;
  try {
    rate = record.country ? inboundRate(deps.rates(), record.country) : null;
  } catch (error) {
    deps.log.error(
      `call ${record.call_id}: telephony cost not metered: the rates file: ${(error as Error).message} (npm run concierge:rates -- ${record.country} writes it again)`,
    );
    return null;
  }
  // The meter counts USD: a rate in another currency (an account priced in EUR) would be counted as that many dollars.
  if (rate && rate.unit.toUpperCase() !== 'USD') {
    deps.log.error(
      `call ${record.call_id}: telephony cost not metered: the rates file prices ${record.country} in ${rate.unit}, and the meter counts USD`,
    );
    return null;
  }
  if (!rate) {
    deps.log.error(
      `call ${record.call_id}: no telephony rate for country "${record.country || 'unknown'}" (run npm run concierge:rates -- ${record.country || '<ISO>'}); telephony cost not metered, no global rate assumed`,
    );
    return null;
  }
  const usd = Number((record.telephony_minutes * rate.perMinute).toFixed(6));
  deps.events.send(
    event({
      provider: 'twilio',
      model: `voice-inbound-${record.country.toLowerCase()}`,
      cost_usd: usd,
      job_id: record.call_id,
      customer_id: tenant,
    }),
  );
  return usd;
}

async function postSummary(record: CallRecord, deps: CallEndDeps): Promise<void> {
  const body = JSON.stringify({
    call_id: record.call_id,
    intent: record.intent_primary,
    status: record.outcome,
    duration_s: record.duration_s,
    turns: record.turns,
    est_audio_cost_usd: record.est_audio_cost_usd,
    escalated: record.escalated,
  });
  // One key for every try: a receiver that took a try whose answer was lost can count the call once.
  const idempotencyKey = `call-summary-${createHash('sha256').update(record.call_id).digest('hex')}`;
  const post = async () => {
    const res = await fetch(deps.config.spend_guard.log_to, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': idempotencyKey },
      body,
      signal: AbortSignal.timeout(10_000),
    });
    if (res.ok) return;
    throw res.status < 500 ? new RefusedSummary(`HTTP ${res.status}`) : new Error(`HTTP ${res.status}`);
  };
  try {
    await retrying(post, SUMMARY_RETRY, (e) => !(e instanceof RefusedSummary));
  } catch {
    deps.log.warn(`call ${record.call_id}: the observability webhook did not take the summary`);
  }
}

import { COST_LIMIT_USD, MAX_COUNT, MAX_TEXT_LENGTH, parseRfc3339 } from './event-record';
import { csvField } from './csv-cell';
import { ID_PATTERN } from './ids';
import { MeterRefusal } from './meter-reply';

/**
 * The call record of the voice concierge: one row per call. Like the event record, one definition shared by
 * the gateway (which builds it when a call ends) and the meter (its `calls` tab). Plain
 * TypeScript, no Node or Apps Script API.
 */

export const CALL_FIELDS = [
  'call_id',
  'started_at',
  'duration_s',
  'model',
  'intent_primary',
  'turns',
  'ttfb_s',
  'asr_wer',
  'confidence_avg',
  'escalated',
  'outcome',
  'est_audio_cost_usd',
  'telephony_minutes',
  'country',
  // Added after the first release: last, so rows and files written before keep their columns.
  'ended_reason',
] as const;

type CallField = (typeof CALL_FIELDS)[number];

export const INTENTS_PRIMARY = ['book', 'reschedule', 'qualify', 'pricing_deflection', 'voicemail', 'unknown'] as const;
export const OUTCOMES = ['booking', 'rescheduled', 'lead_created', 'deflected_to_pricing', 'voicemail_left', 'abandoned'] as const;

/**
 * Why a call ended, as hosted voice platforms report it: the caller hung up, the call was
 * transferred (by the agent, or for one of the concierge's escalation reasons), the per-call cap cut it,
 * the realtime model failed, the gateway shut down. The meter accepts any snake_case word, so a
 * gateway that learns a new reason never has its records refused by an older meter.
 */
export type EndedReason =
  | 'completed'
  | 'caller_hangup'
  | 'transfer'
  | 'low_confidence'
  | 'turn_cap'
  | 'latency'
  | 'frustration_markers'
  | 'caller_request'
  | 'per_call_cap'
  | 'realtime_failure'
  | 'shutdown';
const ENDED_REASON = /^[a-z][a-z0-9_]{0,63}$/;

export interface CallRecord {
  call_id: string;
  /** RFC 3339 UTC. */
  started_at: string;
  duration_s: number;
  model: string;
  intent_primary: (typeof INTENTS_PRIMARY)[number];
  turns: number;
  /** Average time to first audio, seconds; null when no response started. */
  ttfb_s: number | null;
  /** Word error rate of the sampled calls (about 10 a week); null when not sampled. */
  asr_wer: number | null;
  confidence_avg: number | null;
  escalated: boolean;
  outcome: (typeof OUTCOMES)[number];
  est_audio_cost_usd: number;
  telephony_minutes: number;
  /** ISO 3166 alpha-2; '' when unknown. */
  country: string;
  /** Why the call ended (ENDED_REASONS); '' or absent when not known (records from before the field). */
  ended_reason?: string;
}

class CallRecordError extends MeterRefusal {
  constructor(message: string) {
    super('invalid_call', message);
  }
}

/** When given (the meter's ingest), a call may start at most `maxFutureMs` after `now`. */
export interface CallCheckOptions {
  now: () => Date;
  maxFutureMs: number;
}

/**
 * Checks a record as the meter receives it: every field typed, enumerations checked, numbers within
 * the event record's limits (costs below COST_LIMIT_USD, the others at most MAX_COUNT: sums over
 * the tab stay finite), text at most MAX_TEXT_LENGTH, `started_at` RFC 3339 and, with `opts`, not
 * ahead of the clock.
 */
export function checkCallRecord(input: unknown, index?: number, opts?: CallCheckOptions): CallRecord {
  const at = (f: string) => `${index === undefined ? '' : `calls[${index}].`}${f}`;
  if (!input || typeof input !== 'object' || Array.isArray(input)) throw new CallRecordError(`${at('call')}: expected a JSON object`);
  const r = input as Record<string, unknown>;
  const str = (f: CallField, re?: RegExp) => {
    const v = r[f];
    if (typeof v !== 'string' || (re && !re.test(v)))
      throw new CallRecordError(`${at(f)}: expected ${re ? `text matching ${re}` : 'text'}`);
    // As for an event's text: longer would fail the sheet's write (50,000 characters a cell), a failure senders retry for ever.
    if (v.length > MAX_TEXT_LENGTH) throw new CallRecordError(`${at(f)}: expected text of at most ${MAX_TEXT_LENGTH} characters`);
    return v;
  };
  const num = (f: CallField, nullable = false, max = MAX_COUNT) => {
    const v = r[f];
    if (nullable && (v === null || v === undefined || v === '')) return null;
    if (typeof v !== 'number' || !Number.isFinite(v) || v < 0 || v > max)
      throw new CallRecordError(`${at(f)}: expected a number from 0 to ${max}`);
    return v;
  };
  const money = (f: CallField) => {
    const v = r[f];
    if (typeof v !== 'number' || !Number.isFinite(v) || v < 0 || v >= COST_LIMIT_USD)
      throw new CallRecordError(`${at(f)}: expected a number >= 0 and below ${COST_LIMIT_USD}`);
    return v;
  };
  const oneOf = <T extends string>(f: CallField, values: readonly T[]) => {
    const v = r[f];
    if (typeof v !== 'string' || !values.includes(v as T)) throw new CallRecordError(`${at(f)}: expected one of ${values.join(', ')}`);
    return v as T;
  };
  if (typeof r.escalated !== 'boolean') throw new CallRecordError(`${at('escalated')}: expected true or false`);
  const started = parseRfc3339(str('started_at'));
  if (!started) throw new CallRecordError(`${at('started_at')}: expected an RFC 3339 date-time`);
  if (opts && started.getTime() > opts.now().getTime() + opts.maxFutureMs)
    throw new CallRecordError(`${at('started_at')}: expected a time at most ${opts.maxFutureMs / 60_000} minutes after the meter's clock`);
  return {
    call_id: str('call_id', ID_PATTERN),
    started_at: started.toISOString(),
    duration_s: num('duration_s')!,
    model: str('model'),
    intent_primary: oneOf('intent_primary', INTENTS_PRIMARY),
    turns: num('turns')!,
    ttfb_s: num('ttfb_s', true),
    asr_wer: num('asr_wer', true, 1),
    confidence_avg: num('confidence_avg', true, 1),
    escalated: r.escalated,
    outcome: oneOf('outcome', OUTCOMES),
    est_audio_cost_usd: money('est_audio_cost_usd'),
    telephony_minutes: num('telephony_minutes')!,
    country: r.country === '' || r.country === null || r.country === undefined ? '' : str('country', /^[A-Z]{2}$/),
    ended_reason: r.ended_reason === '' || r.ended_reason === null || r.ended_reason === undefined ? '' : str('ended_reason', ENDED_REASON),
  };
}

/** The reason the meter would refuse a call record (its JSON), or null: the gateway checks before spooling. */
export function callRecordProblem(json: unknown): string | null {
  try {
    checkCallRecord(json);
    return null;
  } catch (error) {
    return (error as Error).message;
  }
}

export const CALLS_CSV_HEADER = CALL_FIELDS.join(',');

/** A record as a CSV line; a cost of null (the meter's export of a cost cell typed over by hand) is written empty. */
export function callToCsvLine(c: CallRecord | (Omit<CallRecord, 'est_audio_cost_usd'> & { est_audio_cost_usd: null })): string {
  return CALL_FIELDS.map((f) => csvField(c[f])).join(',');
}

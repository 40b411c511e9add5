/**
 * The event record: one row per model call.
 *
 * This file is the one definition of the record. The meter (Apps Script bundle) uses it to
 * validate and default what it ingests; the gateway uses it to build the events it sends. It must
 * stay plain TypeScript with no Node or Apps Script API, because it is bundled into both.
 */

import { csvField } from './csv-cell';
import { ID_PATTERN, ID_RULE } from './ids';
import { MeterRefusal, type MeterReplyCode } from './meter-reply';
import { markUnpriced } from './unpriced';

/** The column order of the sheet header and of every CSV: fixed, since rows are read by position. */
export const EVENT_FIELDS = [
  'event_id',
  'timestamp',
  'actor_type',
  'provider',
  'model',
  'region',
  'input_tokens',
  'output_tokens',
  'latency_ms',
  'cost_usd',
  'eval_score',
  'confidence',
  'job_id',
  'customer_id',
  'pii_flag',
  'review_required',
  'reviewer_id',
  'decision',
  'error_code',
] as const;

export type EventField = (typeof EVENT_FIELDS)[number];

type ActorType = 'user' | 'agent' | 'human-reviewer';
type Decision = 'approved' | 'rejected' | 'edited' | 'n/a';

/** An event after ingest defaults and coercion: every field present, every value typed. */
export interface EventRecord {
  event_id: string;
  /** The instant of the call. Written to the sheet as a date-time, to CSV as RFC 3339 UTC. */
  timestamp: Date;
  /** Not checked against the enumeration at ingest (docs/meter.md), hence `string`. */
  actor_type: ActorType | string;
  provider: string;
  model: string;
  region: string;
  input_tokens: number;
  output_tokens: number;
  latency_ms: number;
  /** `null` only when nobody knows the cost (an unpriced model); see unpriced.ts for how that is recorded. */
  cost_usd: number | null;
  eval_score: number | null;
  confidence: number | null;
  job_id: string;
  customer_id: string;
  pii_flag: boolean;
  review_required: boolean;
  reviewer_id: string;
  decision: Decision | string;
  error_code: string;
}

/** What a client may send: any subset of the fields, loosely typed. Other fields are dropped. */
export type EventInput = { [K in EventField]?: unknown } & Record<string, unknown>;

type Kind = 'id' | 'time' | 'text' | 'int' | 'decimal' | 'unit' | 'bool';

/** Kind and ingest default of each field (the value stored when the field is missing). */
const FIELD_KIND: Record<EventField, Kind> = {
  event_id: 'id',
  timestamp: 'time',
  actor_type: 'text',
  provider: 'text',
  model: 'text',
  region: 'text',
  input_tokens: 'int',
  output_tokens: 'int',
  latency_ms: 'int',
  cost_usd: 'decimal',
  eval_score: 'unit',
  confidence: 'unit',
  job_id: 'text',
  customer_id: 'text',
  pii_flag: 'bool',
  review_required: 'bool',
  reviewer_id: 'text',
  decision: 'text',
  error_code: 'text',
};

const TEXT_DEFAULTS: Partial<Record<EventField, string>> = {
  actor_type: 'agent',
  provider: 'unknown',
  model: 'unknown',
  region: 'n/a',
  decision: 'n/a',
};

export type FieldKind = Kind;
/** What kind of value a field holds: id, time, text, int, decimal, unit (0..1) or bool. */
export function fieldKind(field: EventField): FieldKind {
  return FIELD_KIND[field];
}

/** Fields that hold text (written to the sheet as literal text, never parsed by it). */
export const TEXT_FIELDS: readonly EventField[] = EVENT_FIELDS.filter((f) => FIELD_KIND[f] === 'text' || FIELD_KIND[f] === 'id');

/** Longest text a field may hold. Long enough for any id or code, short enough to keep prompts out. */
export const MAX_TEXT_LENGTH = 1000;
/**
 * How far ahead of the meter's clock an event may be stamped (senders' clocks drift). Beyond it the
 * event is refused: a row from the future would count as today's spend for ever and hold back the
 * archive export.
 */
export const CLOCK_SKEW_ALLOWANCE_MS = 5 * 60_000;
/**
 * Largest count (tokens, milliseconds) accepted: beyond it a JavaScript number is no longer exact,
 * and the archive's BIGINT would refuse the row (blocking that night's file).
 */
export const MAX_COUNT = Number.MAX_SAFE_INTEGER;
/** Costs must be below this: the archive stores cost as DECIMAL(18,9), 9 digits before the point. */
export const COST_LIMIT_USD = 1e9;
/** What a number field expects, as the meter's and the archive's errors say it. */
export const EXPECTED = {
  count: 'a whole number >= 0',
  countRange: `a whole number from 0 to ${MAX_COUNT}`,
  cost: 'a number >= 0',
  costRange: `a number >= 0 and below ${COST_LIMIT_USD}`,
  unit: 'a number from 0 to 1',
} as const;

/**
 * Number text: decimal digits with an optional fraction and exponent (`42`, `.5`, `1e-7`, as JSON
 * prints numbers). No sign, since no number of the record (nor of Config) may be negative; no hex,
 * octal or binary (`Number('0x10')` is 16), no `Infinity`.
 */
export const DECIMAL_TEXT_SOURCE = String.raw`^(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$`;
const DECIMAL_TEXT = new RegExp(DECIMAL_TEXT_SOURCE);

/** The number a decimal text holds (surrounding whitespace ignored), NaN for anything else. */
export function parseDecimalText(text: string): number {
  const t = text.trim();
  return DECIMAL_TEXT.test(t) ? Number(t) : NaN;
}

/**
 * Control characters (U+0000-U+001F, U+007F-U+009F) and the line/paragraph separators U+2028/U+2029:
 * they break lines in e-mail and logs. Written as "anything but the other characters" (lint forbids
 * control characters in a pattern).
 */
const CONTROL_CHARACTERS = /[^ -~\u00a0-\u2027\u202a-\uffff]/g;

/**
 * RFC 3339 date-time: date, `T` (or space), time, optional fraction, `Z` or an offset. Its source
 * is the archive's too (archive/event-sql.ts), with the ranges below: hour 00-23, second 00-60.
 */
export const RFC3339_SOURCE = String.raw`^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$`;
const RFC3339 = new RegExp(RFC3339_SOURCE);

class EventValidationError extends MeterRefusal {
  constructor(field: string, expected: string, index?: number, code: MeterReplyCode = 'invalid_event') {
    super(code, `${index === undefined ? '' : `events[${index}].`}${field}: expected ${expected}`);
    this.name = 'EventValidationError';
  }
}

export interface NormalizeOptions {
  /** The ingest clock, for a missing timestamp. */
  now: () => Date;
  /** A UUIDv4 generator, for a missing event_id. */
  uuid: () => string;
  /** Position in a batch, so errors can say which event is wrong. */
  index?: number;
  /** Refuse timestamps later than now plus this (the meter's ingest uses CLOCK_SKEW_ALLOWANCE_MS). */
  maxFutureMs?: number;
}

function isMissing(value: unknown): boolean {
  return value === undefined || value === null || value === '';
}

/** Parses RFC 3339 strictly (a real calendar date and time), returning the instant. */
export function parseRfc3339(text: string): Date | null {
  const m = RFC3339.exec(text.trim());
  if (!m) return null;
  const [, y, mo, d, h, mi, s] = m.map(Number) as number[];
  if (mo < 1 || mo > 12 || d < 1 || h > 23 || mi > 59 || s > 60) return null;
  const daysInMonth = new Date(Date.UTC(y, mo, 0)).getUTCDate();
  if (d > daysInMonth) return null;
  // A leap second (:60) is the instant after :59, as POSIX time counts it (Date.parse refuses it).
  const leap = s === 60;
  const ms = Date.parse(
    text
      .trim()
      .replace(' ', 'T')
      .replace(/:60(?=[.Zz+-])/, ':59'),
  );
  if (!Number.isFinite(ms)) return null;
  const at = new Date(ms + (leap ? 1000 : 0));
  // An offset can carry year 0000 into year -1 (or 9999 into 10000), which toISOString writes with six
  // digits and a sign: no CSV of the export or archive holds it, and the row would stay unexported for ever.
  const year = at.getUTCFullYear();
  return year >= 0 && year <= 9999 ? at : null;
}

function coerceNumber(field: EventField, value: unknown, expected: string, index?: number): number {
  // Numbers are coerced from the sent value: a number or decimal number text
  // coerces; booleans, objects and arrays do not (Number(true) === 1 would hide a client bug).
  let n = NaN;
  if (typeof value === 'number') n = value;
  else if (typeof value === 'string') n = parseDecimalText(value);
  if (!Number.isFinite(n)) throw new EventValidationError(field, expected, index);
  return n;
}

function coerceText(field: EventField, value: unknown, index?: number): string {
  if (typeof value === 'string') {
    if (value.length > MAX_TEXT_LENGTH) {
      throw new EventValidationError(field, `text of at most ${MAX_TEXT_LENGTH} characters`, index);
    }
    // A space, not a refusal: the gateway would lose the event; a line break could forge lines in the digest e-mail.
    return value.replace(CONTROL_CHARACTERS, ' ');
  }
  if (typeof value === 'number' && Number.isFinite(value)) return String(value);
  throw new EventValidationError(field, 'a string', index);
}

function checkNotFuture(date: Date, opts: NormalizeOptions): Date {
  if (opts.maxFutureMs === undefined) return date;
  const latest = opts.now().getTime() + opts.maxFutureMs;
  if (date.getTime() <= latest) return date;
  const minutes = opts.maxFutureMs / 60_000;
  throw new EventValidationError(
    'timestamp',
    `a time at most ${minutes} minutes after the meter's clock (allowance for clock skew; latest accepted now ` +
      `${new Date(latest).toISOString()}), got ${date.toISOString()}`,
    opts.index,
    'future_timestamp',
  );
}

/**
 * Applies the ingest defaults and coercion rules to one event.
 * Throws EventValidationError naming the field when a value cannot be coerced.
 * Fields outside the 19 are dropped here, so raw prompts or completions never reach storage.
 */
export function normalizeEvent(input: unknown, opts: NormalizeOptions): EventRecord {
  const { index } = opts;
  if (typeof input !== 'object' || input === null || Array.isArray(input)) {
    throw new EventValidationError('event', 'a JSON object', index);
  }
  const src = input as EventInput;
  const out: Partial<Record<EventField, unknown>> = {};
  for (const field of EVENT_FIELDS) out[field] = fieldValue(field, src[field], opts);
  // An explicit `cost_usd: null` says the cost is unknown: the cost keeps the default, the event is marked.
  if (src.cost_usd === null) markUnpricedEvent(out, opts);
  return out as unknown as EventRecord;
}

/** One field's stored value: its default when missing, else the sent value coerced by the field's kind. */
function fieldValue(field: EventField, value: unknown, opts: NormalizeOptions): unknown {
  const { index } = opts;
  switch (FIELD_KIND[field]) {
    case 'id':
      if (isMissing(value)) return opts.uuid();
      if (typeof value !== 'string' || !ID_PATTERN.test(value)) {
        throw new EventValidationError(field, `${ID_RULE} (a UUIDv4)`, index);
      }
      return value;
    case 'time':
      return isMissing(value) ? opts.now() : timeValue(field, value, opts);
    case 'text':
      return isMissing(value) ? (TEXT_DEFAULTS[field] ?? '') : coerceText(field, value, index);
    case 'int':
      return isMissing(value) ? 0 : countValue(field, value, index);
    case 'decimal':
      if (isMissing(value)) return field === 'cost_usd' ? 0 : null;
      return costValue(field, value, index);
    case 'unit':
      return isMissing(value) ? null : unitValue(field, value, index);
    case 'bool':
      // True only when the sent value is exactly boolean true ("true" and 1 are false).
      return value === true;
  }
}

function timeValue(field: EventField, value: unknown, opts: NormalizeOptions): Date {
  const date = typeof value === 'string' ? parseRfc3339(value) : null;
  if (!date)
    throw new EventValidationError(field, 'an RFC 3339 date-time such as 2026-01-31T12:00:00Z (in UTC, years 0000 to 9999)', opts.index);
  return checkNotFuture(date, opts);
}

function countValue(field: EventField, value: unknown, index?: number): number {
  const n = coerceNumber(field, value, EXPECTED.count, index);
  if (n < 0 || !Number.isInteger(n)) throw new EventValidationError(field, EXPECTED.count, index);
  if (n > MAX_COUNT) throw new EventValidationError(field, EXPECTED.countRange, index);
  return n;
}

function costValue(field: EventField, value: unknown, index?: number): number {
  const n = coerceNumber(field, value, EXPECTED.cost, index);
  if (n < 0) throw new EventValidationError(field, EXPECTED.cost, index);
  if (n >= COST_LIMIT_USD) throw new EventValidationError(field, EXPECTED.costRange, index);
  return n;
}

function unitValue(field: EventField, value: unknown, index?: number): number {
  const n = coerceNumber(field, value, EXPECTED.unit, index);
  if (n < 0 || n > 1) throw new EventValidationError(field, EXPECTED.unit, index);
  return n;
}

/** Marks the event's error_code UNPRICED (its cost was sent as null). */
function markUnpricedEvent(out: Partial<Record<EventField, unknown>>, opts: NormalizeOptions): void {
  out.error_code = markUnpriced(out.error_code as string);
  // The mark counts towards the field's limit: a stored text never passes it.
  if ((out.error_code as string).length > MAX_TEXT_LENGTH)
    throw new EventValidationError(
      'error_code',
      `text of at most ${MAX_TEXT_LENGTH} characters with |UNPRICED added (cost_usd null)`,
      opts.index,
    );
}

/** RFC 3339 UTC with milliseconds, the form every CSV and export uses. */
export function formatTimestamp(date: Date): string {
  return date.toISOString();
}

export const CSV_HEADER = EVENT_FIELDS.join(',');

/** One event as a CSV line in header order (no line break). */
export function eventToCsvLine(event: EventRecord): string {
  // A loop, not map and join: one line per model call on the gateway's hot path.
  let line = csvField(event[EVENT_FIELDS[0]]);
  for (let i = 1; i < EVENT_FIELDS.length; i++) line += `,${csvField(event[EVENT_FIELDS[i]])}`;
  return line;
}

/**
 * Telephony rates at deploy time (launch checklist step 3):
 * `npm run concierge:rates -- US GB ...` fetches `GET {TWILIO_PRICING_URL}/v1/Voice/Countries/{ISO}`
 * with basic authentication (TWILIO_ACCOUNT_SID / TWILIO_AUTH_TOKEN), reads `price_unit`,
 * `inbound_call_prices` and `outbound_prefix_prices` (prices arrive as strings), and writes the
 * rates file the call records use (TELEPHONY_RATES_FILE, default .data/telephony-rates.json).
 * A global rate is never assumed: a country without rates is an error that names it.
 */
import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { DECIMAL_TEXT_SOURCE } from '../../../schema/event-record';

export interface CountryRates {
  price_unit: string;
  /** Per-minute inbound price by number type (local, toll free, mobile...). */
  inbound: Record<string, number>;
  outbound: Array<{ prefixes: string[]; name: string; price: number }>;
  fetched_at: string;
}

export type RatesFile = Record<string, CountryRates>;

export const DEFAULT_RATES_FILE = '.data/telephony-rates.json';

/** Decimal text as the meter reads it: Number() would take "" and " " as 0 and "0x10" as 16. */
const DECIMAL_TEXT = new RegExp(DECIMAL_TEXT_SOURCE);

function price(value: unknown, where: string): number {
  const n = typeof value === 'string' ? (DECIMAL_TEXT.test(value) ? Number(value) : NaN) : typeof value === 'number' ? value : NaN;
  if (!Number.isFinite(n) || n < 0) throw new Error(`${where}: expected a price, got ${JSON.stringify(value)}`);
  return n;
}

export async function fetchCountryRates(iso: string, opts: { baseUrl: string; sid: string; token: string }): Promise<CountryRates> {
  if (!/^[A-Z]{2}$/.test(iso)) throw new Error(`${iso}: expected an ISO 3166 alpha-2 country code such as US`);
  const base = opts.baseUrl.replace(/\/+$/, '');
  // fetch's own refusal is "fetch failed" alone: the operator is told which country, where and why.
  const res = await fetch(`${base}/v1/Voice/Countries/${iso}`, {
    headers: { authorization: `Basic ${Buffer.from(`${opts.sid}:${opts.token}`).toString('base64')}` },
    signal: AbortSignal.timeout(15_000),
  }).catch((error: Error) => {
    throw new Error(`${iso}: pricing service ${base} not reached (${(error.cause as Error | undefined)?.message ?? error.message})`);
  });
  if (res.status === 404) throw new Error(`${iso}: the pricing service has no rates for this country`);
  if (!res.ok) throw new Error(`${iso}: pricing service answered HTTP ${res.status}`);
  const body = (await res.json().catch((error: Error) => {
    throw new Error(`${iso}: pricing service answered what is not JSON (${error.message})`);
  })) as {
    price_unit?: string;
    inbound_call_prices?: Array<{ number_type?: string; current_price?: unknown; base_price?: unknown }>;
    outbound_prefix_prices?: Array<{ prefixes?: string[]; friendly_name?: string; current_price?: unknown; base_price?: unknown }>;
  };
  const inbound: Record<string, number> = {};
  (body.inbound_call_prices ?? []).forEach((p, i) => {
    inbound[p.number_type ?? `type_${i}`] = price(p.current_price ?? p.base_price, `${iso} inbound_call_prices[${i}]`);
  });
  const outbound = (body.outbound_prefix_prices ?? []).map((p, i) => ({
    prefixes: p.prefixes ?? [],
    name: p.friendly_name ?? '',
    price: price(p.current_price ?? p.base_price, `${iso} outbound_prefix_prices[${i}]`),
  }));
  if (Object.keys(inbound).length === 0 && outbound.length === 0)
    throw new Error(`${iso}: the pricing service returned no rates for this country`);
  return { price_unit: body.price_unit ?? 'USD', inbound, outbound, fetched_at: new Date().toISOString() };
}

/** The rates file ({} when there is none); one that is not a JSON object is an error naming it. */
export function readRates(file: string): RatesFile {
  if (!existsSync(file)) return {};
  let rates: unknown;
  try {
    rates = JSON.parse(readFileSync(file, 'utf8'));
  } catch (error) {
    throw new Error(`${file}: not a rates file (${(error as Error).message})`, { cause: error });
  }
  if (!rates || typeof rates !== 'object' || Array.isArray(rates)) throw new Error(`${file}: not a rates file (expected a JSON object)`);
  return rates as RatesFile;
}

/** Written to a temporary file renamed over the old one: the gateway, reading it at each call's end, sees the old or the new. */
export function writeRates(file: string, rates: RatesFile): void {
  mkdirSync(dirname(file), { recursive: true });
  const temp = `${file}.${process.pid}.tmp`;
  writeFileSync(temp, `${JSON.stringify(rates, null, 2)}\n`);
  renameSync(temp, file);
}

/**
 * Inbound per-minute rate for a country: the local number rate, else the first listed; null if none.
 * The file is read at each call's end and may have been edited by hand: an entry not in the shape
 * this module writes, or a rate that is not a price (text, below 0), is an error naming it, never
 * a cost of NaN or below 0 sent to the meter.
 */
export function inboundRate(rates: RatesFile, country: string): { perMinute: number; unit: string } | null {
  const r: unknown = Object.hasOwn(rates, country) ? rates[country] : undefined;
  if (r === undefined) return null;
  const { inbound, price_unit: unit } = (r && typeof r === 'object' ? r : {}) as Partial<CountryRates>;
  if (!inbound || typeof inbound !== 'object' || Array.isArray(inbound))
    throw new Error(`${country}.inbound: expected the per-minute prices by number type, such as {"local": 0.0085}`);
  const type = Object.hasOwn(inbound, 'local') ? 'local' : Object.keys(inbound)[0];
  if (type === undefined) return null;
  const perMinute: unknown = inbound[type];
  if (typeof perMinute !== 'number' || !Number.isFinite(perMinute) || perMinute < 0)
    throw new Error(
      `${country}.inbound.${type}: expected a price per minute (a number >= 0), got ${JSON.stringify(perMinute) ?? 'nothing'}`,
    );
  return { perMinute, unit: typeof unit === 'string' ? unit : 'USD' };
}

/**
 * The digest's figures for non-engineers: cost today, last 7 and 30 days, the daily series, top
 * customers and models, and how many calls had no price. Computed from the events tab's rows in
 * one pass; shown by the Digest tab (digest-tab.ts) and the weekly e-mail (digest-mail.ts).
 *
 * Rows with pii_flag true are left out of everything here. A cost cell that holds no number ≥ 0
 * (typed by hand: "$1.50", "1,50") is left out of the costs and counted. Calls whose cost is an
 * estimate (ESTIMATED) count in every figure as any other, and the part of each cost total that is
 * estimated is given beside it.
 */
import { isEstimated } from '../../schema/estimated';
import { isUnpriced } from '../../schema/unpriced';
import { EVENT_AT, cellCost, cellNumber, cellTime } from './events-sheet';
import { roundUsd } from './spend';
import { DAY_MS, utcDayStart } from './utc-day';
import type { VoiceRollup } from './voice-rollup';

const TOP_N = 10;
export const SERIES_DAYS = 30;

interface CustomerCost {
  customer_id: string;
  cost_usd: number;
  calls: number;
}

interface ModelTokens {
  model: string;
  tokens_total: number;
  cost_usd: number;
  /** null when the model used no tokens (guard against dividing by zero). */
  usd_per_1k_tokens: number | null;
}

export interface DigestFigures {
  generatedAt: string;
  today: number;
  last7d: number;
  last30d: number;
  /** Calls marked as having no price (their cost counts above at the part known, 0 when none is), over the same periods. */
  unpriced: { today: number; last7d: number; last30d: number };
  /** The part of today's, the 7-day and the 30-day cost that is estimated (calls marked ESTIMATED). */
  estimated: { today: number; last7d: number; last30d: number };
  /** Rows of the last 30 days whose cost cell holds no number ≥ 0: left out of the costs above. */
  unreadableCosts30d: number;
  /** Oldest first, one entry per UTC day (days without events are 0). */
  daily: Array<{ day: string; cost_usd: number }>;
  topCustomers7d: CustomerCost[];
  topModels30d: ModelTokens[];
  /** Rows left out because pii_flag is true. */
  piiRowsExcluded: number;
  /** Voice concierge rollups over the last 7 and 30 days (null when there is no calls tab, or it could not be read). */
  voice?: { last7d: VoiceRollup; last30d: VoiceRollup } | null;
  /** Why the calls tab could not be read (moved columns, renamed by hand), when it could not: the voice rollups are then null. */
  voiceUnread?: string;
}

const byName = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

function topCustomers(customers: Map<string, CustomerCost>): CustomerCost[] {
  return [...customers.values()]
    .map((c) => ({ ...c, cost_usd: roundUsd(c.cost_usd) }))
    .sort((a, b) => b.cost_usd - a.cost_usd || byName(a.customer_id, b.customer_id))
    .slice(0, TOP_N);
}

function topModels(models: Map<string, { tokens: number; cost: number }>): ModelTokens[] {
  return [...models.entries()]
    .map(([model, m]) => ({
      model,
      tokens_total: m.tokens,
      cost_usd: roundUsd(m.cost),
      usd_per_1k_tokens: m.tokens > 0 ? roundUsd(m.cost / (m.tokens / 1000)) : null,
    }))
    .sort((a, b) => b.tokens_total - a.tokens_total || byName(a.model, b.model))
    .slice(0, TOP_N);
}

/** The running sums of the one pass over the rows. */
interface Tally {
  daily: number[];
  customers: Map<string, CustomerCost>;
  models: Map<string, { tokens: number; cost: number }>;
  unpriced: { today: number; last7d: number; last30d: number };
  estimated: { today: number; last7d: number; last30d: number };
  pii: number;
  unreadable: number;
  t7: number;
  todayCost: number;
}

/** The UTC day starts the periods count from. */
interface Periods {
  today: number;
  start7: number;
  start30: number;
}

/** The digest's numbers from the events tab's rows (pure: the tests compare it to a direct computation). */
export function computeDigest(rows: unknown[][], nowMs: number): DigestFigures {
  const today = utcDayStart(nowMs);
  const periods: Periods = { today, start7: today - 6 * DAY_MS, start30: today - (SERIES_DAYS - 1) * DAY_MS };
  const tally: Tally = {
    daily: new Array<number>(SERIES_DAYS).fill(0),
    customers: new Map<string, CustomerCost>(),
    models: new Map<string, { tokens: number; cost: number }>(),
    unpriced: { today: 0, last7d: 0, last30d: 0 },
    estimated: { today: 0, last7d: 0, last30d: 0 },
    pii: 0,
    unreadable: 0,
    t7: 0,
    todayCost: 0,
  };
  for (const row of rows) countRow(tally, row, periods);
  return figures(tally, nowMs, periods.start30);
}

function countRow(tally: Tally, row: unknown[], p: Periods): void {
  if (row[EVENT_AT.pii_flag] === true) {
    tally.pii++;
    return;
  }
  const t = cellTime(row[EVENT_AT.timestamp]);
  if (!(t >= p.start30)) return;
  let cost = cellCost(row[EVENT_AT.cost_usd]);
  if (Number.isNaN(cost)) {
    tally.unreadable++;
    cost = 0;
  }
  const noPrice = isUnpriced(row[EVENT_AT.error_code]) ? 1 : 0;
  const estimate = isEstimated(row[EVENT_AT.error_code]) ? cost : 0;
  const day = Math.min(SERIES_DAYS - 1, Math.floor((t - p.start30) / DAY_MS)); // future-dated rows count as today
  tally.daily[day] += cost;
  tally.unpriced.last30d += noPrice;
  tally.estimated.last30d += estimate;
  if (t >= p.today) {
    tally.todayCost += cost;
    tally.unpriced.today += noPrice;
    tally.estimated.today += estimate;
  }
  addModel(tally.models, row, cost);
  if (t >= p.start7) {
    tally.t7 += cost;
    tally.unpriced.last7d += noPrice;
    tally.estimated.last7d += estimate;
    addCustomer(tally.customers, row, cost);
  }
}

function addModel(models: Tally['models'], row: unknown[], cost: number): void {
  const model = String(row[EVENT_AT.model] || 'unknown');
  const m = models.get(model) ?? { tokens: 0, cost: 0 };
  m.tokens += cellNumber(row[EVENT_AT.input_tokens]) + cellNumber(row[EVENT_AT.output_tokens]);
  m.cost += cost;
  models.set(model, m);
}

function addCustomer(customers: Tally['customers'], row: unknown[], cost: number): void {
  const id = String(row[EVENT_AT.customer_id] || '(none)');
  const c = customers.get(id) ?? { customer_id: id, cost_usd: 0, calls: 0 };
  c.cost_usd += cost;
  c.calls++;
  customers.set(id, c);
}

/** The sums rounded as the digest shows them. */
function figures(tally: Tally, nowMs: number, start30: number): DigestFigures {
  const { daily, estimated } = tally;
  return {
    generatedAt: new Date(nowMs).toISOString(),
    today: roundUsd(tally.todayCost),
    last7d: roundUsd(tally.t7),
    last30d: roundUsd(daily.reduce((a, b) => a + b, 0)),
    unpriced: tally.unpriced,
    estimated: { today: roundUsd(estimated.today), last7d: roundUsd(estimated.last7d), last30d: roundUsd(estimated.last30d) },
    unreadableCosts30d: tally.unreadable,
    daily: daily.map((cost, i) => ({ day: new Date(start30 + i * DAY_MS).toISOString().slice(0, 10), cost_usd: roundUsd(cost) })),
    topCustomers7d: topCustomers(tally.customers),
    topModels30d: topModels(tally.models),
    piiRowsExcluded: tally.pii,
  };
}

/** "N calls without a price …" for people, or '' when there were none in the last 7 days. */
export function unpricedSentence(d: DigestFigures): string {
  const n = d.unpriced.last7d;
  return n === 0
    ? ''
    : `${n} call${n === 1 ? '' : 's'} without a price in the last 7 days: their cost is not known in full, and only the part of it known is counted ($0 when none is).`;
}

/** "N rows … have a cost that is not a number ≥ 0 …" for people, or '' when there were none. */
export function unreadableCostSentence(d: DigestFigures): string {
  const n = d.unreadableCosts30d;
  const rows = n === 1 ? '1 row in the last 30 days has' : `${n} rows in the last 30 days have`;
  return n === 0
    ? ''
    : `${rows} a cost that is not a number ≥ 0 (typed by hand, such as "$1.50"): left out of the costs; correct it in the events tab.`;
}

/**
 * A cost for people: to `decimals` places, or to 2 significant digits (up to 10 decimals, as
 * roundUsd keeps) when those places would show a cost above 0 as nothing: $0.004 reads $0.0040, not $0.00.
 */
export function usdText(n: number, decimals = 2): string {
  let d = decimals;
  while (d < 10 && n > 0 && n < 10 ** -d) d++;
  return `$${n.toFixed(d === decimals ? d : d + 1)}`;
}

/** A cost to exactly `decimals` places, as the Digest tab's scorecards (number formats) show it. */
const fixedUsd = (n: number, decimals: number) => `$${n.toFixed(decimals)}`;

/**
 * "$x / $y / $z": the estimated part of today's, the 7-day and the 30-day cost, as the scorecards
 * beside it round them (`usd`: the Digest tab's fixed places, or the e-mail's usdText).
 */
export function estimatedParts(d: DigestFigures, usd = fixedUsd): [string, string, string] {
  const { today, last7d, last30d } = d.estimated;
  return [usd(today, 4), usd(last7d, 2), usd(last30d, 2)];
}

/** "$y of the last 7 days … is estimated …" for people, or '' when no cost of the 30 days is. */
export function estimatedSentence(d: DigestFigures, usd = fixedUsd): string {
  if (d.estimated.last30d === 0) return '';
  const [today, last7d, last30d] = estimatedParts(d, usd);
  return `${last7d} of the last 7 days (${today} of today, ${last30d} of the last 30 days) is estimated: calls cut off before the provider reported their usage, which it bills all the same; included in the costs above.`;
}

/**
 * Spend figures (Document 2): today's cost (the UTC day) and the rolling 7-day cost (today and
 * the 6 UTC days before), against the caps. A cap is exceeded only when strictly greater, the
 * same rule for the alerts and for the gateway's degraded routing.
 */
import { readCaps, readConfig, type Caps } from './config';
import { cellNumber, cellTime, columnOf, getEventsSheet } from './events-sheet';
import type { MeterServices } from './services';

export const DAY_MS = 86_400_000;

export interface SpendSummary {
  ok: true;
  today_cost_usd: number;
  last_7d_cost_usd: number;
  daily_cap_usd: number;
  burn_7d_cap_usd: number;
  cap_exceeded: boolean;
}

export function utcDayStart(ms: number): number {
  return Math.floor(ms / DAY_MS) * DAY_MS;
}

/** Sums of floats carry noise (0.05 + 3.10 = 3.1500000000000004); money is shown without it. */
export function roundUsd(value: number): number {
  return Number(value.toFixed(10));
}

export interface SpendTotals {
  today: number;
  last7d: number;
}

/** Today's and the 7-day cost from (timestamp, cost) pairs. Future-dated rows count as today. */
export function spendTotals(rows: Iterable<readonly [unknown, unknown]>, nowMs: number): SpendTotals {
  const today = utcDayStart(nowMs);
  const weekStart = today - 6 * DAY_MS;
  let todayCost = 0;
  let weekCost = 0;
  for (const [time, cost] of rows) {
    const t = cellTime(time);
    if (!(t >= weekStart)) continue; // also skips NaN
    const c = cellNumber(cost);
    weekCost += c;
    if (t >= today) todayCost += c;
  }
  return { today: roundUsd(todayCost), last7d: roundUsd(weekCost) };
}

export function capExceeded(totals: SpendTotals, caps: Caps): boolean {
  return totals.today > caps.dailyCapUsd || totals.last7d > caps.burn7dCapUsd;
}

/** Reads the timestamp and cost columns once and returns the pairs. */
export function readSpendRows(svc: Pick<MeterServices, 'spreadsheet'>): Array<[unknown, unknown]> {
  const sheet = getEventsSheet(svc.spreadsheet);
  const lastRow = sheet.getLastRow();
  if (lastRow < 2) return [];
  const first = columnOf('timestamp');
  const costOffset = columnOf('cost_usd') - first;
  return sheet
    .getRange(2, first, lastRow - 1, costOffset + 1)
    .getValues()
    .map((row) => [row[0], row[costOffset]]);
}

/** The `doGet?action=spend` answer. */
export function spendSummary(svc: Pick<MeterServices, 'spreadsheet' | 'now'>): SpendSummary {
  const caps = readCaps(readConfig(svc.spreadsheet));
  const totals = spendTotals(readSpendRows(svc), svc.now().getTime());
  return {
    ok: true,
    today_cost_usd: totals.today,
    last_7d_cost_usd: totals.last7d,
    daily_cap_usd: caps.dailyCapUsd,
    burn_7d_cap_usd: caps.burn7dCapUsd,
    cap_exceeded: capExceeded(totals, caps),
  };
}

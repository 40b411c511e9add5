/**
 * Spend figures: today's cost (the UTC day) and the rolling 7-day cost (today and the 6 UTC days
 * before), against the caps. A cap is exceeded only when strictly greater: the shared rule of
 * schema/spend-cap.ts, the same for the alerts and for the gateway's spend-cap routing. A cost
 * cell that holds no number ≥ 0 (typed by hand) is left out of the totals; the answer and the alert count it.
 */
import type { EventField } from '../../schema/event-record';
import { capExceeded as overACap, roundUsd } from '../../schema/spend-cap';
import { isUnpriced } from '../../schema/unpriced';
import { readCaps, readConfig, type Caps } from './config';
import { cellCost, cellTime, columnOf, getEventsSheet, readUnderHeader } from './events-sheet';
import type { MeterServices } from './services';
import type { SpendAnswer } from '../../schema/spend-answer';
import { checkSheetTimeZone } from './sheet-time-zone';
import { DAY_MS, utcDayStart } from './utc-day';

export { roundUsd };

export interface SpendTotals {
  today: number;
  last7d: number;
}

/** Sums of `value(cell)` over rows of today and of the 7 days, from (timestamp, cell) pairs. Future-dated rows count as today. */
function windowSums(rows: Iterable<readonly unknown[]>, nowMs: number, value: (cell: unknown) => number): SpendTotals {
  const today = utcDayStart(nowMs);
  const weekStart = today - 6 * DAY_MS;
  let todaySum = 0;
  let weekSum = 0;
  for (const [time, cell] of rows) {
    const t = cellTime(time);
    if (!(t >= weekStart)) continue; // also skips NaN
    const v = value(cell);
    weekSum += v;
    if (t >= today) todaySum += v;
  }
  return { today: todaySum, last7d: weekSum };
}

/** A cost cell's USD for a total: one that holds no number ≥ 0 is left out (and counted by unreadableCosts). */
export function costOrNothing(cell: unknown): number {
  const cost = cellCost(cell);
  return Number.isNaN(cost) ? 0 : cost;
}

/** Today's and the 7-day cost from (timestamp, cost) pairs. */
export function spendTotals(rows: Iterable<readonly unknown[]>, nowMs: number): SpendTotals {
  const sums = windowSums(rows, nowMs, costOrNothing);
  return { today: roundUsd(sums.today), last7d: roundUsd(sums.last7d) };
}

/** Rows whose cost cell holds no number ≥ 0 (typed by hand), today and in the 7 days, from (timestamp, cost) pairs. */
export function unreadableCosts(rows: Iterable<readonly unknown[]>, nowMs: number): SpendTotals {
  return windowSums(rows, nowMs, (cell) => (Number.isNaN(cellCost(cell)) ? 1 : 0));
}

/**
 * Rows with a cost (neither empty nor 0) whose timestamp holds no date, such as a date typed in
 * another locale's order ("22/11/2026", kept as text): they fall in no window, so every total
 * leaves them out, and they are counted rather than dropped unsaid.
 */
export function undatedCosts(rows: Iterable<readonly unknown[]>): number {
  let n = 0;
  for (const [time, cell] of rows) if (Number.isNaN(cellTime(time)) && cellCost(cell) !== 0) n++;
  return n;
}

/** Events marked as having no price, today and in the 7 days, from (timestamp, error_code) pairs. */
export function unpricedCounts(rows: Iterable<readonly unknown[]>, nowMs: number): SpendTotals {
  return windowSums(rows, nowMs, (code) => (isUnpriced(code) ? 1 : 0));
}

export function capExceeded(totals: SpendTotals, caps: Caps): boolean {
  return overACap({ today: totals.today, last7d: totals.last7d, dailyCap: caps.dailyCapUsd, burnCap: caps.burn7dCapUsd });
}

/** One read of the columns from timestamp to `through` (their header checked); each row as [timestamp, cost_usd, <through>]. */
export function readSpendRows(svc: Pick<MeterServices, 'spreadsheet'>, through: EventField = 'cost_usd'): unknown[][] {
  const sheet = getEventsSheet(svc.spreadsheet);
  checkSheetTimeZone(svc.spreadsheet);
  const first = columnOf('timestamp');
  const cost = columnOf('cost_usd') - first;
  const extra = columnOf(through) - first;
  return readUnderHeader(sheet, first, Math.max(cost, extra) + 1).map((row) => [row[0], row[cost], row[extra]]);
}

/** The `doGet?action=spend` answer. */
export function spendSummary(svc: Pick<MeterServices, 'spreadsheet' | 'now'>): SpendAnswer {
  const caps = readCaps(readConfig(svc.spreadsheet));
  const rows = readSpendRows(svc);
  const nowMs = svc.now().getTime();
  const totals = spendTotals(rows, nowMs);
  const unreadable = unreadableCosts(rows, nowMs);
  const undated = undatedCosts(rows); // their day is unknown: left out of both totals
  return {
    ok: true,
    day: new Date(utcDayStart(nowMs)).toISOString().slice(0, 10),
    today_cost_usd: totals.today,
    last_7d_cost_usd: totals.last7d,
    daily_cap_usd: caps.dailyCapUsd,
    burn_7d_cap_usd: caps.burn7dCapUsd,
    cap_exceeded: capExceeded(totals, caps),
    unreadable_costs_today: unreadable.today + undated,
    unreadable_costs_last_7d: unreadable.last7d + undated,
  };
}

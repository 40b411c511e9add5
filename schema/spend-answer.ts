/**
 * The meter's spend answer (`doGet?action=spend`): built by the meter (apps-script/src/spend.ts),
 * read by the gateway's spend-cap routing (gateway/src/spend-cap-routing.ts). The gateway routes by
 * these figures, so it takes none it cannot trust: a figure that is not a finite number ≥ 0 (a meter
 * of another version, a proxy's answer, a cell typed over) would read as no spend and let every
 * request past the caps.
 */
export interface SpendAnswer {
  ok: true;
  /** The meter's UTC day (YYYY-MM-DD) the figures are of: its clock's, not the gateway's. */
  day: string;
  today_cost_usd: number;
  last_7d_cost_usd: number;
  daily_cap_usd: number;
  burn_7d_cap_usd: number;
  cap_exceeded: boolean;
  /** Rows left out of the totals because their cost cell holds no number ≥ 0 (typed by hand). */
  unreadable_costs_today: number;
  unreadable_costs_last_7d: number;
}

/** The figures the gateway routes by; the caps may be left out (the gateway's own are used). */
const SPEND = ['today_cost_usd', 'last_7d_cost_usd'] as const;
const CAPS = ['daily_cap_usd', 'burn_7d_cap_usd'] as const;
type Figures = Pick<SpendAnswer, (typeof SPEND)[number]> & Partial<Pick<SpendAnswer, (typeof CAPS)[number] | 'day'>>;

const amount = (v: unknown) => typeof v === 'number' && Number.isFinite(v) && v >= 0;

/** A UTC day `YYYY-MM-DD` → its day number (days since 1970-01-01), or NaN. */
export function utcDayNumber(day: string): number {
  const ms = /^\d{4}-\d{2}-\d{2}$/.test(day) ? Date.parse(`${day}T00:00:00Z`) : NaN;
  return Number.isFinite(ms) && new Date(ms).toISOString().startsWith(day) ? ms / 86_400_000 : NaN;
}
const utcDay = (v: unknown) => typeof v === 'string' && Number.isFinite(utcDayNumber(v));

/** A spend answer's figures, or what is wrong with it (the field, and what was expected). */
export function readSpendAnswer(body: unknown): { figures: Figures } | { error: string } {
  const answer = (typeof body === 'object' && body !== null ? body : {}) as Record<string, unknown>;
  if (answer.ok !== true) return { error: typeof answer.error === 'string' ? answer.error : 'ok: expected true' };
  for (const field of SPEND) if (!amount(answer[field])) return { error: `${field}: expected a finite number ≥ 0` };
  for (const field of CAPS)
    if (answer[field] !== undefined && !amount(answer[field])) return { error: `${field}: expected a finite number ≥ 0, or none` };
  // A meter of an earlier version says no day: the gateway then takes its own.
  if (answer.day !== undefined && !utcDay(answer.day)) return { error: 'day: expected a UTC day as YYYY-MM-DD, or none' };
  return { figures: answer as unknown as Figures };
}

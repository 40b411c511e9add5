/**
 * The voice concierge's rollups over the call records of a period, for the digest (answered =
 * every outcome but voicemail_left). An audio cost cell that holds no number ≥ 0 (typed by hand:
 * "$0.20", "0x10") is left out of the costs, as an empty one, and counted.
 */
import { CALL_FIELDS } from '../../schema/call-record';
import { callsTab, readCallRows } from './calls-tab';
import { cellCost, cellTime } from './events-sheet';
import type { MeterServices } from './services';
import { fieldIndex } from './tabs';
import { DAY_MS, utcDayStart } from './utc-day';

export interface VoiceRollup {
  calls: number;
  answered: number;
  booking_rate: number | null;
  escalation_rate: number | null;
  containment_rate: number | null;
  avg_turns: number | null;
  avg_ttfb_s: number | null;
  asr_wer: number | null;
  cost_per_call: number | null;
  cost_per_booking: number | null;
  /** Calls whose est_audio_cost_usd cell holds no number ≥ 0: left out of the two costs above. */
  unreadable_costs: number;
}

const AT = fieldIndex(CALL_FIELDS);

export function voiceRollup(rows: unknown[][], nowMs: number, days: number): VoiceRollup {
  const from = utcDayStart(nowMs) - (days - 1) * DAY_MS;
  const recent = rows.filter((r) => cellTime(r[AT.started_at]) >= from);
  const answered = recent.filter((r) => r[AT.outcome] !== 'voicemail_left');
  const bookings = recent.filter((r) => r[AT.outcome] === 'booking');
  const escalations = answered.filter((r) => r[AT.escalated] === true).length;
  const mean = (xs: number[]) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : null);
  const ratio = (a: number, b: number) => (b ? a / b : null);
  const filled = (col: number, list: unknown[][]) => list.filter((r) => r[col] !== '' && r[col] !== null && r[col] !== undefined);
  // A count typed over by hand ("4 turns", -1.5) is left out of its mean, as an unreadable cost is: averaged in as 0, it pulled the mean down.
  const nums = (col: number) =>
    filled(col, recent)
      .map((r) => cellCost(r[col]))
      .filter((n) => !Number.isNaN(n));
  const costs = (list: unknown[][]) =>
    filled(AT.est_audio_cost_usd, list)
      .map((r) => cellCost(r[AT.est_audio_cost_usd]))
      .filter((c) => !Number.isNaN(c));
  const unreadable = recent.filter((r) => Number.isNaN(cellCost(r[AT.est_audio_cost_usd]))).length;
  return {
    calls: recent.length,
    answered: answered.length,
    booking_rate: ratio(bookings.length, answered.length),
    escalation_rate: ratio(escalations, answered.length),
    containment_rate: ratio(answered.length - escalations, answered.length),
    avg_turns: mean(nums(AT.turns)),
    avg_ttfb_s: mean(nums(AT.ttfb_s)),
    asr_wer: mean(nums(AT.asr_wer)),
    cost_per_call: mean(costs(recent)),
    // Over the bookings with a cost: one typed over is left out, not counted as $0.
    cost_per_booking: mean(costs(bookings)),
    unreadable_costs: unreadable,
  };
}

/** The rollups for 7 and 30 days from the calls tab, or null when there is none. */
export function voiceRollups(svc: Pick<MeterServices, 'spreadsheet' | 'now'>): { last7d: VoiceRollup; last30d: VoiceRollup } | null {
  const calls = callsTab(svc.spreadsheet);
  if (!calls) return null;
  // A tab from before ended_reason has a column less (widened when a call is next stored): read what it has.
  const rows = readCallRows(calls);
  const now = svc.now().getTime();
  return { last7d: voiceRollup(rows, now, 7), last30d: voiceRollup(rows, now, 30) };
}

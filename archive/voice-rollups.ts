/**
 * The voice concierge's metrics rollups from call records (the gateway's local `calls.csv`, or the meter's
 * export of its `calls` tab), computed by DuckDB:
 *   booking rate = bookings / answered calls      escalation rate = escalations / answered calls
 *   containment = (answered − escalations) / answered
 *   avg turns, avg TTFB (s), ASR WER (sampled calls only), cost per call and per booking (audio)
 * "Answered" calls are those the agent handled: every outcome but voicemail_left. A rate with no
 * answered calls (or a cost per booking with no booking that has a cost) is empty, never a division
 * by zero. A call without a cost (the meter's export writes one typed over by hand so) is left out of
 * both costs, not counted as $0.
 * Files written before ended_reason existed have one column less: null_padding reads them too.
 */
import { statSync } from 'node:fs';
import { CALL_FIELDS, CALLS_CSV_HEADER } from '../schema/call-record';
import { lit, pathLit } from './duck';
import { firstLine, notText } from './file-head';

const TYPES: Record<string, string> = {
  call_id: 'VARCHAR',
  started_at: 'TIMESTAMPTZ',
  duration_s: 'DOUBLE',
  model: 'VARCHAR',
  intent_primary: 'VARCHAR',
  turns: 'DOUBLE',
  ttfb_s: 'DOUBLE',
  asr_wer: 'DOUBLE',
  confidence_avg: 'DOUBLE',
  escalated: 'BOOLEAN',
  outcome: 'VARCHAR',
  est_audio_cost_usd: 'DOUBLE',
  telephony_minutes: 'DOUBLE',
  country: 'VARCHAR',
  ended_reason: 'VARCHAR',
};

/**
 * Costs as the event reports hold them, exact to 9 decimals: averaged as DOUBLE, three calls of
 * $1.20, $0 and $0 printed a cost per call of 0.39999999999999997 in every format. Wider than the
 * archive's DECIMAL(18,9): a calls file is not checked against the meter's cost limit when read.
 */
const COST_TYPE = 'DECIMAL(38,9)';
const money = (mean: string) => `CAST(CAST(${mean} AS ${COST_TYPE}) AS DOUBLE)`;

export function voiceRollupSql(callsCsv: string, since: string | null): string {
  const columns = CALL_FIELDS.map((f) => `${lit(f)}: '${TYPES[f]}'`).join(', ');
  const where = since ? `WHERE started_at >= TIMESTAMPTZ ${lit(`${since} 00:00:00+00`)}` : '';
  return `WITH c AS (SELECT *, CAST(est_audio_cost_usd AS ${COST_TYPE}) AS cost FROM read_csv(${pathLit(callsCsv)}, header = true, auto_detect = false, null_padding = true, columns = {${columns}}) ${where}),
    t AS (
      SELECT count(*)::DOUBLE AS calls,
        count(*) FILTER (WHERE outcome <> 'voicemail_left')::DOUBLE AS answered,
        count(*) FILTER (WHERE outcome = 'booking')::DOUBLE AS bookings,
        count(*) FILTER (WHERE escalated AND outcome <> 'voicemail_left')::DOUBLE AS escalations,
        avg(turns) AS avg_turns, avg(ttfb_s) AS avg_ttfb_s, avg(asr_wer) AS asr_wer, count(asr_wer)::DOUBLE AS wer_sampled,
        ${money('avg(cost)')} AS cost_per_call,
        ${money("avg(cost) FILTER (WHERE outcome = 'booking')")} AS cost_per_booking
      FROM c)
    SELECT calls, answered AS answered_calls, bookings, escalations,
      bookings / nullif(answered, 0) AS booking_rate,
      escalations / nullif(answered, 0) AS escalation_rate,
      (answered - escalations) / nullif(answered, 0) AS containment_rate,
      avg_turns, avg_ttfb_s, asr_wer, wer_sampled AS asr_wer_sampled_calls,
      cost_per_call, cost_per_booking
    FROM t`;
}

/** The header of a calls file: today's, or one written before ended_reason (its last column) existed. */
const HEADERS = [CALLS_CSV_HEADER, CALL_FIELDS.slice(0, -1).join(',')];

/**
 * What keeps a calls file from being read as call records, or null. The columns are given to DuckDB
 * by position, so any other CSV was read as calls (`a,b` and one row: "1 call", exit 0), and a folder
 * or the events CSV ended in DuckDB's own conversion error. An empty file is no calls yet.
 */
export function callsFileProblem(file: string): string | null {
  if (statSync(file).isDirectory()) return 'a folder, expected the calls CSV';
  const header = firstLine(file);
  if (header === '' || HEADERS.includes(header)) return null;
  const binary = notText(header);
  if (binary) return `${binary}: expected the calls CSV, with the call header "${CALLS_CSV_HEADER}"`;
  return `line 1: expected the call header "${CALLS_CSV_HEADER}", got "${header.slice(0, 200)}"`;
}

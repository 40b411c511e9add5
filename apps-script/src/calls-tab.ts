/**
 * The `calls` tab: the voice concierge's call records (`doPost` with `{"calls":[...]}`), one row per
 * call, typed like events (numbers as numbers, booleans exact, started_at a date-time),
 * deduplicated by call_id. Every record is checked before anything is written; one bad record
 * refuses the batch.
 */
import { CALL_FIELDS, CALLS_CSV_HEADER, callToCsvLine, checkCallRecord, type CallRecord } from '../../schema/call-record';
import { MeterRefusal } from '../../schema/meter-reply';
import { CLOCK_SKEW_ALLOWANCE_MS, DECIMAL_TEXT_SOURCE } from '../../schema/event-record';
import { errorText } from './error-text';
import { cellCost, cellTime, findStoredIds } from './events-sheet';
import { MAX_BATCH } from './ingest';
import { withScriptLock } from './lock';
import type { MeterServices, Sheet, Spreadsheet } from './services';
import { checkSheetTimeZone } from './sheet-time-zone';
import { appendTabRows, fieldIndex, lastRowWithin, movedColumns, refuseRenamed, type TabSpec, tab, takenColumns } from './tabs';
import { parseUtcDay } from './utc-day';
import type { JsonReply } from './web';

export const CALLS: TabSpec = { name: 'calls', header: CALL_FIELDS, firstWidth: CALL_FIELDS.indexOf('ended_reason') };
const AT = fieldIndex(CALL_FIELDS);

function toRow(c: CallRecord): unknown[] {
  // appendTabRows quote-prefixes strings; the date goes in as a Date so the sheet can filter on it.
  return CALL_FIELDS.map((f) => (f === 'started_at' ? new Date(c.started_at) : c[f] === null ? '' : c[f]));
}

export function storeCalls(svc: MeterServices, body: unknown): JsonReply {
  const list = (body as { calls?: unknown }).calls;
  if (!Array.isArray(list)) throw new MeterRefusal('invalid_body', 'calls: expected an array of call records');
  if (list.length > MAX_BATCH)
    throw new MeterRefusal('too_many_events', `calls: expected at most ${MAX_BATCH} records per request, got ${list.length}`);
  const records = list.map((r, i) => checkCallRecord(r, i, { now: svc.now, maxFutureMs: CLOCK_SKEW_ALLOWANCE_MS }));
  const unique = new Map<string, CallRecord>();
  for (const r of records) if (!unique.has(r.call_id)) unique.set(r.call_id, r);
  checkSheetTimeZone(svc.spreadsheet); // started_at would read back hours off once the zone is GMT again
  return withScriptLock(svc, () => {
    const sheet = tab(svc.spreadsheet, CALLS);
    // After the last call: not after a column the operator keeps beside the calls (a formula filled down).
    const last = lastRowWithin(sheet, CALL_FIELDS.length, sheet.getMaxColumns());
    const stored = findStoredIds(sheet, [...unique.keys()], last, AT.call_id + 1);
    const fresh = [...unique.values()].filter((r) => !stored.has(r.call_id));
    appendTabRows(svc.spreadsheet, sheet, fresh.map(toRow), last);
    return { ok: true, appended: fresh.length, duplicates: records.length - fresh.length };
  });
}

/**
 * The rows of the calls tab, read with its header in one call (a tab from before ended_reason has
 * a column less: what it has). Columns moved by hand are refused (config_error naming the cells):
 * read by position, another column would be taken for the audio cost or the start time.
 */
export function readCallRows(sheet: Sheet): unknown[][] {
  const last = sheet.getLastRow();
  if (last < 2) return [];
  const width = Math.min(CALL_FIELDS.length, sheet.getMaxColumns());
  const [header, ...rows] = sheet.getRange(1, 1, last, width).getValues();
  const moved = movedColumns(CALLS.name, header, CALL_FIELDS.slice(0, width)) || takenColumns(CALLS, header);
  if (moved) throw new MeterRefusal('config_error', moved);
  return rows;
}

/**
 * The calls tab, or null when there is none. One renamed by hand is refused (not_set_up, naming
 * it): read as no calls, its records would be left out of the voice rollups and the export unsaid.
 */
export function callsTab(ss: Spreadsheet): Sheet | null {
  const sheet = ss.getSheetByName(CALLS.name);
  if (!sheet) refuseRenamed(ss, CALLS.name, CALLS.header);
  return sheet;
}

const NUMBER_FIELDS = new Set<string>([
  'duration_s',
  'turns',
  'ttfb_s',
  'asr_wer',
  'confidence_avg',
  'est_audio_cost_usd',
  'telephony_minutes',
]);
const TEXT_FIELDS = new Set<string>(['call_id', 'model', 'intent_primary', 'outcome', 'country', 'ended_reason']);
const DECIMAL_TEXT = new RegExp(DECIMAL_TEXT_SOURCE);

/**
 * A row of the tab as the call record it holds (before its check): started_at as RFC 3339 (a Date,
 * or text typed by hand that reads as one), a number typed as plain decimal text as that number, an
 * empty optional number as null. Anything else stays as the cell holds it, for the check to name.
 */
function rowRecord(row: unknown[]): Record<string, unknown> {
  const record: Record<string, unknown> = {};
  CALL_FIELDS.forEach((f, i) => {
    let v: unknown = row[i] ?? '';
    if (f === 'started_at' && !Number.isNaN(cellTime(v))) v = new Date(cellTime(v)).toISOString();
    else if (NUMBER_FIELDS.has(f) && typeof v === 'string' && DECIMAL_TEXT.test(v.trim())) v = Number(v.trim());
    else if (NUMBER_FIELDS.has(f) && v === '') v = null;
    else if (TEXT_FIELDS.has(f) && (typeof v === 'number' || typeof v === 'boolean')) v = String(v); // typed by hand: `12345` is a number to Sheets
    record[f] = v;
  });
  return record;
}

/**
 * `doGet?action=export&what=calls&since=YYYY-MM-DD`: the calls tab as CSV (started on or after that
 * UTC day). Each row is checked by the call record's rule (the one ingest applies) before it is
 * written: a cell edited by hand into something else (`4 turns`) made DuckDB stop
 * `npm run report -- voice` on the whole file, and a started_at it could not date was dropped
 * unsaid. Such rows are left out, and the log (the web app's executions) says how many and why. An audio
 * cost typed over by hand is not such a cell: its call is written without a cost, as the Digest counts it.
 */
export function exportCallsSince(svc: Pick<MeterServices, 'spreadsheet' | 'log'>, since: string | undefined): string {
  const from = parseUtcDay(since).getTime();
  checkSheetTimeZone(svc.spreadsheet);
  const sheet = callsTab(svc.spreadsheet);
  // A tab from before ended_reason has fewer columns: the missing ones export empty.
  const rows = sheet ? readCallRows(sheet) : [];
  const lines = [CALLS_CSV_HEADER];
  const refused = new Map<string, number>();
  let unpriced = 0;
  for (const row of rows) {
    if (row.every((cell) => cell === '' || cell === null)) continue; // cleared by hand: no call to correct
    const t = cellTime(row[AT.started_at]);
    if (t < from) continue;
    // An audio cost cleared or typed over by hand ("$0.20") is written empty, as the Digest reads it (a
    // call without a price): the call itself is still one the Digest counts, so the report counts it too.
    const cost = row[AT.est_audio_cost_usd];
    const noPrice = cost === '' || cost === null || cost === undefined || Number.isNaN(cellCost(cost));
    let record: CallRecord;
    try {
      record = checkCallRecord({ ...rowRecord(row), ...(noPrice ? { est_audio_cost_usd: 0 } : {}) });
    } catch (error) {
      const problem = errorText(error);
      refused.set(problem, (refused.get(problem) ?? 0) + 1);
      continue;
    }
    if (noPrice && cost !== '' && cost !== null && cost !== undefined) unpriced++;
    lines.push(noPrice ? callToCsvLine({ ...record, est_audio_cost_usd: null }) : callToCsvLine(record));
  }
  if (unpriced)
    svc.log(
      `export of calls since ${since}: ${unpriced} row(s) with an est_audio_cost_usd that is not a number ≥ 0 written without a cost (unpriced, as the Digest counts them): correct them in the calls tab`,
    );
  if (refused.size) {
    const n = [...refused.values()].reduce((a, b) => a + b, 0);
    const why = [...refused].map(([problem, count]) => `${count} with ${problem}`).join(', ');
    svc.log(
      `export of calls since ${since}: ${n} row(s) left out, a cell holds what a call record cannot (${why}): correct them in the calls tab`,
    );
  }
  return lines.join('\r\n') + '\r\n';
}

/**
 * The `calls` tab: the voice concierge's call records (`doPost` with `{"calls":[...]}`), one row per
 * call, typed like events (numbers as numbers, booleans exact, started_at a date-time),
 * deduplicated by call_id. Every record is checked before anything is written; one bad record
 * refuses the batch.
 */
import { CALL_FIELDS, checkCallRecord, type CallRecord } from '../../schema/call-record';
import { csvField } from '../../schema/csv-cell';
import { MeterRefusal } from '../../schema/meter-reply';
import { CLOCK_SKEW_ALLOWANCE_MS } from '../../schema/event-record';
import { cellTime, findStoredIds } from './events-sheet';
import { MAX_BATCH } from './ingest';
import { withScriptLock } from './lock';
import type { MeterServices, Sheet, Spreadsheet } from './services';
import { checkSheetTimeZone } from './sheet-time-zone';
import { appendTabRows, fieldIndex, movedColumns, refuseRenamed, type TabSpec, tab, takenColumns } from './tabs';
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
    const stored = findStoredIds(sheet, [...unique.keys()], undefined, AT.call_id + 1);
    const fresh = [...unique.values()].filter((r) => !stored.has(r.call_id));
    appendTabRows(svc.spreadsheet, sheet, fresh.map(toRow));
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

/** `doGet?action=export&what=calls&since=YYYY-MM-DD`: the calls tab as CSV (started on or after that UTC day). */
export function exportCallsSince(svc: Pick<MeterServices, 'spreadsheet'>, since: string | undefined): string {
  const from = parseUtcDay(since).getTime();
  checkSheetTimeZone(svc.spreadsheet);
  const sheet = callsTab(svc.spreadsheet);
  // A tab from before ended_reason has fewer columns: the missing ones export empty.
  const rows = sheet ? readCallRows(sheet) : [];
  const keep = rows.filter((r) => cellTime(r[AT.started_at]) >= from);
  const line = (r: unknown[]) => CALL_FIELDS.map((_, i) => csvField(r[i] ?? '')).join(',');
  return [CALL_FIELDS.join(','), ...keep.map(line)].join('\r\n') + '\r\n';
}

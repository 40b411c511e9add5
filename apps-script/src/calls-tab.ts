/**
 * The `calls` tab: Document 3's call records (`doPost` with `{"calls":[...]}`), one row per call,
 * typed like events (numbers as numbers, booleans exact, started_at a date-time), deduplicated by
 * call_id. Every record is checked before anything is written; one bad record refuses the batch.
 */
import { CALL_FIELDS, checkCallRecord, type CallRecord } from '../../schema/call-record';
import { csvField } from '../../schema/event-record';
import { cellTime, findStoredIds } from './events-sheet';
import { MAX_BATCH, withScriptLock } from './ingest';
import type { MeterServices, SheetLike } from './services';
import { appendTabRows, ensureTab, type TabSpec, tab } from './tabs';
import type { JsonReply } from './web';

export const CALLS: TabSpec = { name: 'calls', header: CALL_FIELDS };

function toRow(c: CallRecord): unknown[] {
  // appendTabRows quote-prefixes strings; the date goes in as a Date so the sheet can filter on it.
  return CALL_FIELDS.map((f) => (f === 'started_at' ? new Date(c.started_at) : c[f] === null ? '' : c[f]));
}

export function storeCalls(svc: MeterServices, body: unknown): JsonReply {
  const list = (body as { calls?: unknown }).calls;
  if (!Array.isArray(list)) return { ok: false, error: 'calls: expected an array of call records' };
  if (list.length > MAX_BATCH) return { ok: false, error: `calls: expected at most ${MAX_BATCH} records per request, got ${list.length}` };
  let records: CallRecord[];
  try {
    records = list.map((r, i) => checkCallRecord(r, i));
  } catch (error) {
    return { ok: false, error: (error as Error).message };
  }
  const unique = new Map<string, CallRecord>();
  for (const r of records) if (!unique.has(r.call_id)) unique.set(r.call_id, r);
  try {
    return withScriptLock(svc, () => {
      let sheet: SheetLike = tab(svc.spreadsheet, CALLS);
      // A calls tab from before ended_reason: widen it (older rows keep their columns).
      if (sheet.getMaxColumns() < CALL_FIELDS.length) sheet = ensureTab(svc.spreadsheet, CALLS);
      const stored = findStoredIds(sheet, [...unique.keys()]);
      const fresh = [...unique.values()].filter((r) => !stored.has(r.call_id));
      appendTabRows(sheet, fresh.map(toRow));
      return { ok: true, appended: fresh.length, duplicates: records.length - fresh.length };
    });
  } catch (error) {
    return { ok: false, error: (error as Error).message };
  }
}

/** `doGet?action=export&what=calls&since=YYYY-MM-DD`: the calls tab as CSV (started on or after that UTC day). */
export function exportCallsSince(svc: Pick<MeterServices, 'spreadsheet'>, since: string | undefined): string {
  if (!/^\d{4}-\d{2}-\d{2}$/.test(since ?? '')) throw new Error(`since: expected a UTC day as YYYY-MM-DD, got "${since ?? ''}"`);
  const from = Date.parse(`${since}T00:00:00Z`);
  const sheet = svc.spreadsheet.getSheetByName(CALLS.name);
  const last = sheet ? sheet.getLastRow() : 0;
  // A tab from before ended_reason has fewer columns: the missing ones export empty.
  const width = sheet ? Math.min(CALL_FIELDS.length, sheet.getMaxColumns()) : 0;
  const rows = sheet && last >= 2 ? sheet.getRange(2, 1, last - 1, width).getValues() : [];
  const keep = rows.filter((r) => cellTime(r[1]) >= from);
  const line = (r: unknown[]) => CALL_FIELDS.map((_, i) => csvField(r[i] ?? '')).join(',');
  return [CALL_FIELDS.join(','), ...keep.map(line)].join('\r\n') + '\r\n';
}

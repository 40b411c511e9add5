/**
 * Small tabs with a header row (the back office's contacts, leads, activities, tasks, calls and
 * the idempotency record): create or repair, find a row by a column's exact value (TextFinder:
 * the cost does not grow with the tab), and append rows in one write. Text cells get Sheets'
 * quote prefix, as in the events tab, so nothing a caller says becomes a formula or a number.
 */
import type { SheetLike, SpreadsheetLike } from './services';

export interface TabSpec {
  name: string;
  header: readonly string[];
  hidden?: boolean;
}

export const CONTACTS: TabSpec = {
  name: 'contacts',
  header: ['phone', 'name', 'email', 'call_id', 'intent', 'transcript_excerpt', 'opted_out', 'created_at', 'updated_at'],
};
export const LEADS: TabSpec = {
  name: 'leads',
  header: ['lead_id', 'created_at', 'call_id', 'phone', 'name', 'email', 'service', 'budget', 'timeline', 'utm', 'stage', 'summary'],
};
export const ACTIVITIES: TabSpec = { name: 'activities', header: ['at', 'type', 'phone', 'call_id', 'booking_id', 'detail'] };
export const TASKS: TabSpec = {
  name: 'tasks',
  header: ['task_id', 'created_at', 'due_at', 'type', 'phone', 'call_id', 'status', 'recording'],
};
/** Results of back-office actions by idempotency key (hidden; a replay answers from here). */
export const IDEMPOTENCY: TabSpec = { name: 'idempotency', header: ['key', 'action', 'result', 'at'], hidden: true };

export function ensureTab(ss: SpreadsheetLike, spec: TabSpec): SheetLike {
  let sheet = ss.getSheetByName(spec.name);
  if (!sheet) {
    sheet = ss.insertSheet(spec.name);
    const extra = sheet.getMaxColumns() - spec.header.length;
    if (extra > 0) sheet.deleteColumns(spec.header.length + 1, extra);
  }
  // A tab made before a field was added (the calls tab's ended_reason) gains the column at the end.
  const short = spec.header.length - sheet.getMaxColumns();
  if (short > 0) sheet.insertColumnsAfter(sheet.getMaxColumns(), short);
  const head = sheet.getRange(1, 1, 1, spec.header.length);
  if (head.getValues()[0].some((v, i) => String(v) !== spec.header[i])) {
    head.setValues([spec.header.slice()]);
    head.setFontWeight('bold');
    sheet.setFrozenRows(1);
  }
  return sheet;
}

export function tab(ss: SpreadsheetLike, spec: TabSpec): SheetLike {
  return ss.getSheetByName(spec.name) ?? ensureTab(ss, spec);
}

/** Literal text for a cell (quote prefix for non-empty strings). */
export function cellText(value: unknown): unknown {
  if (typeof value === 'string') return value === '' ? '' : `'${value}`;
  return value === null || value === undefined ? '' : value;
}

/** The row (1-based) whose `column` holds exactly `value`, or 0. */
export function findRow(sheet: SheetLike, column: number, value: string): number {
  const last = sheet.getLastRow();
  if (last < 2 || value === '') return 0;
  const hits = sheet
    .getRange(2, column, last - 1, 1)
    .createTextFinder(value)
    .matchCase(true)
    .matchEntireCell(true)
    .findAll();
  return hits.length ? hits[0].getRow() : 0;
}

/** Appends rows in one write, growing the tab when needed. */
export function appendTabRows(sheet: SheetLike, rows: unknown[][]): number {
  if (!rows.length) return 0;
  const start = sheet.getLastRow() + 1;
  const need = start + rows.length - 1 - sheet.getMaxRows();
  if (need > 0) sheet.insertRowsAfter(sheet.getMaxRows(), need + 100);
  sheet.getRange(start, 1, rows.length, rows[0].length).setValues(rows.map((r) => r.map(cellText)));
  return start;
}

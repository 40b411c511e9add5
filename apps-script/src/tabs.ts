/**
 * Small tabs with a header row (the back office's contacts, leads, activities, tasks, calls and
 * the idempotency record): create or repair, find a row by a column's exact value (TextFinder:
 * the cost does not grow with the tab), read and write rows by column name, and append rows in
 * one write. Text cells get Sheets' quote prefix, as in the events tab, so nothing a caller says
 * becomes a formula or a number.
 */
import { MeterRefusal } from '../../schema/meter-reply';
import type { Sheet, Spreadsheet } from './services';

export interface TabSpec {
  name: string;
  header: readonly string[];
  /** Columns the tab had when first released; those after were added later, at the end. */
  firstWidth?: number;
  /** Hidden when the meter makes it: a record for the code, not for people to edit. */
  hidden?: boolean;
}

/** Rows that a back-office action writes carry its idempotency key, so a retry finds them. */
const KEY = 'idempotency_key';

export const CONTACTS: TabSpec = {
  name: 'contacts',
  header: ['phone', 'name', 'email', 'call_id', 'intent', 'transcript_excerpt', 'opted_out', 'created_at', 'updated_at'],
};
export const LEADS: TabSpec = {
  name: 'leads',
  header: ['lead_id', 'created_at', 'call_id', 'phone', 'name', 'email', 'service', 'budget', 'timeline', 'utm', 'stage', 'summary', KEY],
  firstWidth: 12,
};
export const ACTIVITIES: TabSpec = {
  name: 'activities',
  header: ['at', 'type', 'phone', 'call_id', 'booking_id', 'detail', KEY],
  firstWidth: 6,
};
export const TASKS: TabSpec = {
  name: 'tasks',
  header: ['task_id', 'created_at', 'due_at', 'type', 'phone', 'call_id', 'status', 'recording', KEY],
  firstWidth: 8,
};
/** Back-office actions by idempotency key: claimed first, `progress` as steps finish, `result` when done. */
export const IDEMPOTENCY: TabSpec = {
  name: 'idempotency',
  header: ['key', 'action', 'result', 'at', 'progress'],
  firstWidth: 4,
  hidden: true,
};

/** 0-based position of each name in a header or field list. */
export function fieldIndex<F extends string>(fields: readonly F[]): Record<F, number> {
  return Object.fromEntries(fields.map((f, i) => [f, i])) as Record<F, number>;
}

/** 1-based column of a name in a tab's header. */
export function columnIn(spec: TabSpec, name: string): number {
  const i = spec.header.indexOf(name);
  if (i < 0) throw new Error(`${spec.name}: no column "${name}"`);
  return i + 1;
}

/** A1 letters of a 1-based column (1 → A, 19 → S, 27 → AA). */
export function columnLetter(column: number): string {
  let s = '';
  for (let n = column; n > 0; n = Math.floor((n - 1) / 26)) s = String.fromCharCode(65 + ((n - 1) % 26)) + s;
  return s;
}

/** A row read from a tab, by column name. */
export function rowRecord(spec: TabSpec, row: readonly unknown[]): Record<string, unknown> {
  return Object.fromEntries(spec.header.map((name, i) => [name, row[i] ?? '']));
}

/** A record as a row in the tab's header order (absent names are empty). */
export function recordRow(spec: TabSpec, record: Record<string, unknown>): unknown[] {
  return spec.header.map((name) => record[name] ?? '');
}

/**
 * What to say of a header whose cells name another column of it (columns moved by hand), or ''.
 * Such a header is not written over: that would label one column's values with another's name,
 * and the meter would then read and write them as that column. A cell renamed to something else
 * is simply written back.
 */
export function movedColumns(tabName: string, header: readonly unknown[], names: readonly string[]): string {
  const moved = names.flatMap((name, i) => {
    const found = String(header[i] ?? '').trim();
    return found !== name && names.includes(found) ? [`cell ${columnLetter(i + 1)}1 holds "${found}", expected "${name}"`] : [];
  });
  if (moved.length === 0) return '';
  return (
    `${tabName}: columns were moved by hand (${moved.join('; ')}); header left as it is, since writing it would put ` +
    `each name over another column's values: move the columns back to the order ${names.join(', ')}`
  );
}

/**
 * What to say of a column added after the tab's first release whose header cell holds a name of
 * the operator's, or ''. An earlier version's tab ended before it, so that column is one the
 * operator kept there: written over, its values would be read and written as the meter's field.
 */
export function takenColumns(spec: TabSpec, header: readonly unknown[]): string {
  const from = spec.firstWidth ?? spec.header.length;
  const taken = spec.header.slice(from).flatMap((name, k) => {
    const found = String(header[from + k] ?? '').trim();
    if (found === '' || found === name || spec.header.includes(found)) return [];
    return [`cell ${columnLetter(from + k + 1)}1 holds "${found}" where this version keeps "${name}"`];
  });
  if (taken.length === 0) return '';
  const columns = taken.length === 1 ? 'an empty column' : `${taken.length} empty columns`;
  return (
    `${spec.name}: ${taken.join('; ')}, a column added after this tab was first made; left as it is, since ` +
    `writing the header would file that column's values under the meter's name. Insert ${columns} before ` +
    `column ${columnLetter(from + 1)} so yours move to the right, then run Meter → Set up or repair; if it is ` +
    `the meter's column renamed, write its name back in the cell`
  );
}

/**
 * The tab `name` is missing: refused (not_set_up) when another tab has its header, the tab renamed
 * by hand. Made anew, it would be the one the meter reads and writes, and the rows of the renamed
 * one would go unseen (the events' spend by the caps, the idempotency keys by a retried action).
 */
export function refuseRenamed(ss: Spreadsheet, name: string, header: readonly string[]): void {
  for (const sheet of ss.getSheets()) {
    if (sheet.getMaxColumns() < header.length) continue;
    const row = sheet.getRange(1, 1, 1, header.length).getValues()[0];
    if (!header.every((h, i) => String(row[i]).trim() === h)) continue;
    const other = sheet.getName();
    throw new MeterRefusal(
      'not_set_up',
      `the "${name}" tab is missing, and the tab "${other}" has its header: rename "${other}" back to "${name}" ` +
        `(the meter finds its tabs by name), or give a copy kept on purpose another header row. No new "${name}" ` +
        `tab was made, so that no rows are left out of what the meter reads`,
    );
  }
}

export function ensureTab(ss: Spreadsheet, spec: TabSpec): Sheet {
  let sheet = ss.getSheetByName(spec.name);
  if (!sheet) {
    refuseRenamed(ss, spec.name, spec.header);
    [sheet] = insertTabs(ss, [{ name: spec.name, rows: 1, columns: spec.header.length }]);
    // Only when made: a tab an operator showed stays shown.
    if (spec.hidden) sheet.hideSheet();
  }
  // A tab made by an older version may be narrower than its header now is; a new one is wider.
  const width = sheet.getMaxColumns();
  if (width < spec.header.length) sheet.insertColumnsAfter(width, spec.header.length - width);
  else if (width > spec.header.length) dropEmptyTail(sheet, spec.header.length);
  const head = sheet.getRange(1, 1, 1, spec.header.length);
  const current = head.getValues()[0];
  const moved = movedColumns(spec.name, current, spec.header) || takenColumns(spec, current);
  if (moved) throw new MeterRefusal('config_error', moved);
  if (current.some((v, i) => String(v) !== spec.header[i])) {
    head.setValues([spec.header.slice()]);
    head.setFontWeight('bold');
  }
  // Checked apart from the header: a run cut off after writing it left the header unfrozen.
  if (sheet.getFrozenRows() !== 1) sheet.setFrozenRows(1);
  return sheet;
}

/**
 * Drops the empty columns after the last one holding a value, past the tab's `width`: Google's
 * 26-column grid left by a run cut off after making the tab costs cells towards the spreadsheet's
 * limit for good. Columns the operator keeps after the header, and those before them, stay.
 */
function dropEmptyTail(sheet: Sheet, width: number): void {
  const extra = sheet.getMaxColumns() - width;
  const cells = sheet.getRange(1, width + 1, Math.max(sheet.getLastRow(), 1), extra).getValues();
  let used = 0;
  for (const row of cells) for (let i = extra; i > used; i--) if (row[i - 1] !== '') used = i;
  if (used < extra) sheet.deleteColumns(width + used + 1, extra - used);
}

/**
 * The tab, created or widened first when it is missing or older than its header. Its header is
 * read each time (one read): rows are read and written by position, so a header that is not the
 * spec's goes through ensureTab, which refuses columns moved by hand and writes back a renamed one.
 */
export function tab(ss: Spreadsheet, spec: TabSpec): Sheet {
  const sheet = ss.getSheetByName(spec.name);
  const ready =
    sheet !== null &&
    sheet.getMaxColumns() >= spec.header.length &&
    sheet
      .getRange(1, 1, 1, spec.header.length)
      .getValues()[0]
      .every((v, i) => String(v) === spec.header[i]);
  return ready ? sheet : ensureTab(ss, spec);
}

/** Literal text for a cell (quote prefix for non-empty strings). */
export function cellText(value: unknown): unknown {
  if (typeof value === 'string') return value === '' ? '' : `'${value}`;
  return value === null || value === undefined ? '' : value;
}

/** The row (1-based) whose `column` holds exactly `value`, or 0. */
export function findRow(sheet: Sheet, column: number, value: string): number {
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

/** The row written by the action with this idempotency key, or 0. */
export function findKeyed(sheet: Sheet, spec: TabSpec, key: string): number {
  return findRow(sheet, columnIn(spec, KEY), key);
}

/** Google Sheets' limit on cells in one spreadsheet (all tabs together). */
export const SPREADSHEET_CELL_LIMIT = 10_000_000;

/** Each tab's cells (its grid, empty or not), largest first. */
export function cellsByTab(ss: Spreadsheet): Array<{ name: string; cells: number }> {
  return ss
    .getSheets()
    .map((sheet) => ({ name: sheet.getName(), cells: sheet.getMaxRows() * sheet.getMaxColumns() }))
    .sort((a, b) => b.cells - a.cells);
}

/** Cells in the whole spreadsheet (every tab counts towards Google's limit). */
function spreadsheetCells(ss: Spreadsheet): number {
  let cells = 0;
  for (const sheet of ss.getSheets()) cells += sheet.getMaxRows() * sheet.getMaxColumns();
  return cells;
}

/**
 * Refuses, before anything is written, `added` more cells (`what`, naming the tab) that would take
 * the spreadsheet (at `cells` now) past its cell limit (`spreadsheet_full`: the caller writes nothing).
 */
function refusePastLimit(cells: number, added: number, what: string): void {
  const after = cells + added;
  if (after <= SPREADSHEET_CELL_LIMIT) return;
  throw new MeterRefusal(
    'spreadsheet_full',
    `the spreadsheet is full: ${what} would take it to ${after} cells, past Google's ` +
      `${SPREADSHEET_CELL_LIMIT} limit. Nothing was written. Move to the columnar path ` +
      `(exportArchive + npm run archive, see README) and apply retention to free rows: it deletes only ` +
      `exported events older than Config RETENTION_DAYS; shorten it when the events tab holds newer ones ` +
      `(not below 7: the 7-day caps count a week of events; above about 40,000 events a day the archive is the path). ` +
      `The back-office tabs are never pruned: move their old rows to another spreadsheet ` +
      `(docs/meter.md, "Growth over months").`,
  );
}

/** Google gives every new tab this grid, whatever it is for. */
const NEW_TAB = { rows: 1000, columns: 26 };

/** A tab and the grid its caller gives it next (its columns exactly, at least its rows). */
export interface TabGrid {
  name: string;
  rows: number;
  columns: number;
}

/**
 * Cells a tab gains on the way to its grid: a missing one is made with Google's grid first, then
 * given its columns, then its rows (never both 26 columns and its height), so it needs the larger of the two.
 */
function cellsAdded(ss: Spreadsheet, t: TabGrid): number {
  const sheet = ss.getSheetByName(t.name);
  if (!sheet) return Math.max(NEW_TAB.rows * NEW_TAB.columns, Math.max(NEW_TAB.rows, t.rows) * t.columns);
  const rows = sheet.getMaxRows();
  return Math.max(0, Math.max(rows, t.rows) * t.columns - rows * sheet.getMaxColumns());
}

/**
 * The tabs, the missing ones created. Refused (`spreadsheet_full`, naming them) before any is
 * made when they, at the grids their caller then gives them, would pass the cell limit together:
 * Google would refuse the insert (a new tab has 1,000 rows by 26 columns) or the resize after it
 * with a raw error, and the caller would have written some tabs and not others.
 */
export function insertTabs(ss: Spreadsheet, tabs: readonly TabGrid[]): Sheet[] {
  const added = tabs.map((t) => cellsAdded(ss, t));
  const total = added.reduce((n, a) => n + a, 0);
  if (total > 0) {
    const what = tabs
      .filter((_, i) => added[i] > 0)
      .map((t) => `${ss.getSheetByName(t.name) ? 'growing' : 'creating'} the tab "${t.name}"`);
    refusePastLimit(spreadsheetCells(ss), total, what.join(' and '));
  }
  for (const t of tabs) if (!ss.getSheetByName(t.name)) ss.insertSheet(t.name);
  return tabs.map((t) => ss.getSheetByName(t.name) as Sheet);
}

/**
 * Gives up as many of the rows the tab `kept` holds past its grid (its spare rows) as the tabs,
 * grown to their grids, would otherwise take past the cell limit: spare rows go before a refusal.
 * Nothing changes when the tabs fit, or would not fit even with all of those rows given up.
 */
export function giveUpSpare(ss: Spreadsheet, kept: TabGrid, tabs: readonly TabGrid[]): void {
  const sheet = ss.getSheetByName(kept.name);
  if (!sheet || sheet.getMaxColumns() !== kept.columns) return;
  const maxRows = sheet.getMaxRows();
  if (maxRows <= kept.rows) return;
  const over = spreadsheetCells(ss) + tabs.reduce((n, t) => n + cellsAdded(ss, t), 0) - SPREADSHEET_CELL_LIMIT;
  const cut = Math.ceil(over / kept.columns);
  if (over > 0 && cut <= maxRows - kept.rows) sheet.deleteRows(maxRows - cut + 1, cut);
}

/** The events tab (events-sheet.ts) and the pii-free tab whose QUERY shows its rows (public-tab.ts). */
export const EVENTS_TAB = 'events';
export const PUBLIC_TAB = 'events_public';

/**
 * Gives back `over` cells (or a few more: whole rows) of the public tab's spare rows, those it
 * keeps beyond the events' for the events ingested until the next refresh; the cells given back.
 * Kept are its rows for the events, those the write growing `grown` to `lastRow` adds included, so
 * its QUERY still shows every event. Nothing changes (0) when even all of its spare would not do:
 * the write is then refused. The next digest refresh grows the spare again where it fits.
 */
function takeBackPublicSpare(ss: Spreadsheet, over: number, grown: Sheet, lastRow: number): number {
  const pub = ss.getSheetByName(PUBLIC_TAB);
  const events = ss.getSheetByName(EVENTS_TAB);
  if (!pub || !events || pub.getName() === grown.getName()) return 0;
  const kept = Math.max(events.getLastRow(), events.getName() === grown.getName() ? lastRow : 0, 1);
  const maxRows = pub.getMaxRows();
  const width = pub.getMaxColumns();
  const cut = Math.ceil(over / width);
  if (cut > maxRows - kept) return 0;
  pub.deleteRows(maxRows - cut + 1, cut);
  return cut * width;
}

/**
 * Grows the tab to hold rows up to `lastRow`, with `spare` rows more so that not every write pays
 * for an insert (exactly what is needed near the cell limit). Near the limit the public tab's spare
 * rows are taken back first (takeBackPublicSpare); growth that passes the limit even so is refused
 * before anything is written (`spreadsheet_full`: the caller writes nothing).
 */
export function growFor(ss: Spreadsheet, sheet: Sheet, lastRow: number, spare: number): void {
  const maxRows = sheet.getMaxRows();
  const needed = lastRow - maxRows;
  if (needed <= 0) return;
  const width = sheet.getMaxColumns();
  let cells = spreadsheetCells(ss);
  const over = cells + needed * width - SPREADSHEET_CELL_LIMIT;
  if (over > 0) cells -= takeBackPublicSpare(ss, over, sheet, lastRow);
  refusePastLimit(cells, needed * width, `${needed} more row(s) in "${sheet.getName()}"`);
  const roomy = cells + (needed + spare) * width <= SPREADSHEET_CELL_LIMIT;
  sheet.insertRowsAfter(maxRows, roomy ? needed + spare : needed);
}

/**
 * Sizes the tab to exactly `columns` wide and at least `rows` tall; one taller than `rows` + `spare`
 * (left at a past peak) is cut to that, so its cells go back to the other tabs. One shorter than
 * `rows` + `spare` grows to that (when that would pass the cell limit, one shorter than `rows` grows
 * to `rows` alone, any other keeps its rows): grown to `rows` exactly, it was full again at the next
 * row its source gained, and topped up only once full, it ran out every other refresh. The new grid is
 * checked against the cell limit first, so a refused resize changes nothing. Rows are cut from the
 * bottom, never below `rows`: a resize cut off half-way leaves a tab that still holds its data.
 */
export function fitGrid(ss: Spreadsheet, sheet: Sheet, rows: number, columns: number, spare: number): void {
  const maxRows = sheet.getMaxRows();
  const maxCols = sheet.getMaxColumns();
  const added = (height: number) => height * columns - maxRows * maxCols;
  // Short of its spare rows (its source gained rows since the last fit): topped up, not only once full.
  const short = maxRows < rows + spare;
  let height = Math.min(Math.max(maxRows, rows), rows + spare);
  const cells = short || added(height) > 0 ? spreadsheetCells(ss) : 0;
  if (added(height) > 0) refusePastLimit(cells, added(height), `a grid of ${height} rows by ${columns} columns in "${sheet.getName()}"`);
  if (short && cells + added(rows + spare) <= SPREADSHEET_CELL_LIMIT) height = rows + spare;
  if (maxRows > height) sheet.deleteRows(height + 1, maxRows - height);
  if (maxCols > columns) sheet.deleteColumns(columns + 1, maxCols - columns);
  else if (maxCols < columns) sheet.insertColumnsAfter(maxCols, columns - maxCols);
  if (maxRows < height) sheet.insertRowsAfter(maxRows, height - maxRows);
}

/** Rows read at a time when lastRowWithin looks upwards. */
const SCAN_ROWS = 1000;

/**
 * The last row (1, the header's, when none) holding a value in the first `columns` columns of a
 * tab `width` columns wide. getLastRow() counts every column: one an operator keeps beside the
 * meter's (a formula filled down far past the rows) put it past them, and rows appended after it
 * left blank rows between (in the events tab, ones retention never drops). Only a tab wider than
 * `columns` needs more than that call: its last row is read, then blocks of rows upwards until one
 * holds a value.
 */
export function lastRowWithin(sheet: Sheet, columns: number, width: number): number {
  let end = sheet.getLastRow();
  if (width <= columns) return end;
  for (let size = 1; end >= 2; size = SCAN_ROWS) {
    const top = Math.max(2, end - size + 1);
    const rows = sheet.getRange(top, 1, end - top + 1, columns).getValues();
    for (let i = rows.length - 1; i >= 0; i--) if (rows[i].some((cell) => cell !== '' && cell !== null)) return top + i;
    end = top - 1;
  }
  return end;
}

/** Appends rows after `lastRow` in one write, growing the tab when needed (never past the cell limit). */
export function appendTabRows(ss: Spreadsheet, sheet: Sheet, rows: unknown[][], lastRow = sheet.getLastRow()): number {
  if (!rows.length) return 0;
  const start = lastRow + 1;
  growFor(ss, sheet, start + rows.length - 1, 100);
  sheet.getRange(start, 1, rows.length, rows[0].length).setValues(rows.map((r) => r.map(cellText)));
  return start;
}

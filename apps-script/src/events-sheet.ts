/**
 * The `events` tab: how an EventRecord becomes a sheet row and back, and the bounded-cost
 * operations on the tab (append a batch, find stored event_ids, read the columns a report needs).
 */
import { EVENT_FIELDS, TEXT_FIELDS, parseDecimalText, parseRfc3339, type EventField, type EventRecord } from '../../schema/event-record';
import { MeterRefusal } from '../../schema/meter-reply';
import type { CellValue, Sheet, Spreadsheet } from './services';
import { EVENTS_TAB, columnLetter, fieldIndex, growFor, lastRowWithin, refuseRenamed } from './tabs';

export const EVENT_COLUMNS = EVENT_FIELDS.length;
/** Rows added beyond need when the events tab grows, so that not every request pays for an insert. */
const GROWTH_ROWS = 1000;
/** TextFinder regexes stay short: ids per search. */
const IDS_PER_SEARCH = 100;

const TEXT = new Set<EventField>(TEXT_FIELDS);

/** 0-based position of each field in a row read from the tab. */
export const EVENT_AT = fieldIndex(EVENT_FIELDS);

/** 1-based column of a field. */
export function columnOf(field: EventField): number {
  return EVENT_AT[field] + 1;
}

/**
 * One event as a row in header order. Every non-empty text value gets Sheets' quote prefix, so
 * the sheet keeps it as literal text: `=`, `+`, `-`, `@` never start a formula, and ids such as
 * `00123` or `TRUE` are not turned into numbers or booleans. The prefix is not part of the value.
 */
export function eventToRow(event: EventRecord): CellValue[] {
  return EVENT_FIELDS.map((field) => {
    const value = event[field];
    if (value === null || value === undefined) return '';
    if (TEXT.has(field)) return value === '' ? '' : `'${String(value)}`;
    return value as CellValue;
  });
}

function isDate(value: unknown): value is Date {
  return Object.prototype.toString.call(value) === '[object Date]';
}

/**
 * Cell → count, for reading rows back: a number ≥ 0 or plain decimal text; anything else (empty,
 * typed over by hand: `1.2k`, `-900`, `0x10000`) counts as 0. Read as Number(), a negative cell took
 * tokens off a model's total and hex text added 65,536, and the $ per 1K tokens with them.
 */
export function cellNumber(value: unknown): number {
  const n = cellCost(value);
  return Number.isNaN(n) ? 0 : n;
}

/**
 * A cost cell → USD, NaN when it holds no number ≥ 0: what a person typed over it ("$1.50", "1,50",
 * "1.5 USD", a note, a negative number). Not guessed ("1,50" may be 1.5 or 150), not read as 0
 * unsaid: the totals leave such a cell out and the views count it. An empty cell is 0, as an
 * absent cost at ingest. The voice rollups read their counts (turns, seconds) by it too.
 */
export function cellCost(value: unknown): number {
  if (value === null || value === undefined || (typeof value === 'string' && value.trim() === '')) return 0;
  const n = typeof value === 'number' ? value : typeof value === 'string' ? parseDecimalText(value) : NaN;
  return Number.isFinite(n) && n >= 0 ? n : NaN;
}

/** A date typed month first (`11/22/2026 10:00`), which a sheet whose locale puts the day first keeps as text. */
const MONTH_FIRST = /^(\d{1,2})\/(\d{1,2})\/(\d{4})(?:,? (\d{1,2}):(\d{2})(?::(\d{2}))?)?$/;

/**
 * Cell → epoch ms, for a timestamp cell: a Date, RFC 3339 text an operator pasted, or a date typed
 * month first (`11/22/2026 10:00`, read in the script's time zone). NaN for anything else: `2026`
 * or `0.1` typed as text is no date (Date.parse read them as 2026-01-01 and 2000-01-01, and the row
 * was counted and exported in that day), nor is `2/30/2026` (read as 2 March).
 */
export function cellTime(value: unknown): number {
  if (isDate(value)) return value.getTime();
  if (typeof value !== 'string') return NaN;
  const text = value.trim();
  const rfc = parseRfc3339(text);
  if (rfc) return rfc.getTime();
  const m = MONTH_FIRST.exec(text);
  if (!m) return NaN;
  const [month, day, year, hour, minute, second] = m.slice(1).map((p) => Number(p ?? 0));
  const at = new Date(year, month - 1, day, hour, minute, second);
  const real = at.getMonth() === month - 1 && at.getDate() === day && at.getHours() === hour && at.getMinutes() === minute;
  return real && second < 60 ? at.getTime() : NaN;
}

export function getEventsSheet(ss: Spreadsheet): Sheet {
  const sheet = ss.getSheetByName(EVENTS_TAB);
  if (sheet) return sheet;
  refuseRenamed(ss, EVENTS_TAB, EVENT_FIELDS);
  throw new MeterRefusal('not_set_up', `the "${EVENTS_TAB}" tab is missing: run setup() from the Meter menu`);
}

/**
 * Which of `ids` are already stored in the id column (event_id here; the calls tab passes its
 * call_id column). The cost does not grow with the sheet: one TextFinder search per 100 ids (the
 * search runs inside Google), then one read of the rows between the first and last hit.
 */
export function findStoredIds(sheet: Sheet, ids: string[], lastRow = sheet.getLastRow(), idColumn = columnOf('event_id')): Set<string> {
  const found = new Set<string>();
  if (lastRow < 2 || ids.length === 0) return found;
  const column = sheet.getRange(2, idColumn, lastRow - 1, 1);
  const rows: number[] = [];
  for (let i = 0; i < ids.length; i += IDS_PER_SEARCH) {
    // ids follow schema/ids.ts, where only `.` is special in a regular expression.
    const pattern = ids
      .slice(i, i + IDS_PER_SEARCH)
      .map((id) => id.replace(/\./g, '\\.'))
      .join('|');
    const hits = column.createTextFinder(`^(?:${pattern})$`).useRegularExpression(true).matchCase(true).matchEntireCell(true).findAll();
    for (const hit of hits) rows.push(hit.getRow());
  }
  if (rows.length === 0) return found;
  const first = Math.min(...rows);
  const last = Math.max(...rows);
  const wanted = new Set(ids);
  for (const [value] of sheet.getRange(first, idColumn, last - first + 1, 1).getValues()) {
    const id = String(value);
    if (wanted.has(id)) found.add(id);
  }
  return found;
}

/**
 * Writes rows after `lastRow` (the last event's: lastEventRow) in one setValues call, growing the
 * tab first when needed. Refuses, before writing anything, a write that would pass the spreadsheet's cell limit.
 */
export function appendRows(ss: Spreadsheet, sheet: Sheet, rows: CellValue[][], lastRow = sheet.getLastRow()): number {
  if (rows.length === 0) return 0;
  const start = lastRow + 1;
  growFor(ss, sheet, start + rows.length - 1, GROWTH_ROWS);
  sheet.getRange(start, 1, rows.length, EVENT_COLUMNS).setValues(rows);
  return rows.length;
}

/**
 * Refuses a header cell of columns `first`.. that does not name its field: a column moved or
 * renamed by hand would otherwise be read as another field (the cost column dragged to the end left
 * `eval_score`, mostly empty, in its place: spend read as $0, no cap ever crossed), and rows written
 * by position would land under another field's name.
 */
function checkHeader(header: readonly unknown[], first: number): void {
  header.forEach((cell, i) => {
    const expected = EVENT_FIELDS[first - 1 + i];
    if (String(cell).trim() === expected) return;
    throw new MeterRefusal(
      'config_error',
      `${EVENTS_TAB} tab, cell ${columnLetter(first + i)}1: expected the header "${expected}", found "${String(cell)}": ` +
        `a column was moved or renamed by hand; move the columns back to the order ${EVENT_FIELDS.join(', ')} ` +
        `(a header only renamed is written back by setup())`,
    );
  });
}

/**
 * A tab with fewer columns than the events' (one deleted by hand), refused by name: Google's own
 * error ("The coordinates of the range are outside the dimensions of the sheet") named neither the
 * tab nor the cause, and came back as `internal`.
 */
function deletedColumn(columns: number): MeterRefusal {
  return new MeterRefusal(
    'config_error',
    `${EVENTS_TAB} tab: ${columns} columns where the meter keeps ${EVENT_COLUMNS} (${EVENT_FIELDS.join(', ')}): ` +
      `a column was deleted by hand; Edit → Undo, or insert an empty column where it was and run Meter → Set up or repair, which writes its header back`,
  );
}

/**
 * Rows 1..`rows` of columns `first`.. of the events tab. Its columns are counted only when the
 * read fails (deletedColumn): the usual read costs no call more.
 */
function readColumns(sheet: Sheet, rows: number, first: number, width: number): unknown[][] {
  try {
    return sheet.getRange(1, first, rows, width).getValues();
  } catch (error) {
    const columns = sheet.getMaxColumns();
    if (columns >= EVENT_COLUMNS) throw error;
    throw deletedColumn(columns);
  }
}

/**
 * The header row checked before rows are written by position. It is read whole (`1:1`, one read
 * as before), so it also gives the tab's width, which says whether lastEventRow must look further.
 */
export function checkEventsHeader(sheet: Sheet): number {
  const header = sheet.getRange('1:1').getValues()[0];
  if (header.length < EVENT_COLUMNS) throw deletedColumn(header.length);
  checkHeader(header.slice(0, EVENT_COLUMNS), 1);
  return header.length;
}

/**
 * The last row holding an event (1, the header's, when none), for a tab `width` columns wide: a
 * column an operator keeps beside the events (a formula filled down T2:T1000 beside 100 events)
 * does not count (lastRowWithin).
 */
export function lastEventRow(sheet: Sheet, width: number): number {
  return lastRowWithin(sheet, EVENT_COLUMNS, width);
}

/** The rows under the header of columns `first`.. of the events tab, read with it in one call and checked. */
export function readUnderHeader(sheet: Sheet, first: number, width: number): unknown[][] {
  const lastRow = sheet.getLastRow();
  if (lastRow < 2) return [];
  const [header, ...rows] = readColumns(sheet, lastRow, first, width);
  checkHeader(header, first);
  return rows;
}

/** All data rows of the events tab, in one read (reports read the sheet once per run). */
export function readAllRows(sheet: Sheet): unknown[][] {
  return readUnderHeader(sheet, 1, EVENT_COLUMNS);
}

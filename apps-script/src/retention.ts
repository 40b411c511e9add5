/**
 * `applyRetention()`: hard-deletes rows of the events tab whose timestamp is older than the short
 * window (Config RETENTION_DAYS, default 30 days before today's UTC midnight, at least 7), in one batched
 * operation under the script lock: one read, one write of the rows that stay (shifted up, the freed
 * tail blanked in the same write), one deleteRows of the blank tail. Rows may be in any order (late
 * events with old timestamps exist).
 *
 * A run may be cut off after any call. The single write never leaves a row twice in the tab, and
 * the journal (retention-journal.ts), recorded before it, lets the next run finish the steps after
 * it: drop the blank tail, move the watermark.
 *
 * The same run drops the idempotency tab's old keys (idempotency-pruning.ts).
 *
 * A row the archive export has not taken yet (below the export watermark) is never deleted, and
 * when the watermark cannot be trusted nothing is deleted: the run says why.
 */
import { TEXT_FIELDS } from '../../schema/event-record';
import { configNumber, readConfig } from './config';
import { EVENT_AT, EVENT_COLUMNS, cellTime, getEventsSheet, readAllRows } from './events-sheet';
import { MAINTENANCE_LOCK_MS, withScriptLock } from './lock';
import { MIN_KEY_DAYS, pruneIdempotency } from './idempotency-pruning';
import { finishJournal, interruptedRun, startJournal } from './retention-journal';
import type { MeterServices, Sheet } from './services';
import { checkSheetTimeZone } from './sheet-time-zone';
import { DAY_MS, utcDayStart } from './utc-day';
import { readUndated } from './undated-rows';
import { readWatermark, watermarkHolds, type Watermark } from './watermark';

const DEFAULT_RETENTION_DAYS = 30;
/**
 * The shortest window: the 7-day figures (spend answer, cap alerts, Digest) count today and the 6
 * UTC days before, and the first cap check of a day still counts the 7 days before it for the day
 * that ended (alerts.ts, lateCrossing). A shorter one would delete rows they count, unsaid.
 */
const MIN_RETENTION_DAYS = 7;

const TEXT_COLUMNS = TEXT_FIELDS.map((f) => EVENT_AT[f]);

/** Values read back are plain; written again they need the quote prefix to stay text. */
function asWritten(row: unknown[]): unknown[] {
  const out = row.slice();
  for (const i of TEXT_COLUMNS) out[i] = asText(out[i]);
  return out;
}

export interface RetentionResult {
  deleted: number;
  keptUnexported: number;
  cutoff: string;
  message: string;
}

export function applyRetention(svc: MeterServices): RetentionResult {
  const config = readConfig(svc.spreadsheet);
  let days: number;
  try {
    days = configNumber(config, 'RETENTION_DAYS', DEFAULT_RETENTION_DAYS, MIN_RETENTION_DAYS);
  } catch (error) {
    if (shortWindow(config)) pruneKeysAlone(svc, error as Error);
    throw error;
  }
  checkSheetTimeZone(svc.spreadsheet);
  const cutoffMs = utcDayStart(svc.now().getTime()) - days * DAY_MS;
  const cutoff = new Date(cutoffMs).toISOString();
  const keyCutoffMs = utcDayStart(svc.now().getTime()) - Math.max(days, MIN_KEY_DAYS) * DAY_MS;
  return withScriptLock(svc, () => retainAndPrune(svc, cutoffMs, cutoff, keyCutoffMs), MAINTENANCE_LOCK_MS);
}

/** A RETENTION_DAYS of 1 to 6: accepted before the caps' week set the floor, so a deployment may hold one. */
function shortWindow(config: ReturnType<typeof readConfig>): boolean {
  try {
    return configNumber(config, 'RETENTION_DAYS', DEFAULT_RETENTION_DAYS, 1) < MIN_RETENTION_DAYS;
  } catch {
    return false;
  }
}

/**
 * The events wait for RETENTION_DAYS to be fixed, but the idempotency keys, kept 30 days whatever
 * a window this short says, are still pruned: the tab would otherwise grow by every action.
 */
function pruneKeysAlone(svc: MeterServices, refusal: Error): void {
  const keyCutoffMs = utcDayStart(svc.now().getTime()) - MIN_KEY_DAYS * DAY_MS;
  let removed: string;
  try {
    const keys = withScriptLock(svc, () => pruneIdempotency(svc, keyCutoffMs), MAINTENANCE_LOCK_MS);
    removed = keys ? `; removed ${keys} idempotency record(s) older than ${new Date(keyCutoffMs).toISOString()}` : '';
  } catch (error) {
    // The refusal is still what the run raises: it is what the operator must fix.
    removed = `; the idempotency records were not pruned either: ${(error as Error).message}`;
  }
  svc.log(`applyRetention: no events deleted: ${refusal.message}${removed}`);
}

/** Old events, then old idempotency keys, under one hold of the lock; the log says what both did. */
function retainAndPrune(svc: MeterServices, cutoffMs: number, cutoff: string, keyCutoffMs: number): RetentionResult {
  const result = retainUnderLock(svc, cutoffMs, cutoff);
  const keys = pruneIdempotency(svc, keyCutoffMs);
  if (keys) result.message += `; removed ${keys} idempotency record(s) older than ${new Date(keyCutoffMs).toISOString()}`;
  svc.log(`applyRetention: ${result.message}`);
  return result;
}

/** The run itself, under the script lock: an interrupted run finished first, then the old exported rows deleted. */
function retainUnderLock(svc: MeterServices, cutoffMs: number, cutoff: string): RetentionResult {
  const sheet = getEventsSheet(svc.spreadsheet);
  const rows = readAllRows(sheet);
  const stored = readWatermark(svc);
  // A previous run cut off after its rewrite: finish it first (the rows read are already rewritten).
  const resumed = interruptedRun(svc, stored, rows);
  if (resumed) finishJournal(svc, sheet, resumed);
  const wm = resumed ? resumed.after : stored;
  const earlier = resumed ? `finished an interrupted run that deleted ${resumed.count} row(s); ` : '';
  const finish = (deleted: number, keptUnexported: number, message: string): RetentionResult => {
    return { deleted: deleted + (resumed ? resumed.count : 0), keptUnexported, cutoff, message: earlier + message };
  };
  if (!watermarkHolds(wm, rows)) {
    const old = rows.filter((r) => cellTime(r[EVENT_AT.timestamp]) < cutoffMs).length;
    return finish(
      0,
      old,
      wm
        ? `nothing deleted: the export watermark no longer matches its row (rows moved by hand); ${old} old row(s) wait until exportArchive runs again`
        : `nothing deleted: no archive export has run yet; ${old} old row(s) wait for exportArchive`,
    );
  }
  const split = splitRows(rows, cutoffMs, wm.row, new Set(readUndated(svc)));
  const { deleted, keptUnexported } = split;
  const why = keptUnexported ? `; kept ${keptUnexported} old row(s) the archive export has not taken yet` : '';
  if (deleted === 0) return finish(0, keptUnexported, `no rows older than ${cutoff}${why}`);
  rewriteRows(svc, sheet, wm, split);
  return finish(deleted, keptUnexported, `deleted ${deleted} row(s) older than ${cutoff}${why}`);
}

interface SplitRows {
  keep: unknown[][];
  /** The index among the rows read of each row kept. */
  keptFrom: number[];
  deleted: number;
  keptUnexported: number;
  firstDeleted: number;
}

/**
 * The rows that stay, and how many go: old and exported (at or above the watermark's row, and not
 * a row the export passed over, undated or with a cell the archive would refuse: undated-rows.ts).
 */
function splitRows(rows: unknown[][], cutoffMs: number, wmRow: number, undated: Set<string>): SplitRows {
  const keep: unknown[][] = [];
  const keptFrom: number[] = [];
  let deleted = 0;
  let keptUnexported = 0;
  let firstDeleted = -1;
  rows.forEach((row, i) => {
    const old = cellTime(row[EVENT_AT.timestamp]) < cutoffMs; // NaN compares false: unreadable rows stay
    if (old && i + 2 <= wmRow && !undated.has(String(row[EVENT_AT.event_id]))) {
      deleted++;
      if (firstDeleted < 0) firstDeleted = i;
      return;
    }
    if (old) keptUnexported++;
    keep.push(row);
    keptFrom.push(i);
  });
  return { keep, keptFrom, deleted, keptUnexported, firstDeleted };
}

/** The journal recorded, the one write of the kept rows shifted up, then the journal's remaining steps. */
function rewriteRows(svc: MeterServices, sheet: Sheet, wm: Watermark, split: SplitRows): void {
  const { keep, deleted, firstDeleted } = split;
  // Every deleted row was at or above the watermark, so it moves up by exactly that many rows;
  // the row it names now may be a different (kept) event, so record that one's id.
  const row = wm.row - deleted;
  const after = { ...wm, row, eventId: row >= 2 ? String(keep[row - 2][EVENT_AT.event_id]) : '' };
  let maxRows = sheet.getMaxRows();
  if (maxRows - deleted <= 1) {
    sheet.insertRowsAfter(maxRows, 1); // a sheet keeps one data row
    maxRows += 1;
  }
  const journal = { before: wm, after, tailStart: keep.length + 2, count: deleted, maxRows };
  startJournal(svc, journal);
  // Rows above the first deleted one do not move. One write from there down: the kept rows
  // shifted up, then the freed tail blanked, so no state of the tab holds a row twice.
  const rewrite = keep.slice(firstDeleted).map(asWritten);
  for (let i = 0; i < deleted; i++) rewrite.push(new Array<string>(EVENT_COLUMNS).fill(''));
  const sources = split.keptFrom.slice(firstDeleted).map((i) => i - firstDeleted);
  const extra = operatorCells(sheet, firstDeleted + 2, rewrite.length, sources);
  if (extra) rewrite.forEach((row, i) => row.push(...extra[i]));
  sheet.getRange(firstDeleted + 2, 1, rewrite.length, rewrite[0].length).setValues(rewrite);
  finishJournal(svc, sheet, journal);
}

/**
 * The cells of the columns an operator keeps after the events' (setup() leaves them when they hold
 * values) for the rewrite from `top`: notes typed by hand move up with their rows (left in place,
 * each stood beside another event). Only the run of such columns right after the events' moves, in
 * the same one write: a column holding a formula anywhere (its header's too) is left as it is, as
 * is every column after it. A formula of its own row reads the event now there, and cells an array
 * formula fills (ARRAYFORMULA, FILTER) hold values without formulas: written back as values, they
 * would stop the array formula (#REF!). The tail, after `sources` (each kept row's index from
 * `top`), is blanked. Null when no column moves.
 */
function operatorCells(sheet: Sheet, top: number, count: number, sources: number[]): unknown[][] | null {
  const extra = sheet.getMaxColumns() - EVENT_COLUMNS;
  if (extra <= 0) return null;
  const formulas = sheet.getRange(1, EVENT_COLUMNS + 1, top + count - 1, extra).getFormulas();
  let width = 0;
  while (width < extra && formulas.every((row) => row[width] === '')) width++;
  if (width === 0) return null;
  const values = sheet.getRange(top, EVENT_COLUMNS + 1, count, width).getValues();
  return Array.from({ length: count }, (_, i) => (i < sources.length ? values[sources[i]].map(asText) : new Array<string>(width).fill('')));
}

/** A value read back, to be written again as itself: text keeps the quote prefix. */
function asText(value: unknown): unknown {
  return typeof value === 'string' && value !== '' ? `'${value}` : value;
}

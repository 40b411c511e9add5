/**
 * The nightly export that feeds the Parquet archive, and the same CSV served by
 * `doGet?action=export&since=`.
 *
 * `exportArchive()` writes every row added since the last export whose timestamp is before today
 * (UTC): the previous day's events plus late arrivals with older timestamps. Today's rows wait for
 * the next night. A row stamped further in the future than the clock-skew allowance cannot be
 * waited for (it would hold the watermark back for good), so it is exported at once and the run
 * says so. The file is `events_<previous day>.csv` in the archive folder; the archive dedups by
 * event_id, so a row exported twice (possible after a watermark reset) is harmless.
 *
 * The script lock is held for the read and for the watermark's move, not for the Drive write. One
 * run at a time, and a run cut off between the file and the watermark is finished by the next one
 * (EXPORT_IN_PROGRESS below).
 */
import { archiveFieldProblem } from '../../schema/archive-cell';
import { csvField, restoreText } from '../../schema/csv-cell';
import { CLOCK_SKEW_ALLOWANCE_MS, CSV_HEADER, EVENT_FIELDS, TEXT_FIELDS, formatTimestamp } from '../../schema/event-record';
import { EVENT_AT, cellTime, getEventsSheet, readAllRows } from './events-sheet';
import { folderFromConfig } from './folders';
import { MAINTENANCE_LOCK_MS, withScriptLock } from './lock';
import type { Folder, MeterServices } from './services';
import { checkSheetTimeZone } from './sheet-time-zone';
import { finishInterrupted } from './retention-journal';
import { findRow } from './tabs';
import { DAY_MS, parseUtcDay, utcDayStart } from './utc-day';
import { MAX_UNDATED, readUndated, writeUndated } from './undated-rows';
import { readWatermark, watermarkHolds, writeWatermark, type Watermark } from './watermark';

const ARCHIVE_FOLDER_NAME = 'AI meter archive';
/**
 * The most one file of the export holds, in UTF-8 bytes (counted high: a line with any non-ASCII
 * character as three bytes a character). Apps Script makes no file from more than 50 MB; a first
 * export of a full events tab (10 million cells, about 120 MB) is written as several files.
 */
const FILE_BYTES = 40 * 1024 * 1024;
/** A run starts no new file after this long: Apps Script stops a run at 6 minutes, and the next run goes on. */
const RUN_MS = 4 * 60_000;
const NON_ASCII = /[^ -~\t\r\n]/; // anything but printable ASCII and the white space a cell may hold
/** A CSV line's size in UTF-8, at most (the line and its CRLF). */
const lineBytes = (line: string) => (NON_ASCII.test(line) ? 3 : 1) * line.length + 2;

function isDate(value: unknown): value is Date {
  return Object.prototype.toString.call(value) === '[object Date]';
}

/**
 * One sheet row as a CSV line: dates as RFC 3339 UTC, booleans as true/false, text neutralised.
 * A timestamp typed by hand as text that the meter reads as a date (`11/22/2026 10:00`, kept as text
 * by a sheet whose locale puts the day first) is written as the instant the export dated it by:
 * as typed, the archive would refuse the whole night's file.
 */
function rowToCsvLine(row: unknown[]): string {
  return csvCells(row).join(',');
}

/** A row's fields as the CSV holds them: made once, for the line and for the archive's check alike. */
function csvCells(row: unknown[]): string[] {
  return EVENT_FIELDS.map((_, i) => csvField(exportValue(row, i)));
}

/** A cell as the export writes it (before csvField): dates as RFC 3339 UTC, booleans as true/false. */
function exportValue(row: unknown[], i: number): unknown {
  const v = row[i];
  if (i === EVENT_AT.timestamp && typeof v === 'string' && !Number.isNaN(cellTime(v))) return formatTimestamp(new Date(cellTime(v)));
  if (isDate(v)) return formatTimestamp(v);
  if (typeof v === 'boolean') return v ? 'true' : 'false';
  return v;
}

const TEXT_AT = new Set<number>(TEXT_FIELDS.map((f) => EVENT_FIELDS.indexOf(f)));

/** A CSV field's text as the archive reads it: unquoted, and a text field without its mark. */
function archiveReads(field: string, i: number): string {
  const text = field.startsWith('"') ? field.slice(1, -1).replace(/""/g, '"') : field;
  return TEXT_AT.has(i) ? restoreText(text) : text;
}

/**
 * The first field of a row that `npm run archive` would refuse (schema/archive-cell.ts: the rule
 * the archive checks with), as `field: expected …`, or '' when it takes the row. A cell edited by
 * hand (a token count `1.2k`, a cost `$1.50` or of $1,000,000,000, `yes` in a flag, an emptied
 * event_id) written as it is stopped the archive on the whole night's file, and the correction made
 * in the events tab afterwards never reached the archive. Such a row waits like an undated one.
 */
function archiveRefusal(cells: string[]): string {
  for (let i = 0; i < EVENT_FIELDS.length; i++) {
    const problem = archiveFieldProblem(EVENT_FIELDS[i], archiveReads(cells[i], i));
    if (problem) return `${EVENT_FIELDS[i]}: expected ${problem}`;
  }
  return '';
}

/** A file's text from its lines (the header first): CRLF after each. */
const csvText = (lines: string[]) => lines.join('\r\n') + '\r\n';

/**
 * `doGet?action=export&since=YYYY-MM-DD`: rows with a timestamp on or after that UTC day, without
 * the rows `npm run archive` would refuse (a cell edited by hand), which the nightly export holds
 * back too: written as typed, one of them made the archive refuse the whole export. How many were
 * left out, and why, goes to the log (the web app's executions), rows whose timestamp is no date
 * with them.
 */
export function exportSince(svc: Pick<MeterServices, 'spreadsheet' | 'log'>, since: string | undefined): string {
  const from = parseUtcDay(since).getTime();
  checkSheetTimeZone(svc.spreadsheet);
  const lines = [CSV_HEADER];
  const refused = new Map<string, number>();
  let undated = 0;
  for (const row of readAllRows(getEventsSheet(svc.spreadsheet))) {
    const t = cellTime(row[EVENT_AT.timestamp]);
    // On no day, so on none on or after `since`: left out, and said (a row every cell of which was
    // cleared by hand holds nothing to correct).
    if (Number.isNaN(t) && !row.every((cell) => cell === '' || cell === null)) undated++;
    if (!(t >= from)) continue;
    const cells = csvCells(row);
    const refusal = archiveRefusal(cells);
    if (refusal) refused.set(refusal, (refused.get(refusal) ?? 0) + 1);
    else lines.push(cells.join(','));
  }
  const notes = [
    undated ? `${undated} row(s) have no readable timestamp and were left out` : '',
    refused.size ? `${refusedCount(refused)} left out` : '',
  ].filter(Boolean);
  if (notes.length) svc.log(`export since ${since}: ${notes.join('; ')} (correct them in the events tab)`);
  return csvText(lines);
}

/** The archive folder from Config, creating it (and recording its id) when missing. */
export function archiveFolder(svc: MeterServices): Folder {
  return folderFromConfig(svc, 'ARCHIVE_FOLDER_ID', ARCHIVE_FOLDER_NAME);
}

export interface ExportResult {
  /** The files written, in order (on a night without rows, the day's file with the header only, unless the day has one). */
  files: string[];
  rows: number;
  watermark: number;
  message: string;
}

interface ExportPlan {
  out: unknown[][];
  /** `out` as CSV lines (header first), built as the plan measured them. */
  csv: string[];
  /** Rows are left for another file: this one is full (FILE_BYTES). */
  more: boolean;
  /** The last row up to which everything is exported after this run, and its event. */
  watermark: Watermark;
  /** Event ids of the rows passed over (undated, or a cell the archive would refuse) at or above that watermark, not exported yet (undated-rows.ts). */
  undated: string[];
  notes: string[];
}

/**
 * Rows passed over earlier (above the watermark) for a timestamp that was not a date or a cell the
 * archive would refuse, corrected since: due now when their day is over. Ids no longer in the tab
 * (the row deleted by hand) are dropped.
 */
function datedSince(rows: unknown[][], upTo: number, pending: Set<string>, todayStart: number, aheadFrom: number): unknown[][] {
  const due: unknown[][] = [];
  const seen = new Set<string>();
  for (let r = 2; r <= upTo && pending.size > 0; r++) {
    const id = String(rows[r - 2][EVENT_AT.event_id]);
    if (!pending.has(id)) continue;
    seen.add(id);
    const t = cellTime(rows[r - 2][EVENT_AT.timestamp]);
    // Still undated or refused by the archive, or today's: a later night.
    if (Number.isNaN(t) || archiveRefusal(csvCells(rows[r - 2])) || (t >= todayStart && t <= aheadFrom)) continue;
    due.push(rows[r - 2]);
    pending.delete(id);
  }
  for (const id of [...pending]) if (!seen.has(id)) pending.delete(id);
  return due;
}

/** Which rows to export and where the watermark ends, from the tab's rows (row 2 = index 0). */
function planExport(rows: unknown[][], previous: Watermark | null, nowMs: number, undated: string[]): ExportPlan {
  const trusted = watermarkHolds(previous, rows);
  const startRow = trusted ? previous.row : 1;
  const todayStart = utcDayStart(nowMs);
  const aheadFrom = nowMs + CLOCK_SKEW_ALLOWANCE_MS;
  const pending = new Set(undated);
  const out = datedSince(rows, startRow, pending, todayStart, aheadFrom);
  const typedBack = out.length;
  let row = startRow;
  let waiting = false;
  let unreadable = 0;
  const refused = new Map<string, number>(); // what the archive would say → how many rows
  let ahead = 0;
  const csv = [CSV_HEADER, ...out.map(rowToCsvLine)];
  let bytes = csv.reduce((n, line) => n + lineBytes(line), 0);
  const take = (row: unknown[], line: string): boolean => {
    if (out.length > 0 && bytes + lineBytes(line) > FILE_BYTES) return false;
    bytes += lineBytes(line);
    csv.push(line);
    out.push(row);
    return true;
  };
  let full = false;
  for (let r = startRow + 1; r <= rows.length + 1 && !full; r++) {
    // A row whose every cell was cleared by hand (an event "deleted" with the Delete key) holds
    // nothing to export or correct: passed over (the next row taken moves the watermark past it),
    // or the watermark would wait before it for good.
    if (rows[r - 2].every((cell) => cell === '' || cell === null)) continue;
    const t = cellTime(rows[r - 2][EVENT_AT.timestamp]);
    const id = String(rows[r - 2][EVENT_AT.event_id]);
    const cells = Number.isNaN(t) ? null : csvCells(rows[r - 2]);
    const refusal = cells ? archiveRefusal(cells) : '';
    const held = Number.isNaN(t) || refusal !== '';
    if (!held) pending.delete(id); // below the watermark (exported from the top): taken here
    if (held) {
      if (Number.isNaN(t)) unreadable++;
      else refused.set(refusal, (refused.get(refusal) ?? 0) + 1);
      // Remembered, the watermark may pass it; past what can be remembered, it waits here. A row is
      // remembered by its event_id: one whose event_id is refused (emptied by hand, its timestamp
      // too, say) waits here until it is corrected; remembered as '', it was lost once both were.
      if (!waiting && pending.size < MAX_UNDATED && !archiveFieldProblem('event_id', id)) pending.add(id);
      else waiting = true;
    } else if (t < todayStart || t > aheadFrom) {
      // From the future: waiting for its day would hold the watermark for good. A full file: the
      // row and those after it go into the next one (the watermark stays before it).
      if (!take(rows[r - 2], cells!.join(','))) full = true;
      else if (t > aheadFrom) ahead++;
    } else waiting = true; // today's row: next night's export takes it
    if (!waiting && !full) row = r;
  }
  // Another file only when the watermark can move on to it: past a row of today's, the next night's
  // export takes the rest anyway (and another file now would repeat these rows).
  const more = full && !waiting;
  const notes = [
    trusted ? '' : previous ? 'the previous watermark no longer matched its row (rows were moved by hand): exported from the top' : '',
    typedBack
      ? `${typedBack} row(s) passed over earlier for a timestamp that was not a date or a cell the archive would refuse, corrected since, were exported`
      : '',
    unreadable
      ? `${unreadable} row(s) have no readable timestamp and were not exported (correct them in the events tab: a later night exports them)`
      : '',
    refused.size ? refusedNote(refused) : '',
    ahead
      ? `${ahead} row(s) stamped more than ${CLOCK_SKEW_ALLOWANCE_MS / 60_000} minutes in the future were exported now instead of waiting for their day (check the sender's clock)`
      : '',
  ].filter(Boolean);
  const eventId = row >= 2 ? String(rows[row - 2][EVENT_AT.event_id]) : '';
  return { out, csv, more, watermark: { row, eventId, exportedAt: new Date(nowMs).toISOString() }, undated: [...pending], notes };
}

/** The run's note on rows held back for a cell the archive would refuse: how many, and why. */
function refusedNote(refused: Map<string, number>): string {
  const noId = [...refused.keys()].some((problem) => problem.startsWith('event_id:'))
    ? '; the watermark waits at a row whose event_id is refused (it cannot be remembered by that id), rows after it are exported again then'
    : '';
  return `${refusedCount(refused)} not exported (correct them in the events tab: a later night exports them${noId})`;
}

/** How many rows have a cell the archive would refuse, and why. */
function refusedCount(refused: Map<string, number>): string {
  const rows = [...refused.values()].reduce((a, b) => a + b, 0);
  const why = [...refused].map(([problem, n]) => `${n} with ${problem}`).join(', ');
  return `${rows} row(s) have a cell npm run archive would refuse (${why}) and were`;
}

function freeName(folder: Folder, base: string): string {
  let name = `${base}.csv`;
  for (let n = 2; folder.getFilesByName(name).hasNext(); n++) name = `${base}_${n}.csv`;
  return name;
}

/**
 * Records the watermark at its event. Retention may have run while the file was written (it
 * deletes only rows above the old watermark, so the event moved up): the event is found again.
 */
function commitWatermark(svc: MeterServices, wm: Watermark): number {
  let row = wm.row;
  if (row >= 2) {
    const sheet = getEventsSheet(svc.spreadsheet);
    const idColumn = EVENT_AT.event_id + 1;
    const inPlace = row <= sheet.getLastRow() && String(sheet.getRange(row, idColumn).getValue()) === wm.eventId;
    if (!inPlace) row = findRow(sheet, idColumn, wm.eventId);
  }
  if (row) writeWatermark(svc, { ...wm, row });
  return row;
}

/**
 * The undated rows the watermark passes that no file holds yet, then the watermark. In this order a
 * run cut off between the two loses nothing: the list drops only rows a file now holds, and until the
 * watermark moves retention deletes nothing past the old one (saved first, a watermark whose list was
 * not saved let retention delete a held row no file had). The next run writes both again.
 */
function commitExport(svc: MeterServices, wm: Watermark, undated: string[]): number {
  writeUndated(svc, undated);
  return commitWatermark(svc, wm);
}

/**
 * The export's claim (script property): the run that holds the export and since when, and the file
 * it is writing with the watermark that file leads to. One run at a time: a run that finds the
 * claim held does nothing (two runs at once wrote the same rows twice, and one's marker replaced
 * the other's, so a watermark could be moved past rows no file held). The file and watermark are
 * recorded before the Drive write: a run cut off after the write (the watermark's move timed out)
 * is finished by the next one, which moves the watermark when the file is there, instead of
 * writing its rows again. A run that fails lets go at once; one that could not (Apps Script
 * stopped it) holds the claim until it runs out.
 */
const CLAIM_PROPERTY = 'EXPORT_IN_PROGRESS';
/** Longer than any run lasts (Apps Script stops a script after 6 minutes). */
const CLAIM_MS = 30 * 60_000;

interface Claim {
  /** The run holding the export and when it started; absent once it let go. */
  run?: string;
  since?: number;
  /** The file being written and the watermark it leads to: due when the file is in the folder. */
  file?: string;
  watermark?: Watermark;
  /** The undated rows' ids that go with that watermark. */
  undated?: string[];
}

function readClaim(svc: MeterServices): Claim | null {
  const text = svc.properties.getProperty(CLAIM_PROPERTY);
  if (!text) return null;
  try {
    const claim = JSON.parse(text) as unknown;
    return claim && typeof claim === 'object' ? (claim as Claim) : {};
  } catch {
    return {}; // unreadable: nothing in it to finish
  }
}

function writeClaim(svc: MeterServices, claim: Claim): void {
  svc.properties.setProperty(CLAIM_PROPERTY, JSON.stringify(claim));
}

/** Under the lock: the claim for this run (with what an earlier run left to finish), or the run that holds it. */
function takeClaim(svc: MeterServices, run: string, nowMs: number): { holder: Claim & { since: number } } | { left: Claim | null } {
  const claim = readClaim(svc);
  if (claim?.run && typeof claim.since === 'number' && Math.abs(nowMs - claim.since) < CLAIM_MS)
    return { holder: { ...claim, since: claim.since } };
  writeClaim(svc, { run, since: nowMs, file: claim?.file, watermark: claim?.watermark, undated: claim?.undated });
  return { left: claim };
}

/** Moves the watermark of a run that wrote its file and stopped before moving it. */
function finishLeft(svc: MeterServices, run: string, nowMs: number, left: Claim | null): string {
  if (!left?.file) return '';
  let note = '';
  if (left.watermark && archiveFolder(svc).getFilesByName(left.file).hasNext()) {
    const watermark = left.watermark;
    withScriptLock(svc, () => commitExport(svc, watermark, left.undated ?? []), MAINTENANCE_LOCK_MS);
    note = `finished the previous run (${left.file} was written, its watermark not moved); `;
  }
  writeClaim(svc, { run, since: nowMs });
  return note;
}

/** A run that fails lets go of the claim, leaving its file and watermark for the next run to finish. */
function letGo(svc: MeterServices, run: string): void {
  try {
    const claim = readClaim(svc);
    if (claim?.run === run) writeClaim(svc, { file: claim.file, watermark: claim.watermark, undated: claim.undated });
  } catch {
    // Properties failed too: the claim runs out by itself.
  }
}

/** The plan from the tab as it is, a retention run cut off after its rewrite finished first (under the lock). */
function planFromTab(svc: MeterServices, nowMs: number): ExportPlan {
  const sheet = getEventsSheet(svc.spreadsheet);
  const rows = readAllRows(sheet);
  const stored = readWatermark(svc);
  const moved = finishInterrupted(svc, sheet, stored, rows);
  // Its blank tail dropped, the tab is read again (only then).
  return moved ? planExport(readAllRows(sheet), moved, nowMs, readUndated(svc)) : planExport(rows, stored, nowMs, readUndated(svc));
}

/** One file of the export: planned under the lock, written, then its watermark committed under the lock. */
function exportFile(svc: MeterServices, run: string, nowMs: number): { plan: ExportPlan; file: string | null; watermark: number } {
  const plan = withScriptLock(svc, () => planFromTab(svc, nowMs), MAINTENANCE_LOCK_MS);
  let file: string | null = null;
  const folder = archiveFolder(svc);
  const base = `events_${new Date(utcDayStart(nowMs) - DAY_MS).toISOString().slice(0, 10)}`;
  // A night without rows still writes the day's file, the header alone, so every day has one: a
  // missing file read the same as an export that did not run, and a job archiving the previous
  // day's file failed on a quiet day. Only when the day has none yet: a later run writes no second.
  if (plan.out.length > 0 || !folder.getFilesByName(`${base}.csv`).hasNext()) {
    file = freeName(folder, base);
    writeClaim(svc, { run, since: nowMs, file, watermark: plan.watermark, undated: plan.undated });
    folder.createFile(file, csvText(plan.csv), 'text/csv');
  }
  const watermark = withScriptLock(
    svc,
    () => {
      const row = commitExport(svc, plan.watermark, plan.undated);
      // Still this run's while it writes more files; let go with the last.
      if (plan.more) writeClaim(svc, { run, since: nowMs });
      else svc.properties.deleteProperty(CLAIM_PROPERTY);
      return row;
    },
    MAINTENANCE_LOCK_MS,
  );
  return { plan, file, watermark };
}

/** The rows due, in files of at most FILE_BYTES, as many as the run's time allows (RUN_MS). */
function exportRows(svc: MeterServices, run: string, nowMs: number, left: Claim | null): ExportResult {
  const earlier = finishLeft(svc, run, nowMs, left);
  const files: string[] = [];
  const wrote: string[] = [];
  const notes = new Set<string>();
  let rows = 0;
  let step;
  do {
    step = exportFile(svc, run, nowMs);
    if (step.file) {
      files.push(step.file);
      wrote.push(`${step.plan.out.length} row(s) to ${step.file}`);
    }
    step.plan.notes.forEach((note) => notes.add(note));
    rows += step.plan.out.length;
  } while (step.plan.more && svc.now().getTime() - nowMs < RUN_MS);
  if (step.plan.more) svc.properties.deleteProperty(CLAIM_PROPERTY); // out of time: the next run goes on
  const { plan, watermark } = step;
  const where = watermark
    ? `watermark at row ${watermark}`
    : 'watermark unchanged: the last exported event is no longer in the tab (removed by hand?)';
  const rest = plan.more ? `; more rows are due: the run stopped after ${RUN_MS / 60_000} minutes, the next export goes on` : '';
  const wroteNote =
    rows > 0 ? `wrote ${wrote.join(', ')}` : `no rows to export${files.length ? ` (${files[0]} written with the header only)` : ''}`;
  const message = `${earlier}${wroteNote}; ${where}${rest}${notes.size ? `; ${[...notes].join('; ')}` : ''}`;
  return { files, rows, watermark, message };
}

/** What a run that found the claim held says: it did nothing. */
function busy(svc: MeterServices, since: number): ExportResult {
  const message = `another export is running (since ${new Date(since).toISOString()}): this run did nothing; a run that stopped without letting go is taken over ${CLAIM_MS / 60_000} minutes after it started`;
  return { files: [], rows: 0, watermark: readWatermark(svc)?.row ?? 0, message };
}

export function exportArchive(svc: MeterServices): ExportResult {
  checkSheetTimeZone(svc.spreadsheet);
  const nowMs = svc.now().getTime();
  const run = svc.uuid();
  let result: ExportResult;
  try {
    // Taken inside the try: a claim written whose reply was lost (Properties timed out after the
    // write) is let go like any other, not held for CLAIM_MS by a run that did nothing.
    const claim = withScriptLock(svc, () => takeClaim(svc, run, nowMs), MAINTENANCE_LOCK_MS);
    result = 'holder' in claim ? busy(svc, claim.holder.since) : exportRows(svc, run, nowMs, claim.left);
  } catch (e) {
    letGo(svc, run);
    throw e;
  }
  svc.log(`exportArchive: ${result.message}`);
  return result;
}

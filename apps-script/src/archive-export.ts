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
import { csvField } from '../../schema/csv-cell';
import { CLOCK_SKEW_ALLOWANCE_MS, CSV_HEADER, EVENT_FIELDS, formatTimestamp } from '../../schema/event-record';
import { EVENT_AT, cellTime, getEventsSheet, readAllRows } from './events-sheet';
import { folderFromConfig } from './folders';
import { MAINTENANCE_LOCK_MS, withScriptLock } from './lock';
import type { Folder, MeterServices } from './services';
import { checkSheetTimeZone } from './sheet-time-zone';
import { findRow } from './tabs';
import { DAY_MS, parseUtcDay, utcDayStart } from './utc-day';
import { MAX_UNDATED, readUndated, writeUndated } from './undated-rows';
import { readWatermark, watermarkHolds, writeWatermark, type Watermark } from './watermark';

const ARCHIVE_FOLDER_NAME = 'AI meter archive';

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
  return EVENT_FIELDS.map((_, i) => {
    const v = row[i];
    if (i === EVENT_AT.timestamp && typeof v === 'string' && !Number.isNaN(cellTime(v))) return formatTimestamp(new Date(cellTime(v)));
    if (isDate(v)) return formatTimestamp(v);
    if (typeof v === 'boolean') return v ? 'true' : 'false';
    return csvField(v);
  }).join(',');
}

function rowsToCsv(rows: unknown[][]): string {
  return [CSV_HEADER, ...rows.map(rowToCsvLine)].join('\r\n') + '\r\n';
}

/** `doGet?action=export&since=YYYY-MM-DD`: rows with a timestamp on or after that UTC day. */
export function exportSince(svc: Pick<MeterServices, 'spreadsheet'>, since: string | undefined): string {
  const from = parseUtcDay(since).getTime();
  checkSheetTimeZone(svc.spreadsheet);
  return rowsToCsv(readAllRows(getEventsSheet(svc.spreadsheet)).filter((row) => cellTime(row[EVENT_AT.timestamp]) >= from));
}

/** The archive folder from Config, creating it (and recording its id) when missing. */
export function archiveFolder(svc: MeterServices): Folder {
  return folderFromConfig(svc, 'ARCHIVE_FOLDER_ID', ARCHIVE_FOLDER_NAME);
}

export interface ExportResult {
  file: string | null;
  rows: number;
  watermark: number;
  message: string;
}

interface ExportPlan {
  out: unknown[][];
  /** The last row up to which everything is exported after this run, and its event. */
  watermark: Watermark;
  /** Event ids of the undated rows at or above that watermark, not exported yet (undated-rows.ts). */
  undated: string[];
  notes: string[];
}

/**
 * Undated rows passed over earlier (above the watermark) whose date has been typed back since: due
 * now when their day is over. Ids no longer in the tab (the row deleted by hand) are dropped.
 */
function datedSince(rows: unknown[][], upTo: number, pending: Set<string>, todayStart: number, aheadFrom: number): unknown[][] {
  const due: unknown[][] = [];
  const seen = new Set<string>();
  for (let r = 2; r <= upTo && pending.size > 0; r++) {
    const id = String(rows[r - 2][EVENT_AT.event_id]);
    if (!pending.has(id)) continue;
    seen.add(id);
    const t = cellTime(rows[r - 2][EVENT_AT.timestamp]);
    if (Number.isNaN(t) || (t >= todayStart && t <= aheadFrom)) continue; // still undated, or today's: a later night
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
  let ahead = 0;
  for (let r = startRow + 1; r <= rows.length + 1; r++) {
    const t = cellTime(rows[r - 2][EVENT_AT.timestamp]);
    const id = String(rows[r - 2][EVENT_AT.event_id]);
    if (!Number.isNaN(t)) pending.delete(id); // below the watermark (exported from the top): taken here
    if (Number.isNaN(t)) {
      unreadable++;
      // Remembered, the watermark may pass it; past what can be remembered, it waits here.
      if (!waiting && pending.size < MAX_UNDATED) pending.add(id);
      else waiting = true;
    } else if (t < todayStart) out.push(rows[r - 2]);
    else if (t > aheadFrom) {
      out.push(rows[r - 2]); // from the future: waiting for its day would hold the watermark for good
      ahead++;
    } else waiting = true; // today's row: next night's export takes it
    if (!waiting) row = r;
  }
  const notes = [
    trusted ? '' : previous ? 'the previous watermark no longer matched its row (rows were moved by hand): exported from the top' : '',
    typedBack ? `${typedBack} row(s) passed over earlier for a timestamp that was not a date, dated since, were exported` : '',
    unreadable
      ? `${unreadable} row(s) have no readable timestamp and were not exported (correct them in the events tab: a later night exports them)`
      : '',
    ahead
      ? `${ahead} row(s) stamped more than ${CLOCK_SKEW_ALLOWANCE_MS / 60_000} minutes in the future were exported now instead of waiting for their day (check the sender's clock)`
      : '',
  ].filter(Boolean);
  const eventId = row >= 2 ? String(rows[row - 2][EVENT_AT.event_id]) : '';
  return { out, watermark: { row, eventId, exportedAt: new Date(nowMs).toISOString() }, undated: [...pending], notes };
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

/** The watermark and, with it, the undated rows it passed that no file holds yet. */
function commitExport(svc: MeterServices, wm: Watermark, undated: string[]): number {
  const row = commitWatermark(svc, wm);
  writeUndated(svc, undated);
  return row;
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

function exportRows(svc: MeterServices, run: string, nowMs: number, left: Claim | null): ExportResult {
  const earlier = finishLeft(svc, run, nowMs, left);
  const plan = withScriptLock(
    svc,
    () => planExport(readAllRows(getEventsSheet(svc.spreadsheet)), readWatermark(svc), nowMs, readUndated(svc)),
    MAINTENANCE_LOCK_MS,
  );
  let file: string | null = null;
  if (plan.out.length > 0) {
    const folder = archiveFolder(svc);
    file = freeName(folder, `events_${new Date(utcDayStart(nowMs) - DAY_MS).toISOString().slice(0, 10)}`);
    writeClaim(svc, { run, since: nowMs, file, watermark: plan.watermark, undated: plan.undated });
    folder.createFile(file, rowsToCsv(plan.out), 'text/csv');
  }
  const watermark = withScriptLock(
    svc,
    () => {
      const row = commitExport(svc, plan.watermark, plan.undated);
      svc.properties.deleteProperty(CLAIM_PROPERTY);
      return row;
    },
    MAINTENANCE_LOCK_MS,
  );
  const where = watermark
    ? `watermark at row ${watermark}`
    : 'watermark unchanged: the last exported event is no longer in the tab (removed by hand?)';
  const message = `${earlier}${file ? `wrote ${plan.out.length} row(s) to ${file}` : 'no rows to export'}; ${where}${plan.notes.length ? `; ${plan.notes.join('; ')}` : ''}`;
  return { file, rows: plan.out.length, watermark, message };
}

/** What a run that found the claim held says: it did nothing. */
function busy(svc: MeterServices, since: number): ExportResult {
  const message = `another export is running (since ${new Date(since).toISOString()}): this run did nothing; a run that stopped without letting go is taken over ${CLAIM_MS / 60_000} minutes after it started`;
  return { file: null, rows: 0, watermark: readWatermark(svc)?.row ?? 0, message };
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

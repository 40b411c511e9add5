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
 * The script lock is held for the read and for the watermark's move, not for the Drive write. A run
 * cut off between the file and the watermark is finished by the next one (EXPORT_IN_PROGRESS below).
 */
import { csvField } from '../../schema/csv-cell';
import { CLOCK_SKEW_ALLOWANCE_MS, CSV_HEADER, EVENT_FIELDS, formatTimestamp } from '../../schema/event-record';
import { EVENT_AT, cellTime, getEventsSheet, readAllRows } from './events-sheet';
import { folderFromConfig } from './folders';
import { MAINTENANCE_LOCK_MS, withScriptLock } from './lock';
import type { Folder, MeterServices } from './services';
import { findRow } from './tabs';
import { DAY_MS, parseUtcDay, utcDayStart } from './utc-day';
import { readWatermark, watermarkHolds, writeWatermark, type Watermark } from './watermark';

const ARCHIVE_FOLDER_NAME = 'AI meter archive';

function isDate(value: unknown): value is Date {
  return Object.prototype.toString.call(value) === '[object Date]';
}

/** One sheet row as a CSV line: dates as RFC 3339 UTC, booleans as true/false, text neutralised. */
function rowToCsvLine(row: unknown[]): string {
  return EVENT_FIELDS.map((_, i) => {
    const v = row[i];
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
  notes: string[];
}

/** Which rows to export and where the watermark ends, from the tab's rows (row 2 = index 0). */
function planExport(rows: unknown[][], previous: Watermark | null, nowMs: number): ExportPlan {
  const trusted = watermarkHolds(previous, rows);
  const startRow = trusted ? previous.row : 1;
  const todayStart = utcDayStart(nowMs);
  const aheadFrom = nowMs + CLOCK_SKEW_ALLOWANCE_MS;
  const out: unknown[][] = [];
  let row = startRow;
  let waiting = false;
  let unreadable = 0;
  let ahead = 0;
  for (let r = startRow + 1; r <= rows.length + 1; r++) {
    const t = cellTime(rows[r - 2][EVENT_AT.timestamp]);
    if (Number.isNaN(t)) unreadable++;
    else if (t < todayStart) out.push(rows[r - 2]);
    else if (t > aheadFrom) {
      out.push(rows[r - 2]); // from the future: waiting for its day would hold the watermark for good
      ahead++;
    } else waiting = true; // today's row: next night's export takes it
    if (!waiting) row = r;
  }
  const notes = [
    trusted ? '' : previous ? 'the previous watermark no longer matched its row (rows were moved by hand): exported from the top' : '',
    unreadable ? `${unreadable} row(s) have no readable timestamp and were not exported` : '',
    ahead
      ? `${ahead} row(s) stamped more than ${CLOCK_SKEW_ALLOWANCE_MS / 60_000} minutes in the future were exported now instead of waiting for their day (check the sender's clock)`
      : '',
  ].filter(Boolean);
  const eventId = row >= 2 ? String(rows[row - 2][EVENT_AT.event_id]) : '';
  return { out, watermark: { row, eventId, exportedAt: new Date(nowMs).toISOString() }, notes };
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
 * The file a run is writing and the watermark it leads to (script property), recorded before the
 * Drive write: a run cut off after the write (the watermark's move timed out) is finished by the
 * next one, which moves the watermark when the file is there, instead of writing its rows again.
 */
const PENDING_PROPERTY = 'EXPORT_IN_PROGRESS';

function finishPending(svc: MeterServices): string {
  const text = svc.properties.getProperty(PENDING_PROPERTY);
  if (!text) return '';
  let pending: Partial<{ file: string; watermark: Watermark }> = {};
  try {
    pending = JSON.parse(text) as typeof pending;
  } catch {
    // unreadable: dropped below
  }
  let note = '';
  const { file, watermark } = pending ?? {};
  if (file && watermark && archiveFolder(svc).getFilesByName(file).hasNext()) {
    withScriptLock(svc, () => commitWatermark(svc, watermark), MAINTENANCE_LOCK_MS);
    note = `finished the previous run (${file} was written, its watermark not moved); `;
  }
  svc.properties.deleteProperty(PENDING_PROPERTY);
  return note;
}

export function exportArchive(svc: MeterServices): ExportResult {
  const nowMs = svc.now().getTime();
  const earlier = finishPending(svc);
  const plan = withScriptLock(
    svc,
    () => planExport(readAllRows(getEventsSheet(svc.spreadsheet)), readWatermark(svc), nowMs),
    MAINTENANCE_LOCK_MS,
  );
  let file: string | null = null;
  if (plan.out.length > 0) {
    const folder = archiveFolder(svc);
    file = freeName(folder, `events_${new Date(utcDayStart(nowMs) - DAY_MS).toISOString().slice(0, 10)}`);
    svc.properties.setProperty(PENDING_PROPERTY, JSON.stringify({ file, watermark: plan.watermark }));
    folder.createFile(file, rowsToCsv(plan.out), 'text/csv');
  }
  const watermark = withScriptLock(svc, () => commitWatermark(svc, plan.watermark), MAINTENANCE_LOCK_MS);
  if (file) svc.properties.deleteProperty(PENDING_PROPERTY);
  const where = watermark
    ? `watermark at row ${watermark}`
    : 'watermark unchanged: the last exported event is no longer in the tab (removed by hand?)';
  const message = `${earlier}${file ? `wrote ${plan.out.length} row(s) to ${file}` : 'no rows to export'}; ${where}${plan.notes.length ? `; ${plan.notes.join('; ')}` : ''}`;
  svc.log(`exportArchive: ${message}`);
  return { file, rows: plan.out.length, watermark, message };
}

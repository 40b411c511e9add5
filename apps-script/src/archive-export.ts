/**
 * The nightly export that feeds the Parquet archive (Document 2, "A nightly export of the events
 * tab feeds the Parquet archive"), and the same CSV served by `doGet?action=export&since=`.
 *
 * `exportArchive()` writes every row added since the last export whose timestamp is before today
 * (UTC): the previous day's events plus late arrivals with older timestamps. Today's rows wait for
 * the next night. The file is `events_<previous day>.csv` in the archive folder; the archive side
 * dedups by event_id, so a row exported twice (possible after a watermark reset) is harmless.
 */
import { CSV_HEADER, EVENT_FIELDS, csvField, formatTimestamp, parseRfc3339 } from '../../schema/event-record';
import { configText, readConfig, writeConfigValue } from './config';
import { cellTime, getEventsSheet, readAllRows } from './events-sheet';
import { withScriptLock } from './ingest';
import type { FolderLike, MeterServices } from './services';
import { DAY_MS, utcDayStart } from './spend';
import { readWatermark, watermarkHolds, writeWatermark } from './watermark';

const ARCHIVE_FOLDER_NAME = 'AI meter archive';
/** Export and retention read the whole tab; they may wait longer for the lock than ingest does. */
export const MAINTENANCE_LOCK_MS = 30_000;

function isDate(value: unknown): value is Date {
  return Object.prototype.toString.call(value) === '[object Date]';
}

/** One sheet row as a CSV line: dates as RFC 3339 UTC, booleans as true/false. */
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
  const day = /^\d{4}-\d{2}-\d{2}$/.test(since ?? '') ? parseRfc3339(`${since}T00:00:00Z`) : null;
  if (!day) throw new Error(`since: expected a UTC day as YYYY-MM-DD, got "${since ?? ''}"`);
  const from = day.getTime();
  return rowsToCsv(readAllRows(getEventsSheet(svc.spreadsheet)).filter((row) => cellTime(row[1]) >= from));
}

/** The archive folder from Config, creating it (and recording its id) when missing. */
export function archiveFolder(svc: MeterServices): FolderLike {
  const id = configText(readConfig(svc.spreadsheet), 'ARCHIVE_FOLDER_ID');
  if (id) return svc.drive.getFolderById(id);
  const folder = svc.drive.createFolder(ARCHIVE_FOLDER_NAME);
  writeConfigValue(svc.spreadsheet, 'ARCHIVE_FOLDER_ID', folder.getId());
  return folder;
}

export interface ExportResult {
  file: string | null;
  rows: number;
  watermark: number;
  message: string;
}

function freeName(folder: FolderLike, base: string): string {
  let name = `${base}.csv`;
  for (let n = 2; folder.getFilesByName(name).hasNext(); n++) name = `${base}_${n}.csv`;
  return name;
}

export function exportArchive(svc: MeterServices): ExportResult {
  return withScriptLock(
    svc,
    () => {
      const rows = readAllRows(getEventsSheet(svc.spreadsheet));
      const previous = readWatermark(svc);
      const trusted = watermarkHolds(previous, rows);
      const startRow = trusted ? previous.row : 1;
      const todayStart = utcDayStart(svc.now().getTime());

      const out: unknown[][] = [];
      let watermark = startRow;
      let waiting = false;
      let unreadable = 0;
      for (let r = startRow + 1; r <= rows.length + 1; r++) {
        const row = rows[r - 2];
        const t = cellTime(row[1]);
        if (Number.isNaN(t)) unreadable++;
        else if (t < todayStart) out.push(row);
        else waiting = true; // today's row: next night's export takes it
        if (!waiting) watermark = r;
      }

      let file: string | null = null;
      if (out.length > 0) {
        const folder = archiveFolder(svc);
        file = freeName(folder, `events_${new Date(todayStart - DAY_MS).toISOString().slice(0, 10)}`);
        folder.createFile(file, rowsToCsv(out), 'text/csv');
      }
      writeWatermark(svc, {
        row: watermark,
        eventId: watermark >= 2 ? String(rows[watermark - 2][0]) : '',
        exportedAt: svc.now().toISOString(),
      });
      const notes = [
        trusted ? '' : previous ? 'the previous watermark no longer matched its row (rows were moved by hand): exported from the top' : '',
        unreadable ? `${unreadable} row(s) have no readable timestamp and were not exported` : '',
      ].filter(Boolean);
      const message = `${file ? `wrote ${out.length} row(s) to ${file}` : 'no rows to export'}; watermark at row ${watermark}${notes.length ? `; ${notes.join('; ')}` : ''}`;
      svc.log(`exportArchive: ${message}`);
      return { file, rows: out.length, watermark, message };
    },
    MAINTENANCE_LOCK_MS,
  );
}

/**
 * The spreadsheet's time zone. Sheets keeps a date-time as a wall-clock time and Apps Script reads
 * it back in the spreadsheet's time zone, so setup() sets GMT: a stored instant then reads back as
 * itself. Changed later (File > Settings), every timestamp reads back hours off and the UTC days
 * of the caps, the digest, the exports and retention move unsaid; the functions that read
 * timestamps refuse instead, until setup() sets the zone back. So does ingest: a date-time written
 * while the zone is another is kept as that zone's wall-clock time, and would read back hours off
 * (in another UTC day) once the zone is GMT again.
 */
import { MeterRefusal } from '../../schema/meter-reply';
import type { Spreadsheet } from './services';

export const SHEET_TIME_ZONE = 'Etc/GMT';

/** The zones that are UTC all year under another name (IANA's links): they read back the same. */
const UTC_ALL_YEAR = new Set([
  ...['Etc/GMT', 'Etc/GMT0', 'Etc/GMT+0', 'Etc/GMT-0', 'Etc/Greenwich', 'Etc/UCT', 'Etc/UTC', 'Etc/Universal', 'Etc/Zulu'],
  ...['GMT', 'GMT0', 'GMT+0', 'GMT-0', 'Greenwich', 'UCT', 'UTC', 'Universal', 'Zulu'],
]);

/** Refuses (`config_error`, naming the zone) when the spreadsheet's time zone is no longer UTC. */
export function checkSheetTimeZone(ss: Pick<Spreadsheet, 'getSpreadsheetTimeZone'>): void {
  const zone = ss.getSpreadsheetTimeZone();
  if (UTC_ALL_YEAR.has(zone)) return;
  throw new MeterRefusal(
    'config_error',
    `the spreadsheet's time zone is ${zone}, not GMT as setup() set it: its timestamps would read back hours off; ` +
      'run Meter → Set up or repair to set it back (ingest is refused until then: senders keep their events and retry)',
  );
}

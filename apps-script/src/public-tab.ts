/**
 * The pii-free `events_public` tab that Looker Studio reads (a live QUERY over the events tab that
 * drops rows flagged as personal data), and the Linking API URL that builds the report on it from
 * a template.
 */
import { EVENT_FIELDS, type EventField } from '../../schema/event-record';
import { MeterRefusal } from '../../schema/meter-reply';
import { configText, readConfig, type ConfigValues } from './config';
import { EVENT_AT, cellTime, columnOf } from './events-sheet';
import type { MeterServices, Sheet } from './services';
import { PUBLIC_TAB, columnLetter, fitGrid, insertTabs, type TabGrid } from './tabs';

/** The fewest rows kept beyond the events': room for the events ingested until the next refresh. */
const SPARE_ROWS = 1000;
/**
 * The most (130,000 cells): twice 5,000 events an hour, over twice the 50,000 a day the docs plan
 * for. A backlog stamped within one hour (events imported at once) must not set aside room that
 * ingest then lacks.
 */
const MAX_SPARE_ROWS = 10_000;
const HOUR_MS = 3_600_000;
/** The days whose busiest hour sets the spare rows: a week, so Monday morning's rate is known on Monday morning. */
const RATE_DAYS = 7;

/** Columns of the pii-free tab: what a public dashboard needs (no ids of people or reviewers). */
const PUBLIC_FIELDS: EventField[] = [
  'timestamp',
  'actor_type',
  'provider',
  'model',
  'region',
  'input_tokens',
  'output_tokens',
  'latency_ms',
  'cost_usd',
  'customer_id',
  'pii_flag',
  'decision',
  'error_code',
];

/** A live QUERY over the events tab that drops pii rows; Sheets recalculates it on every change. */
function publicQueryFormula(): string {
  const columns = PUBLIC_FIELDS.map((f) => columnLetter(columnOf(f))).join(', ');
  const piiColumn = columnLetter(columnOf('pii_flag'));
  return `=QUERY(events!A:${columnLetter(EVENT_FIELDS.length)}, "select ${columns} where ${piiColumn} <> true", 1)`;
}

/** The public tab and its grid: as tall as the events tab (a QUERY with too few rows shows an error instead of the data). */
export function publicTabGrid(eventRows: number): TabGrid {
  return { name: PUBLIC_TAB, rows: eventRows + 1, columns: PUBLIC_FIELDS.length };
}

/**
 * The rows the public tab keeps beyond the events' for the events ingested until the next hourly
 * refresh: twice the events of the busiest clock hour of the last week (a refresh that fails, Sheets
 * timing out, leaves the tab two hours), at least 1,000 and at most 10,000. A fixed 1,000 was outgrown within the
 * hour from about 1,000 events an hour (24,000 a day), and the QUERY showed #REF! until the next refresh.
 */
export function publicSpareRows(rows: unknown[][], nowMs: number): number {
  const from = Math.floor(nowMs / HOUR_MS) - RATE_DAYS * 24;
  const perHour = new Map<number, number>();
  let busiest = 0;
  for (const row of rows) {
    const hour = Math.floor(cellTime(row[EVENT_AT.timestamp]) / HOUR_MS); // NaN for no date: in no hour
    if (!(hour >= from)) continue;
    const n = (perHour.get(hour) ?? 0) + 1;
    perHour.set(hour, n);
    if (n > busiest) busiest = n;
  }
  return Math.min(MAX_SPARE_ROWS, Math.max(SPARE_ROWS, 2 * busiest));
}

/**
 * Keeps the public tab's formula in place and its grid as tall as the events tab: grown with it,
 * and cut back (to it and `spare` rows, publicSpareRows) once retention has shrunk it. Creating it,
 * or a grid that would pass the spreadsheet's cell limit, is refused (`spreadsheet_full`) before anything changes.
 */
export function refreshPublicTab(svc: MeterServices, eventRows: number, spare: number): Sheet {
  const [sheet] = insertTabs(svc.spreadsheet, [publicTabGrid(eventRows)]);
  fitGrid(svc.spreadsheet, sheet, eventRows + 1, PUBLIC_FIELDS.length, spare);
  sheet.getRange(1, 1).setFormula(publicQueryFormula());
  return sheet;
}

/** Looker Studio Linking API: a copy of the template report on the pii-free tab. */
export function lookerReportUrl(svc: MeterServices, config: ConfigValues = readConfig(svc.spreadsheet)): string {
  const template = configText(config, 'LOOKER_TEMPLATE_REPORT_ID');
  if (!template)
    throw new MeterRefusal(
      'config_error',
      'Config LOOKER_TEMPLATE_REPORT_ID is empty: put the id of your template report there (see README)',
    );
  const sheet = svc.spreadsheet.getSheetByName(PUBLIC_TAB);
  if (!sheet) throw new MeterRefusal('not_set_up', `the "${PUBLIC_TAB}" tab is missing: run "Refresh digest" from the Meter menu first`);
  const q = (s: string) => encodeURIComponent(s);
  return (
    'https://lookerstudio.google.com/reporting/create' +
    `?c.reportId=${q(template)}&r.reportName=${q('AI spend')}` +
    `&ds.ds0.connector=googleSheets&ds.ds0.spreadsheetId=${q(svc.spreadsheet.getId())}` +
    `&ds.ds0.worksheetId=${sheet.getSheetId()}&ds.ds0.hasHeader=true&ds.ds0.datasourceName=${q('AI events (no PII)')}`
  );
}

/**
 * The pii-free `events_public` tab that Looker Studio reads (a live QUERY over the events tab that
 * drops rows flagged as personal data), and the Linking API URL that builds the report on it from
 * a template.
 */
import { EVENT_FIELDS, type EventField } from '../../schema/event-record';
import { MeterRefusal } from '../../schema/meter-reply';
import { configText, readConfig, type ConfigValues } from './config';
import { columnOf } from './events-sheet';
import type { MeterServices, Sheet } from './services';
import { columnLetter, fitGrid, insertTabs, type TabGrid } from './tabs';

const PUBLIC_TAB = 'events_public';
/** Rows kept beyond the events' when the tab shrinks: room for the events ingested until the next refresh. */
const SPARE_ROWS = 1000;

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
 * Keeps the public tab's formula in place and its grid as tall as the events tab: grown with it,
 * and cut back (to it and some spare rows) once retention has shrunk it. Creating it, or a grid
 * that would pass the spreadsheet's cell limit, is refused (`spreadsheet_full`) before anything changes.
 */
export function refreshPublicTab(svc: MeterServices, eventRows: number): Sheet {
  const [sheet] = insertTabs(svc.spreadsheet, [publicTabGrid(eventRows)]);
  fitGrid(svc.spreadsheet, sheet, eventRows + 1, PUBLIC_FIELDS.length, SPARE_ROWS);
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

/**
 * `setup()`: creates or repairs the meter's tabs, formats, validation and triggers. Every step
 * checks before it changes, so running it again changes nothing that is already right, and it
 * never deletes data (extra columns that hold values are left alone and reported).
 */
import { EVENT_FIELDS, type EventField } from '../../schema/event-record';
import { MeterRefusal } from '../../schema/meter-reply';
import { archiveFolder } from './archive-export';
import { CONFIG_DEFAULTS, CONFIG_TAB, OPTIONAL_CONFIG_DEFAULTS, SECRET_KEY, configKey } from './config';
import { DIGEST_TAB, refreshDigestTabs } from './digest-tab';
import { CALLS } from './calls-tab';
import {
  ACTIVITIES,
  CONTACTS,
  EVENTS_TAB,
  IDEMPOTENCY,
  LEADS,
  TASKS,
  columnLetter,
  ensureTab,
  insertTabs,
  movedColumns,
  refuseRenamed,
} from './tabs';
import { EVENT_COLUMNS, columnOf } from './events-sheet';
import type { MeterServices, Sheet } from './services';
import { SHEET_TIME_ZONE } from './sheet-time-zone';

/** Shows the stored instant as its RFC 3339 UTC text (the sheet's time zone is GMT). */
const TIMESTAMP_FORMAT = 'yyyy-mm-dd"T"hh:mm:ss.000"Z"';
const COUNT_FORMAT = '0';
/** USD with at least 4 and at most 6 decimals. */
const COST_FORMAT = '"$"#,##0.0000##';
const SCORE_FORMAT = '0.00##';

const NUMBER_FORMATS: Partial<Record<EventField, string>> = {
  timestamp: TIMESTAMP_FORMAT,
  input_tokens: COUNT_FORMAT,
  output_tokens: COUNT_FORMAT,
  latency_ms: COUNT_FORMAT,
  cost_usd: COST_FORMAT,
  eval_score: SCORE_FORMAT,
  confidence: SCORE_FORMAT,
};

const ACTOR_TYPES = ['user', 'agent', 'human-reviewer'];
/** The review decisions, then the spend-cap routing results, the scope fallback variant and idempotent replays, also logged in `decision`. */
const DECISIONS = [
  'approved',
  'rejected',
  'edited',
  'n/a',
  'default',
  'model',
  'queue',
  'human_review',
  'fallback_variant',
  'idempotent_replay',
];

/** Time-driven triggers: handler → schedule. Times are UTC (the manifest's time zone). */
const TRIGGER_SCHEDULE = [
  { handler: 'checkSpendCaps', every: 'minutes', n: 10 },
  { handler: 'refreshDigest', every: 'hours', n: 1 },
  { handler: 'exportArchive', every: 'days', n: 1, atHour: 1 },
  { handler: 'applyRetention', every: 'days', n: 1, atHour: 3 },
  { handler: 'sendWeeklyDigest', every: 'weeks', n: 1, atHour: 8 },
] as const;
const SCHEDULE_PROPERTY = 'METER_TRIGGER_SCHEDULE';

export interface SetupReport {
  changes: string[];
  notes: string[];
}

function ensureSheet(svc: MeterServices, name: string, report: SetupReport): Sheet {
  const existing = svc.spreadsheet.getSheetByName(name);
  if (existing) return existing;
  report.changes.push(`created tab ${name}`);
  // Google's grid; setup sizes it within that.
  return insertTabs(svc.spreadsheet, [{ name, rows: 1, columns: 1 }])[0];
}

function sameRow(actual: unknown[], expected: readonly string[]): boolean {
  return expected.every((v, i) => String(actual[i] ?? '') === v);
}

function setupEvents(svc: MeterServices, report: SetupReport): void {
  if (!svc.spreadsheet.getSheetByName(EVENTS_TAB)) refuseRenamed(svc.spreadsheet, EVENTS_TAB, EVENT_FIELDS);
  const sheet = ensureSheet(svc, EVENTS_TAB, report);
  const maxCols = sheet.getMaxColumns();
  if (maxCols < EVENT_COLUMNS) {
    sheet.insertColumnsAfter(maxCols, EVENT_COLUMNS - maxCols);
    report.changes.push(`events: added ${EVENT_COLUMNS - maxCols} column(s)`);
  } else if (maxCols > EVENT_COLUMNS) {
    // Unused columns cost cells towards the spreadsheet's 10 million limit; drop them if empty.
    const extra = sheet.getRange(1, EVENT_COLUMNS + 1, sheet.getMaxRows(), maxCols - EVENT_COLUMNS).getValues();
    if (extra.every((row) => row.every((v) => v === ''))) {
      sheet.deleteColumns(EVENT_COLUMNS + 1, maxCols - EVENT_COLUMNS);
      report.changes.push(`events: removed ${maxCols - EVENT_COLUMNS} empty column(s)`);
    } else {
      report.notes.push(`events: columns after ${columnLetter(EVENT_COLUMNS)} hold values; left as they are`);
    }
  }

  const header = sheet.getRange(1, 1, 1, EVENT_COLUMNS);
  const current = header.getValues()[0];
  const moved = movedColumns(EVENTS_TAB, current, EVENT_FIELDS);
  if (moved) {
    report.notes.push(moved);
  } else if (!sameRow(current, EVENT_FIELDS)) {
    header.setValues([EVENT_FIELDS.slice()]);
    header.setFontWeight('bold');
    report.changes.push('events: wrote the header row');
  }
  if (sheet.getFrozenRows() !== 1) {
    sheet.setFrozenRows(1);
    report.changes.push('events: froze the header row');
  }

  // Formats and validation apply to whole data columns; they are cheap to re-apply and that
  // repairs any a person changed by hand.
  const dataRows = sheet.getMaxRows() - 1;
  if (dataRows > 0) {
    for (const [field, format] of Object.entries(NUMBER_FORMATS)) {
      sheet.getRange(2, columnOf(field as EventField), dataRows, 1).setNumberFormat(format);
    }
    const list = (values: string[]) => svc.newDataValidation().requireValueInList(values, true).setAllowInvalid(true).build();
    sheet.getRange(2, columnOf('actor_type'), dataRows, 1).setDataValidation(list(ACTOR_TYPES));
    sheet.getRange(2, columnOf('decision'), dataRows, 1).setDataValidation(list(DECISIONS));
    const checkbox = svc.newDataValidation().requireCheckbox().setAllowInvalid(true).build();
    const booleans = columnOf('pii_flag');
    sheet.getRange(2, booleans, dataRows, columnOf('review_required') - booleans + 1).setDataValidation(checkbox);
  }

  if (!sheet.getFilter()) {
    // Whole columns, so rows appended later are inside the filter too.
    sheet.getRange(`A:${columnLetter(EVENT_COLUMNS)}`).createFilter();
    report.changes.push('events: added a filter');
  }
}

/** Writes the rows at these 0-based indices, one setValues per run of consecutive rows. */
function writeRuns(sheet: Sheet, cells: unknown[][], indices: Set<number>): void {
  const sorted = [...indices].sort((a, b) => a - b);
  for (let i = 0; i < sorted.length;) {
    let j = i;
    while (j + 1 < sorted.length && sorted[j + 1] === sorted[j] + 1) j++;
    sheet.getRange(sorted[i] + 1, 1, j - i + 1, 2).setValues(cells.slice(sorted[i], sorted[j] + 1));
    i = j + 1;
  }
}

function setupConfig(svc: MeterServices, report: SetupReport): void {
  const sheet = ensureSheet(svc, CONFIG_TAB, report);
  const lastRow = Math.max(sheet.getLastRow(), 1 + CONFIG_DEFAULTS.length);
  if (sheet.getMaxRows() < lastRow) sheet.insertRowsAfter(sheet.getMaxRows(), lastRow - sheet.getMaxRows());
  const cells = sheet.getRange(1, 1, lastRow, 2).getValues();
  // Only the rows set here are written back: values read back have lost their quote prefix (a
  // secret such as 000123 would become a number) and formulas their formula.
  const changed = new Set<number>();
  if (!sameRow(cells[0], ['key', 'value'])) {
    cells[0] = ['key', 'value'];
    changed.add(0);
  }
  const rowOf = (key: string) => cells.findIndex(([k], i) => i > 0 && configKey(k) === key);
  const add = (key: string, value: unknown, preferred?: number) => {
    // The keys every meter has go in rows 2-5 (CONFIG_DEFAULTS); use that row when it is free, else add one.
    const free = preferred !== undefined && String(cells[preferred][0]).trim() === '' && String(cells[preferred][1]) === '';
    const index = free ? preferred : cells.length;
    cells[index] = [key, value];
    changed.add(index);
    report.changes.push(`Config: added ${key}`);
  };
  CONFIG_DEFAULTS.forEach(([key, fallback], i) => {
    if (rowOf(key) < 0) add(key, fallback, i + 1);
  });
  for (const [key, fallback] of OPTIONAL_CONFIG_DEFAULTS) if (rowOf(key) < 0) add(key, fallback);
  const secretRow = rowOf(SECRET_KEY);
  const [, secret] = cells[secretRow];
  // A secret kept as a Script Property (which wins) is not made again in the sheet it was kept out of.
  if (String(secret).trim() === '' && !svc.properties.getProperty(SECRET_KEY)) {
    cells[secretRow] = [SECRET_KEY, `'${randomSecret(svc)}`];
    changed.add(secretRow);
    report.changes.push('Config: generated a random SECRET_TOKEN');
  }
  if (sheet.getMaxRows() < cells.length) sheet.insertRowsAfter(sheet.getMaxRows(), cells.length - sheet.getMaxRows());
  writeRuns(sheet, cells, changed);
  if (changed.has(0)) sheet.getRange(1, 1, 1, 2).setFontWeight('bold');
  if (sheet.getFrozenRows() !== 1) sheet.setFrozenRows(1);
}

/** 64 hex characters from two UUIDv4s (244 random bits). */
function randomSecret(svc: Pick<MeterServices, 'uuid'>): string {
  return (svc.uuid() + svc.uuid()).replace(/-/g, '');
}

function scheduleSignature(): string {
  return JSON.stringify(TRIGGER_SCHEDULE);
}

/**
 * Exactly one trigger per handler. Apps Script cannot say what schedule a trigger has, so a
 * script property remembers which schedule they were made with; a change re-creates them.
 */
function setupTriggers(svc: MeterServices, report: SetupReport): void {
  const current = svc.properties.getProperty(SCHEDULE_PROPERTY) === scheduleSignature();
  const existing = svc.triggers.getProjectTriggers();
  for (const item of TRIGGER_SCHEDULE) {
    const mine = existing.filter((t) => t.getHandlerFunction() === item.handler);
    if (mine.length === 1 && current) continue;
    for (const t of mine) svc.triggers.deleteTrigger(t);
    let builder = svc.triggers.newTrigger(item.handler).timeBased();
    if (item.every === 'minutes') builder = builder.everyMinutes(item.n);
    else if (item.every === 'hours') builder = builder.everyHours(item.n);
    else if (item.every === 'days') builder = builder.everyDays(item.n).atHour(item.atHour);
    else builder = builder.everyWeeks(item.n).onWeekDay(svc.monday).atHour(item.atHour);
    builder.inTimezone('Etc/UTC').create();
    report.changes.push(`trigger ${item.handler}: ${mine.length === 0 ? 'created' : 're-created'}`);
  }
  svc.properties.setProperty(SCHEDULE_PROPERTY, scheduleSignature());
}

/** Where the exports go; a folder in the trash is said, not fatal: the rest of setup still runs. */
function archiveNote(svc: MeterServices): string {
  try {
    const folder = archiveFolder(svc);
    return `archive exports go to the Drive folder "${folder.getName()}" (${folder.getId()})`;
  } catch (error) {
    if (error instanceof MeterRefusal && error.code === 'config_error') return error.message;
    throw error;
  }
}

/**
 * Runs one step of setup; a tab it cannot use as it is (columns moved by hand: config_error) or will
 * not make (renamed by hand: not_set_up) is said in the notes, prefixed with `what`, not fatal: the
 * other tabs and the triggers still get made.
 */
function orNote(report: SetupReport, step: () => void, what = ''): void {
  try {
    step();
  } catch (error) {
    if (!(error instanceof MeterRefusal && (error.code === 'config_error' || error.code === 'not_set_up'))) throw error;
    report.notes.push(what + error.message);
  }
}

const rethrow = (error: unknown) => () => {
  throw error;
};

/** The Digest refreshed by setup(): a calls tab it cannot read holds back only the voice block, and the note says so. */
function refreshForSetup(svc: MeterServices, report: SetupReport): void {
  orNote(
    report,
    () => {
      const done = refreshDigestTabs(svc);
      if (done instanceof MeterRefusal) orNote(report, rethrow(done), 'Digest refreshed but for its voice block: ');
    },
    'Digest not refreshed: ',
  );
}

export function setup(svc: MeterServices): SetupReport {
  const report: SetupReport = { changes: [], notes: [] };
  if (svc.spreadsheet.getSpreadsheetTimeZone() !== SHEET_TIME_ZONE) {
    svc.spreadsheet.setSpreadsheetTimeZone(SHEET_TIME_ZONE);
    report.changes.push(`spreadsheet time zone set to ${SHEET_TIME_ZONE}`);
  }
  orNote(report, () => setupEvents(svc, report));
  setupConfig(svc, report);
  for (const spec of [CONTACTS, LEADS, ACTIVITIES, TASKS, CALLS, IDEMPOTENCY]) {
    if (!svc.spreadsheet.getSheetByName(spec.name)) report.changes.push(`created tab ${spec.name}`);
    orNote(report, () => ensureTab(svc.spreadsheet, spec));
  }
  report.notes.push(archiveNote(svc));
  if (!svc.spreadsheet.getSheetByName(DIGEST_TAB)) report.changes.push('created the Digest and events_public tabs');
  refreshForSetup(svc, report);
  setupTriggers(svc, report);
  return report;
}

/**
 * The `Config` tab: `key | value` rows, found by key (an operator may add rows). Rows 2-5 hold the
 * keys every meter has. The secret may also live in a Script Property, which then wins, so it can be
 * kept out of the sheet altogether.
 */
import { parseDecimalText } from '../../schema/event-record';
import { MeterRefusal } from '../../schema/meter-reply';
import type { Properties, Sheet, Spreadsheet } from './services';

export const CONFIG_TAB = 'Config';

/** The keys every meter has, in the order of rows 2-5, with their defaults (docs/meter.md). */
export const CONFIG_DEFAULTS: ReadonlyArray<readonly [string, string | number]> = [
  ['DAILY_CAP_USD', 50],
  ['BURN_7D_CAP_USD', 200],
  ['SLACK_WEBHOOK_URL', ''],
  ['SECRET_TOKEN', ''],
];

export type ConfigValues = Map<string, unknown>;

/**
 * The Config tab, or not_set_up. Its absence is never read as "nothing configured": a tab renamed
 * by hand would otherwise leave the web app open (no secret) and the caps at their defaults.
 */
function requireConfigSheet(ss: Spreadsheet): Sheet {
  const sheet = ss.getSheetByName(CONFIG_TAB);
  if (!sheet)
    throw new MeterRefusal(
      'not_set_up',
      `the "${CONFIG_TAB}" tab is missing: rename it back to "${CONFIG_TAB}" if it was renamed, or run setup() from the Meter menu to make a new one`,
    );
  return sheet;
}

/**
 * A key cell as the meter looks it up: trimmed and in capitals, since a key retyped by hand in
 * another case (`daily_cap_usd`) was not found, and the default cap applied unsaid.
 */
export function configKey(cell: unknown): string {
  return String(cell).trim().toUpperCase();
}

/**
 * A key found on two rows with different values (an operator added a row for a key already
 * there): neither is taken, since the first winning unsaid kept a cap the operator had changed.
 */
class ConflictingRows {
  constructor(readonly message: string) {}
}

/** Every `key → value` of the Config tab, in one read. Keys as configKey makes them; a key on rows with different values is a conflict. */
export function readConfig(ss: Spreadsheet): ConfigValues {
  const values: ConfigValues = new Map();
  const sheet = requireConfigSheet(ss);
  const lastRow = sheet.getLastRow();
  if (lastRow < 2) return values;
  const firstRow = new Map<string, number>();
  sheet
    .getRange(2, 1, lastRow - 1, 2)
    .getValues()
    .forEach(([key, value], i) => {
      const name = configKey(key);
      if (name === '') return;
      const earlier = values.get(name);
      if (!values.has(name)) {
        values.set(name, value);
        firstRow.set(name, i + 2);
      } else if (!(earlier instanceof ConflictingRows) && String(earlier).trim() !== String(value).trim()) {
        const rows = `rows ${firstRow.get(name)} and ${i + 2}`;
        // The values are not quoted: the key may be a secret (SECRET_TOKEN, SLACK_WEBHOOK_URL).
        values.set(name, new ConflictingRows(`Config ${name} is on ${rows} with different values: keep one row`));
      }
    });
  return values;
}

/** The value of a key; a key on two rows with different values is an error that names them. */
function configValue(config: ConfigValues, key: string): unknown {
  const value = config.get(key);
  if (value instanceof ConflictingRows) throw new MeterRefusal('config_error', value.message);
  return value;
}

/** A Config value as text ('' when absent). */
export function configText(config: ConfigValues, key: string): string {
  const value = configValue(config, key);
  return value === undefined || value === null ? '' : String(value).trim();
}

/** Keys whose value must be a whole number (a fractional RETENTION_DAYS would cut mid-day). */
const WHOLE_NUMBER_KEYS = new Set(['RETENTION_DAYS', 'BOOKING_MINUTES']);
/**
 * The largest value of a key that counts time (beyond it a date overflows: 1e9 days made retention
 * throw): a century of retention, a day-long booking.
 */
const MAX_OF: Record<string, number> = { RETENTION_DAYS: 36_500, BOOKING_MINUTES: 1_440 };

/**
 * A Config value as a number; an empty cell (or one holding only spaces) takes the default. A
 * cell that does not hold a decimal number is an error that names the key, rather than a guess
 * (a cap of "50$" must not become 0, nor "0x32" 50).
 */
export function configNumber(config: ConfigValues, key: string, fallback: number, min = 0): number {
  const value = configValue(config, key);
  if (value === undefined || value === null || (typeof value === 'string' && value.trim() === '')) return fallback;
  const n = typeof value === 'number' ? value : typeof value === 'string' ? parseDecimalText(value) : NaN;
  const whole = WHOLE_NUMBER_KEYS.has(key);
  const max = MAX_OF[key];
  if (!Number.isFinite(n) || n < min || n > (max ?? Infinity) || (whole && !Number.isInteger(n))) {
    const expected = `${whole ? 'a whole number' : 'a number'} ${max === undefined ? `>= ${min}` : `from ${min} to ${max}`}`;
    throw new MeterRefusal('config_error', `Config ${key} must be ${expected}, found "${String(value)}"`);
  }
  return n;
}

export const SECRET_KEY = 'SECRET_TOKEN';

/**
 * The ingest secret: the Script Property when set, else the Config value. '' means none.
 * The Config tab is read only when no property is set (a read costs four service calls).
 */
export function resolveSecret(spreadsheet: Spreadsheet, properties: Properties): string {
  const fromProperty = properties.getProperty(SECRET_KEY);
  if (fromProperty) return fromProperty;
  return configText(readConfig(spreadsheet), SECRET_KEY);
}

export interface Caps {
  dailyCapUsd: number;
  burn7dCapUsd: number;
}

export function readCaps(config: ConfigValues): Caps {
  return {
    dailyCapUsd: configNumber(config, 'DAILY_CAP_USD', 50),
    burn7dCapUsd: configNumber(config, 'BURN_7D_CAP_USD', 200),
  };
}

/** Keys setup() adds after the rows of CONFIG_DEFAULTS, with their defaults ('' = operator fills in). */
export const OPTIONAL_CONFIG_DEFAULTS: ReadonlyArray<readonly [string, string | number]> = [
  ['RETENTION_DAYS', 30],
  ['TEAM_EMAILS', ''],
  ['ARCHIVE_FOLDER_ID', ''],
  ['LOOKER_TEMPLATE_REPORT_ID', ''],
  // The voice concierge's back office.
  ['CALENDAR_ID', ''],
  ['TIMEZONE', 'Etc/UTC'],
  ['BOOKING_MINUTES', 60],
  ['VOICEMAIL_FOLDER_ID', ''],
];

/** Sets one Config value by key (appending the key when absent): two reads and one write. */
export function writeConfigValue(ss: Spreadsheet, key: string, value: string | number): void {
  const sheet = requireConfigSheet(ss);
  const lastRow = sheet.getLastRow();
  const keys = lastRow >= 2 ? sheet.getRange(2, 1, lastRow - 1, 1).getValues() : [];
  const index = keys.findIndex(([k]) => configKey(k) === key);
  const row = index >= 0 ? index + 2 : lastRow + 1;
  if (row > sheet.getMaxRows()) sheet.insertRowsAfter(sheet.getMaxRows(), 1);
  // Text values get the quote prefix so an id that looks like a number stays as written.
  sheet.getRange(row, 1, 1, 2).setValues([[key, typeof value === 'string' && value !== '' ? `'${value}` : value]]);
}

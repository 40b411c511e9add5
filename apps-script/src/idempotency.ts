/**
 * The back office's record of idempotency keys (the `idempotency` tab): a key is recorded first,
 * before any side effect; each step's outcome is saved in `progress` as it finishes; `result`
 * is written when the action is done, by the first attempt to finish (a later one answers it). A
 * retry of the key answers the result, or, when the first attempt stopped half-way, picks up from
 * the progress. Every function here runs under the script lock (callers take it).
 *
 * A cell edited by hand (or cut short) into something else is never guessed at: an unreadable
 * `result` is taken as not finished, and the action picks up from its progress; an unreadable
 * `progress` is refused (`record_unreadable`, naming the row, key and column), since starting
 * over could send a text twice.
 */
import { MeterRefusal } from '../../schema/meter-reply';
import type { MeterServices, Sheet } from './services';
import { IDEMPOTENCY, appendTabRows, cellText, columnIn, findRow, recordRow, rowRecord, tab } from './tabs';

/** What the steps of an action have done so far (ids they made, the text message's state). */
export type Progress = Record<string, string | undefined>;

type Claim = { done: Record<string, unknown>; progress?: undefined } | { done: null; progress: Progress };

function keyRow(svc: Pick<MeterServices, 'spreadsheet'>, key: string): { sheet: Sheet; row: number } {
  const sheet = tab(svc.spreadsheet, IDEMPOTENCY);
  return { sheet, row: findRow(sheet, columnIn(IDEMPOTENCY, 'key'), key) };
}

/** Whether an attempt with this key was recorded (finished, or stopped half-way). */
export function keyRecorded(svc: Pick<MeterServices, 'spreadsheet'>, key: string): boolean {
  return keyRow(svc, key).row > 0;
}

type Column = 'progress' | 'result';

/** A cell's JSON object; null when the cell is empty; why it is unusable otherwise. */
function parse(value: unknown): Record<string, unknown> | null | { unreadable: string } {
  if (value === '' || value === null || value === undefined) return null;
  if (typeof value !== 'string') return { unreadable: `found a ${typeof value}, not text` };
  let parsed: unknown;
  try {
    parsed = JSON.parse(value);
  } catch (error) {
    return { unreadable: `not valid JSON (${(error as Error).message})` };
  }
  return parsed && typeof parsed === 'object' && !Array.isArray(parsed)
    ? (parsed as Record<string, unknown>)
    : { unreadable: 'valid JSON but not an object' };
}

const isUnreadable = (cell: ReturnType<typeof parse>): cell is { unreadable: string } => cell !== null && 'unreadable' in cell;

/** The refusal for a cell that cannot be read; `known` is what the refused attempt had done, for the operator. */
function unreadable(row: number, key: string, column: Column, why: string, known?: Progress): MeterRefusal {
  const had = known ? ` This attempt had done: ${JSON.stringify(known)}.` : '';
  return new MeterRefusal(
    'record_unreadable',
    `${IDEMPOTENCY.name} tab, row ${row} (key ${key}), column ${column}: expected a JSON object, ${why}. ` +
      `Nothing more was done for this request.${had} Fix the cell (see docs/meter.md, "Back-office actions that fail half-way").`,
  );
}

/** The saved progress (empty for a row of an older version), or a refusal naming the cell. */
function progressOf(value: unknown, row: number, key: string, known?: Progress): Progress {
  const cell = parse(value);
  if (isUnreadable(cell)) throw unreadable(row, key, 'progress', cell.unreadable, known);
  const steps = cell ?? {};
  const odd = Object.keys(steps).find((step) => typeof steps[step] !== 'string');
  if (odd !== undefined) throw unreadable(row, key, 'progress', `step "${odd}" is not text`, known);
  return steps as Progress;
}

/** The key's state; a key seen for the first time is recorded before anything else happens. */
export function claimKey(svc: Pick<MeterServices, 'spreadsheet'>, key: string, action: string, now: Date): Claim {
  const { sheet, row } = keyRow(svc, key);
  if (!row) {
    appendTabRows(svc.spreadsheet, sheet, [recordRow(IDEMPOTENCY, { key, action, at: now.toISOString(), progress: '{}' })]);
    return { done: null, progress: {} };
  }
  const record = rowRecord(IDEMPOTENCY, sheet.getRange(row, 1, 1, IDEMPOTENCY.header.length).getValues()[0]);
  if (record.action !== action)
    throw new MeterRefusal('invalid_argument', `idempotency_key: already used for ${String(record.action)}, not ${action}`);
  const done = parse(record.result);
  if (done && !isUnreadable(done)) return { done };
  const progress = progressOf(record.progress, row, key);
  // An unreadable result with no progress to pick up from (a row of an older version): nothing is known.
  if (done && record.progress === '') throw unreadable(row, key, 'result', done.unreadable);
  return { done: null, progress };
}

/** The key's `progress` or `result` cell. */
function cellOf(svc: Pick<MeterServices, 'spreadsheet'>, key: string, column: Column) {
  const { sheet, row } = keyRow(svc, key);
  if (!row) throw new Error(`idempotency: the record of key ${key} disappeared`);
  return sheet.getRange(row, columnIn(IDEMPOTENCY, column), 1, 1);
}

export function saveProgress(svc: Pick<MeterServices, 'spreadsheet'>, key: string, progress: Progress): void {
  cellOf(svc, key, 'progress').setValues([[cellText(JSON.stringify(progress))]]);
}

/**
 * Fills in the steps another attempt with this key saved since this one read its progress (the
 * gateway retried while this attempt was still running): what this attempt knows stays.
 */
export function mergeSavedProgress(svc: Pick<MeterServices, 'spreadsheet'>, key: string, progress: Progress): void {
  const { sheet, row } = keyRow(svc, key);
  if (!row) return;
  const saved = progressOf(sheet.getRange(row, columnIn(IDEMPOTENCY, 'progress'), 1, 1).getValues()[0][0], row, key, progress);
  for (const [step, value] of Object.entries(saved)) if (progress[step] === undefined) progress[step] = value;
}

/**
 * Records the action's result, unless another attempt with the key (the gateway retried while this
 * one was slow) finished first: then that result stays, since its caller may already hold it and
 * every later answer for the key must be the same. Answers the result kept. An unreadable result
 * (edited by hand) is replaced: this attempt has just redone what it recorded, from the progress.
 */
export function finishKey(svc: Pick<MeterServices, 'spreadsheet'>, key: string, result: Record<string, unknown>): Record<string, unknown> {
  const cell = cellOf(svc, key, 'result');
  const kept = parse(cell.getValues()[0][0]);
  if (kept && !isUnreadable(kept)) return kept;
  cell.setValues([[cellText(JSON.stringify(result))]]);
  return result;
}

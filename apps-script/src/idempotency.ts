/**
 * The back office's record of idempotency keys (the `idempotency` tab): a key is recorded first,
 * before any side effect; each step's outcome is saved in `progress` as it finishes; `result`
 * is written when the action is done, by the first attempt to finish (a later one answers it). A
 * retry of the key answers the result, or, when the first attempt stopped half-way, picks up from
 * the progress. Every function here runs under the script lock (callers take it).
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

function parse(text: unknown): Record<string, unknown> | null {
  return typeof text === 'string' && text !== '' ? (JSON.parse(text) as Record<string, unknown>) : null;
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
  return done ? { done } : { done: null, progress: (parse(record.progress) ?? {}) as Progress };
}

/** The key's `progress` or `result` cell. */
function cellOf(svc: Pick<MeterServices, 'spreadsheet'>, key: string, column: 'progress' | 'result') {
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
  const saved = (parse(sheet.getRange(row, columnIn(IDEMPOTENCY, 'progress'), 1, 1).getValues()[0][0]) ?? {}) as Progress;
  for (const [step, value] of Object.entries(saved)) if (progress[step] === undefined) progress[step] = value;
}

/**
 * Records the action's result, unless another attempt with the key (the gateway retried while this
 * one was slow) finished first: then that result stays, since its caller may already hold it and
 * every later answer for the key must be the same. Answers the result kept.
 */
export function finishKey(svc: Pick<MeterServices, 'spreadsheet'>, key: string, result: Record<string, unknown>): Record<string, unknown> {
  const cell = cellOf(svc, key, 'result');
  const kept = parse(cell.getValues()[0][0]);
  if (kept) return kept;
  cell.setValues([[cellText(JSON.stringify(result))]]);
  return result;
}

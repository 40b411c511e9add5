/**
 * The back office's rows: one request's context, the contact (one row per phone, updated in
 * place, so doing it twice is harmless) and the activity log (one row per action, carrying its
 * idempotency key so a retry finds it). Run under the script lock.
 */
import { cutText } from '../../schema/cut-text';
import type { ConfigValues } from './config';
import { finishKey, mergeSavedProgress, saveProgress, type Progress } from './idempotency';
import { LOCK_WAIT_MS, withScriptLock } from './lock';
import type { MeterServices } from './services';
import { ACTIVITIES, CONTACTS, appendTabRows, cellText, columnIn, findKeyed, findRow, recordRow, rowRecord, tab } from './tabs';

export type Args = Record<string, unknown>;

export interface Ctx {
  svc: MeterServices;
  config: ConfigValues;
  args: Args;
  callId: string;
  /** The idempotency key: every side effect is findable by it. */
  key: string;
  now: Date;
  /** The time zone the caller's dates and times were agreed in (the concierge's meta.timezone), when the sender says it. */
  timeZone?: string;
}

const EXCERPT = 280;

/** An argument as trimmed text ('' when absent). */
export function arg(args: Args, name: string): string {
  return args[name] === undefined || args[name] === null ? '' : String(args[name]).trim();
}

/** The caller declined the consent line (the phone bridge's opt-out: `opted_out: true`, `consent: "opted_out"`). */
export function declinedConsent(args: Args): boolean {
  return args.opted_out === true || args.consent === 'opted_out';
}

export function excerpt(transcript: string): string {
  const flat = transcript.replace(/\s+/g, ' ').trim();
  if (flat.length <= EXCERPT) return flat;
  // Never the first half of a UTF-16 pair (an emoji) alone before the ellipsis: no character a cell shows.
  return `${cutText(flat, EXCERPT - 1)}…`;
}

/**
 * What a step's refusal as busy says: by then the action may have booked, saved or texted, and its
 * caller (a person reading a dead letter) must not take it for undone and do it again by hand.
 */
const PART_WAY =
  'the action stopped part-way: what it had done (the calendar event, the recording, the text) stays done and is found again; ' +
  'retry with the same idempotency_key to finish it (nothing is done twice)';

/** The script lock for a step of an action under way. */
const underLock = <T>(c: Ctx, work: () => T): T => withScriptLock(c.svc, work, LOCK_WAIT_MS, PART_WAY);

/**
 * Runs sheet work under the script lock, then saves the action's progress (the last write). The
 * steps a concurrent attempt with the key saved are taken in first, so that this one neither
 * repeats them (a second text) nor erases them when it saves.
 */
export function locked<T>(c: Ctx, progress: Progress, work: () => T): T {
  return underLock(c, () => {
    mergeSavedProgress(c.svc, c.key, progress);
    const out = work();
    saveProgress(c.svc, c.key, progress);
    return out;
  });
}

/**
 * Under the lock: the progress first (the text's outcome is then known to a retry), the activity
 * (once per key), and the action's result; the action is then done. Answers the result kept for
 * the key: another attempt's, when it finished first.
 */
export function finish(
  c: Ctx,
  progress: Progress,
  activity: Record<string, unknown> | null,
  result: Record<string, unknown>,
): Record<string, unknown> {
  return underLock(c, () => {
    mergeSavedProgress(c.svc, c.key, progress);
    saveProgress(c.svc, c.key, progress);
    if (activity) {
      const sheet = tab(c.svc.spreadsheet, ACTIVITIES);
      if (!findKeyed(sheet, ACTIVITIES, c.key))
        appendTabRows(c.svc.spreadsheet, sheet, [
          recordRow(ACTIVITIES, {
            at: c.now.toISOString(),
            phone: arg(c.args, 'phone'),
            call_id: c.callId,
            ...activity,
            idempotency_key: c.key,
          }),
        ]);
    }
    return finishKey(c.svc, c.key, result);
  });
}

/**
 * Adds or updates the contact with this phone (call under the lock). A phone with no digit in it
 * (the phone bridge's `unknown` for a withheld number, a model's "withheld") names nobody: such
 * callers are not one person, so no contact is made for them (their task, lead or booking keeps
 * the call's details and its call_id), rather than one row each caller overwrites.
 */
export function upsertContact(c: Ctx, fields: { name?: string; email?: string; intent: string; transcript?: string }): void {
  const phone = arg(c.args, 'phone');
  if (!/[0-9]/.test(phone)) return;
  const sheet = tab(c.svc.spreadsheet, CONTACTS);
  const optedOut = declinedConsent(c.args);
  const row = findRow(sheet, columnIn(CONTACTS, 'phone'), phone);
  const at = c.now.toISOString();
  const fresh = {
    phone,
    call_id: c.callId,
    intent: fields.intent,
    transcript_excerpt: fields.transcript ? excerpt(fields.transcript) : '',
    updated_at: at,
  };
  if (!row) {
    appendTabRows(c.svc.spreadsheet, sheet, [
      recordRow(CONTACTS, { ...fresh, name: fields.name ?? '', email: fields.email ?? '', opted_out: optedOut, created_at: at }),
    ]);
    return;
  }
  const range = sheet.getRange(row, 1, 1, CONTACTS.header.length);
  const cur = rowRecord(CONTACTS, range.getValues()[0]);
  const next = {
    ...fresh,
    name: fields.name || cur.name,
    email: fields.email || cur.email,
    transcript_excerpt: fresh.transcript_excerpt || cur.transcript_excerpt,
    opted_out: optedOut || cur.opted_out === true,
    created_at: cur.created_at || at,
  };
  range.setValues([recordRow(CONTACTS, next).map(cellText)]);
}

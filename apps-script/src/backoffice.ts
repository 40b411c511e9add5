/**
 * The voice concierge's back office, reached with `doPost?action=<function>` and a body
 * `{call_id, args, idempotency_key, timezone?}` (Apps Script cannot read request headers, so the key
 * travels in the body; `timezone`, the concierge's, is the zone the caller's times were agreed in). Each action is authenticated like ingest and idempotent: the key is recorded
 * before any side effect, a replay of a finished key answers the first result and changes
 * nothing, and a retry of a key that stopped half-way (Google's services time out mid-script)
 * finishes what is missing. See backoffice-actions.ts for the actions, sms.ts for the text.
 *
 *   book_slot          calendar event (title from service and name, start/end from date, time and
 *                      BOOKING_MINUTES in TIMEZONE, location, notes); contact upserted by phone;
 *                      activity 'Booking Confirmed'; confirmation text. Answers the booking id.
 *   reschedule_slot    the event found by booking_id moved; activity 'Booking Rescheduled'; text (to
 *                      args.phone, else the phone the booking was made with).
 *   create_lead        contact upserted; lead at stage 'New' with a summary (an excerpt only);
 *                      'Opted out' for a caller who declined the consent line.
 *   route_to_voicemail recording saved as voicemail/<call_id>.mp3 in the voicemail folder; task
 *                      'Callback: Voicemail' due in 24 hours.
 *
 * Every argument is checked before anything is written; a missing one, an object or a list (an
 * argument is text; a number or true/false is taken as text), one over 10,000 characters, or a
 * date or time that does not parse, is refused naming the argument; a slot that
 * has already begun, or that overlaps another event in the calendar, is refused before the event
 * is made or moved (backoffice-actions.ts).
 */
import { REQUIRED_ARGS } from '../../schema/backoffice-args';
import { ID_PATTERN, ID_RULE } from '../../schema/ids';
import { MeterRefusal } from '../../schema/meter-reply';
import { ACTIONS, type ActionName } from './backoffice-actions';
import { arg, type Args, type Ctx } from './backoffice-rows';
import { readConfig } from './config';
import { claimKey } from './idempotency';
import { withScriptLock } from './lock';
import type { MeterServices } from './services';
import type { JsonReply } from './web';

/** The gateway's keys are hex digests; anything of this shape is accepted. */
const IDEMPOTENCY_KEY = /^[A-Za-z0-9_-]{8,128}$/;
/**
 * The longest argument taken. An argument lands in a cell (an activity's detail, a contact's name)
 * and a cell holds 50,000 characters: a longer one would fail its write on every retry, after the
 * calendar was changed. Refused first instead, so the model can say it again shorter.
 */
const ARG_CHARACTERS = 10_000;

function checkArgs(action: ActionName, args: Args): void {
  for (const name of REQUIRED_ARGS[action])
    if (arg(args, name) === '') throw new MeterRefusal('invalid_argument', `args.${name}: required for ${action}`);
  for (const name of Object.keys(args)) {
    // Written into cells and texts as text: an object would read "[object Object]", a list its items run together.
    const value = args[name];
    if (value !== null && typeof value === 'object')
      throw new MeterRefusal('invalid_argument', `args.${name}: expected text, got ${Array.isArray(value) ? 'a list' : 'an object'}`);
    const length = arg(args, name).length;
    if (length > ARG_CHARACTERS)
      throw new MeterRefusal('invalid_argument', `args.${name}: at most ${ARG_CHARACTERS} characters, got ${length}`);
  }
}

function request(action: ActionName, body: unknown): { callId: string; key: string; args: Args; timeZone?: string } {
  if (!body || typeof body !== 'object' || Array.isArray(body))
    throw new MeterRefusal('invalid_body', 'body: expected {call_id, args, idempotency_key}');
  const b = body as { call_id?: unknown; args?: unknown; idempotency_key?: unknown; timezone?: unknown };
  if (typeof b.call_id !== 'string' || !ID_PATTERN.test(b.call_id)) throw new MeterRefusal('invalid_body', `call_id: expected ${ID_RULE}`);
  if (typeof b.idempotency_key !== 'string' || !IDEMPOTENCY_KEY.test(b.idempotency_key))
    throw new MeterRefusal('invalid_body', 'idempotency_key: expected 8 to 128 characters of A-Z a-z 0-9 _ -');
  if (!b.args || typeof b.args !== 'object' || Array.isArray(b.args)) throw new MeterRefusal('invalid_body', 'args: expected an object');
  if (b.timezone !== undefined && (typeof b.timezone !== 'string' || b.timezone === ''))
    throw new MeterRefusal('invalid_body', 'timezone: expected an IANA time zone such as Europe/Lisbon, or none');
  const args = b.args as Args;
  checkArgs(action, args);
  return { callId: b.call_id, key: b.idempotency_key, args, ...(b.timezone !== undefined ? { timeZone: b.timezone } : {}) };
}

export function backOfficeAction(svc: MeterServices, action: ActionName, body: unknown): JsonReply {
  const { callId, key, args, timeZone } = request(action, body);
  const c: Ctx = { svc, config: readConfig(svc.spreadsheet), args, callId, key, now: svc.now(), ...(timeZone ? { timeZone } : {}) };
  const steps = ACTIONS[action](c); // checks the arguments: nothing is written before this passes
  const claim = withScriptLock(svc, () => claimKey(svc, key, action, c.now));
  if (claim.done) return { ...claim.done, ok: true, replayed: true };
  return { ok: true, action, ...steps(claim.progress), replayed: false };
}

/**
 * The four back-office actions. Each checks its arguments first (`plan`, nothing written) and
 * returns the steps to run once the idempotency key is recorded. Every side effect is findable
 * by the key, so a retry after a half-way failure finishes what is missing instead of doing it
 * again: the calendar event carries the key as a tag (and in its description), the recording is
 * `<call_id>.mp3`, rows carry the key. Calendar, Drive and UrlFetch run outside the script lock;
 * only sheet work takes it (and the slot claim a booking holds while it checks and makes its event).
 */
import type { BackOfficeAction } from '../../schema/backoffice-args';
import { MeterRefusal } from '../../schema/meter-reply';
import { configNumber, configText } from './config';
import { keyRecorded, type Progress } from './idempotency';
import { arg, declinedConsent, finish, locked, upsertContact, excerpt, type Ctx } from './backoffice-rows';
import { folderFromConfig } from './folders';
import type { Calendar, CalendarEvent, Folder } from './services';
import { claimText, sendText, sentText, unclaimText } from './sms';
import { ACTIVITIES, LEADS, TASKS, appendTabRows, columnIn, findKeyed, findRow, recordRow, rowRecord, tab } from './tabs';
import { checkedTimeZone, localStamp, localText, zonedInstant } from './zoned-time';

export type ActionName = BackOfficeAction;
type Steps = (progress: Progress) => Record<string, unknown>;

const EVENT_TAG = 'meter_idempotency_key';
/** The script property holding the slots of bookings under way: [{key, start, end, at}] (ms). */
const SLOT_CLAIMS = 'BOOKING_SLOT_CLAIMS';
/** Apps Script stops a run after 6 minutes: a claim older than that is of an attempt no longer running. */
const CLAIM_MS = 6 * 60_000;
const VOICEMAIL_FOLDER_NAME = 'voicemail';
const DAY_MS = 86_400_000;

function calendar(c: Ctx): Calendar {
  const id = configText(c.config, 'CALENDAR_ID');
  const cal = c.svc.calendar(id);
  if (!cal) throw new MeterRefusal('config_error', `Config CALENDAR_ID: no calendar "${id}" is visible to the deploying account`);
  return cal;
}

/** A time zone's canonical name (`Portugal` is `Europe/Lisbon`), as Intl resolves it. */
const canonicalZone = (tz: string) => new Intl.DateTimeFormat('en', { timeZone: tz }).resolvedOptions().timeZone;

/**
 * Config TIMEZONE, refused when the caller's times were agreed in another zone (the concierge's
 * meta.timezone, sent as `timezone`): the caller's 10:00 would be booked, and texted, at another
 * hour. A config_error, retried and dead-lettered, so the booking waits for the fix, not lost.
 */
function bookingZone(c: Ctx): string {
  const tz = checkedTimeZone(configText(c.config, 'TIMEZONE') || 'Etc/UTC');
  if (c.timeZone === undefined) return tz;
  let agreed: string;
  try {
    agreed = canonicalZone(c.timeZone);
  } catch {
    throw new MeterRefusal('invalid_body', `timezone: "${c.timeZone}" is not an IANA time zone`);
  }
  // A key recorded already (by a version that did not check, or before Config TIMEZONE changed)
  // is answered, or finished, as its first attempt began it: a replay answers the first result.
  if (agreed !== canonicalZone(tz) && !keyRecorded(c.svc, c.key))
    throw new MeterRefusal(
      'config_error',
      `Config TIMEZONE is ${tz}, but the voice concierge agrees times with callers in ${c.timeZone} (its meta.timezone): set Config TIMEZONE to ${c.timeZone}, or the caller's times would be booked hours off`,
    );
  return tz;
}

/** Start and end of the slot the arguments name, in Config TIMEZONE; refuses what does not parse. */
function slot(c: Ctx, dateArg: string, timeArg: string) {
  const tz = bookingZone(c);
  const start = zonedInstant(arg(c.args, dateArg), arg(c.args, timeArg), tz, [dateArg, timeArg]);
  const end = new Date(start.getTime() + configNumber(c.config, 'BOOKING_MINUTES', 60, 1) * 60_000);
  return { tz, start, end, notPast: () => notPast(c, start, tz, [dateArg, timeArg]) };
}

/**
 * Refuses a slot that has already begun, before it is booked or a booking moved to it: a realtime
 * model often takes the year wrong, and the text's date (no year) would read as a slot to come.
 * The refusal names the argument and the date and time there now, so the model can ask again.
 * Checked when the event is made or moved, not on a replay of a key that already did so.
 */
function notPast(c: Ctx, start: Date, tz: string, [dateArg, timeArg]: [string, string]): void {
  if (start.getTime() >= c.now.getTime()) return;
  const now = localStamp(c.now, tz);
  const asked = `${arg(c.args, dateArg)} ${arg(c.args, timeArg)}`;
  const name = arg(c.args, dateArg) < now.slice(0, 10) ? dateArg : timeArg;
  throw new MeterRefusal(
    'invalid_argument',
    `args.${name}: ${asked} has passed in ${tz} (it is now ${now} there): ask for a date and time from now on`,
  );
}

/**
 * The text message of an action, at most once: claimed under the lock, sent outside it. A claim
 * whose hold of the lock failed (its flush, after the claim was written) is given back: the text was
 * not sent, and a claim left `sending` would have the retry record it as maybe sent and never send it.
 */
function textOnce(c: Ctx, progress: Progress, to: string, body: string, alsoLocked: () => void = () => {}): string {
  const attempt = c.svc.uuid();
  let claimed = false;
  let creds: ReturnType<typeof claimText>;
  try {
    creds = locked(c, progress, () => {
      alsoLocked();
      const claim = to === '' ? null : claimText(c.svc, progress, attempt);
      claimed = claim !== null;
      return claim;
    });
  } catch (error) {
    if (claimed) giveBackText(c, progress, attempt);
    throw error;
  }
  if (to === '' && !progress.text) progress.text = 'unsent: no phone in the arguments';
  if (creds) sentText(progress, sendText(c.svc, creds, to, body)); // saved first thing by finish()
  return progress.text as string;
}

/** Gives back this attempt's claim of the text, unless another attempt has seen it since; what Sheets refuses stays claimed. */
function giveBackText(c: Ctx, progress: Progress, attempt: string): void {
  progress.text = undefined; // read again from the record
  progress.text_claim = undefined;
  try {
    locked(c, progress, () => unclaimText(progress, attempt));
  } catch {
    // Sheets still failing: the action's own error is the one to report.
  }
}

const bookingRef = (key: string) => `Booking ref: ${key}`;

/** An event this key booked: tagged with it, or carrying its own `Booking ref:` line. */
const keyedEvent = (key: string) => (e: CalendarEvent) =>
  e.getTag(EVENT_TAG) === key || e.getDescription().split('\n').includes(bookingRef(key));

type SlotClaim = { key: string; start: number; end: number; at: number };

/** The claims still running (under the lock); an unreadable property counts as none. */
function liveClaims(c: Ctx): SlotClaim[] {
  let claims: unknown;
  try {
    claims = JSON.parse(c.svc.properties.getProperty(SLOT_CLAIMS) ?? '[]');
  } catch {
    return [];
  }
  const now = c.svc.now().getTime();
  return Array.isArray(claims) ? (claims as SlotClaim[]).filter((cl) => cl && typeof cl.at === 'number' && now - cl.at < CLAIM_MS) : [];
}

function saveClaims(c: Ctx, claims: SlotClaim[]): void {
  if (claims.length) c.svc.properties.setProperty(SLOT_CLAIMS, JSON.stringify(claims));
  else c.svc.properties.deleteProperty(SLOT_CLAIMS);
}

/** The refusal of a slot taken: permanent, so the gateway hands it to the model at once, which offers another time. */
function taken(c: Ctx, [dateArg, timeArg]: [string, string], tz: string, why: string): MeterRefusal {
  return new MeterRefusal(
    'invalid_argument',
    `args.${timeArg}: ${arg(c.args, dateArg)} ${arg(c.args, timeArg)} is taken in ${tz} (${why}): offer the caller another time and book that`,
  );
}

/** An event's time as the model is told it: HH:MM on the asked date, else with its date. */
const around = (d: GoogleAppsScript.Base.Date, tz: string, date: string) => {
  const stamp = localStamp(new Date(d.getTime()), tz);
  return stamp.startsWith(`${date} `) ? stamp.slice(11) : stamp;
};

/**
 * Holds the slot for this key while its event is made or moved, or refuses it as taken: by a
 * booking under way (its claim) or by an event in the calendar other than `own`. The claim is
 * taken under the script lock first, then the calendar read outside it: of two bookings of one
 * slot at the same moment, the second to claim is refused, and one that claims after the first
 * let go finds its event. Let go by `releaseSlot` once the event is in the calendar; left by an
 * attempt that stopped half-way, it lapses after 6 minutes or is taken over by its retry.
 */
function claimSlot(
  c: Ctx,
  progress: Progress,
  cal: Calendar,
  slot: { start: Date; end: Date; tz: string },
  args: [string, string],
  own: (e: CalendarEvent) => boolean,
): void {
  const [start, end] = [slot.start.getTime(), slot.end.getTime()];
  locked(c, progress, () => {
    const claims = liveClaims(c).filter((cl) => cl.key !== c.key);
    if (claims.some((cl) => cl.start < end && cl.end > start)) throw taken(c, args, slot.tz, 'another caller is booking it');
    saveClaims(c, [...claims, { key: c.key, start, end, at: c.svc.now().getTime() }]);
  });
  const other = cal.getEvents(slot.start, slot.end).find((e) => !own(e));
  if (!other) return;
  locked(c, progress, () => releaseSlot(c));
  const date = arg(c.args, args[0]);
  throw taken(
    c,
    args,
    slot.tz,
    `another event from ${around(other.getStartTime(), slot.tz, date)} to ${around(other.getEndTime(), slot.tz, date)}`,
  );
}

/** Lets go of this key's slot claim (under the lock). */
function releaseSlot(c: Ctx): void {
  const claims = liveClaims(c);
  const rest = claims.filter((cl) => cl.key !== c.key);
  if (rest.length !== claims.length) saveClaims(c, rest);
}

/**
 * Caller text for an event's description, which Google Calendar shows as HTML: `<` and `>` become
 * ‹ and › so no tag (a link, an image) or comment can start. `&` and apostrophes stay as typed: an
 * entity such as `&amp;` would show as written wherever the description is read as plain text, and
 * `&lt;` typed by a caller is shown as text, not made into a tag.
 */
const inert = (text: string) => text.replace(/</g, '‹').replace(/>/g, '›');

/**
 * The event this key booked, if an earlier attempt got that far: tagged with the key, or (made by
 * an attempt that stopped before tagging it) with the key's own `Booking ref:` line, never another
 * booking whose description merely contains the key (a longer key, a phone number).
 */
function bookedEvent(cal: Calendar, progress: Progress, key: string, start: Date, end: Date): CalendarEvent | null {
  if (progress.booking_id) return cal.getEventById(progress.booking_id);
  return cal.getEvents(start, end).find(keyedEvent(key)) ?? null;
}

/**
 * The booking recorded first for the key. A concurrent attempt with the key (the gateway retried
 * while this one was slow) may have booked the slot at the same moment: the one recorded first is
 * kept, and this attempt's own event, just made, is deleted.
 */
function firstRecorded(c: Ctx, progress: Progress, cal: Calendar, made: CalendarEvent): CalendarEvent {
  const mine = made.getId();
  const recorded = locked(c, progress, () => {
    releaseSlot(c); // the event is in the calendar now: a later booking of the slot finds it
    return (progress.booking_id = progress.booking_id || mine);
  });
  if (recorded === mine) return made;
  const kept = cal.getEventById(recorded);
  if (!kept) return made; // the recorded one is gone (deleted by hand): this one stands
  made.deleteEvent();
  return kept;
}

function bookSlot(c: Ctx): Steps {
  const asked = slot(c, 'date', 'time');
  const { tz, start, end, notPast } = asked;
  const [name, service, phone, location] = ['name', 'service', 'phone', 'location'].map((n) => arg(c.args, n));
  const cal = calendar(c);
  return (progress) => {
    let event = bookedEvent(cal, progress, c.key, start, end);
    if (!event) {
      notPast();
      claimSlot(c, progress, cal, asked, ['date', 'time'], keyedEvent(c.key));
      const description = [inert(arg(c.args, 'notes')), `Phone: ${inert(phone)}`, `Call: ${c.callId}`, bookingRef(c.key)].filter(Boolean);
      event = cal.createEvent(`${service} – ${name}`, start, end, { location, description: description.join('\n') });
      event.setTag(EVENT_TAG, c.key);
      event = firstRecorded(c, progress, cal, event);
    }
    const bookingId = event.getId();
    progress.booking_id = bookingId;
    const when = localText(start, tz);
    const body = `Booking confirmed: ${service}, ${when}${location ? ` at ${location}` : ''}. Reply to change it.`;
    const text = textOnce(c, progress, phone, body, () =>
      upsertContact(c, { name, email: arg(c.args, 'email'), intent: 'book', transcript: arg(c.args, 'transcript') }),
    );
    const result = { booking_id: bookingId, start: start.toISOString(), end: end.toISOString(), text };
    return finish(
      c,
      progress,
      { type: 'Booking Confirmed', booking_id: bookingId, detail: `${service}, ${when} | text: ${text}` },
      { ok: true, action: 'book_slot', ...result },
    );
  };
}

/** The phone of the booking's first activity (its `Booking Confirmed`), or '' (an event not booked here). Under the lock. */
function bookedPhone(c: Ctx, bookingId: string): string {
  const sheet = tab(c.svc.spreadsheet, ACTIVITIES);
  const row = findRow(sheet, columnIn(ACTIVITIES, 'booking_id'), bookingId);
  if (!row) return '';
  return String(rowRecord(ACTIVITIES, sheet.getRange(row, 1, 1, ACTIVITIES.header.length).getValues()[0]).phone).trim();
}

function rescheduleSlot(c: Ctx): Steps {
  const asked = slot(c, 'new_date', 'new_time');
  const { tz, start, end, notPast } = asked;
  const bookingId = arg(c.args, 'booking_id');
  const cal = calendar(c);
  return (progress) => {
    const event = cal.getEventById(bookingId);
    if (!event) throw new MeterRefusal('invalid_argument', `args.booking_id: no booking with id "${bookingId}"`);
    if (!progress.moved) {
      notPast();
      claimSlot(c, progress, cal, asked, ['new_date', 'new_time'], (e) => e.getId() === event.getId());
      event.setTime(start, end);
      // Saved at once: a retry after another reschedule of this booking must not move it back.
      progress.moved = 'yes';
      locked(c, progress, () => releaseSlot(c));
    }
    // The template's reschedule_slot declares no phone: the text goes to the one the booking was made with.
    const phone = arg(c.args, 'phone') || locked(c, progress, () => bookedPhone(c, bookingId));
    const when = localText(start, tz);
    const text = textOnce(c, progress, phone, `Your booking is moved to ${when}.`);
    const notes = arg(c.args, 'notes');
    const result = { booking_id: bookingId, start: start.toISOString(), end: end.toISOString(), text };
    return finish(
      c,
      progress,
      { type: 'Booking Rescheduled', phone, booking_id: bookingId, detail: `${when}${notes ? ` | ${notes}` : ''} | text: ${text}` },
      { ok: true, action: 'reschedule_slot', ...result },
    );
  };
}

function createLead(c: Ctx): Steps {
  // A caller who declined was told nobody would contact them: kept, but not as a lead to work.
  const stage = declinedConsent(c.args) ? 'Opted out' : 'New';
  return (progress) => {
    const leadId = locked(c, progress, () => {
      upsertContact(c, {
        name: arg(c.args, 'name'),
        email: arg(c.args, 'email'),
        intent: 'qualify',
        transcript: arg(c.args, 'transcript'),
      });
      const sheet = tab(c.svc.spreadsheet, LEADS);
      const row = findKeyed(sheet, LEADS, c.key);
      if (row) return String(rowRecord(LEADS, sheet.getRange(row, 1, 1, LEADS.header.length).getValues()[0]).lead_id);
      const id = `lead-${c.svc.uuid()}`;
      const fields = ['phone', 'name', 'email', 'service', 'budget', 'timeline', 'utm'].map((n) => [n, arg(c.args, n)]);
      appendTabRows(c.svc.spreadsheet, sheet, [
        recordRow(LEADS, {
          ...Object.fromEntries(fields),
          lead_id: id,
          created_at: c.now.toISOString(),
          call_id: c.callId,
          stage,
          summary: excerpt(arg(c.args, 'transcript')),
          idempotency_key: c.key,
        }),
      ]);
      return id;
    });
    const result = { lead_id: leadId, stage };
    const type = stage === 'New' ? 'Lead Created' : 'Opted Out';
    return finish(c, progress, { type, detail: leadId }, { ok: true, action: 'create_lead', ...result });
  };
}

/**
 * A file of this name in the folder that belongs to the key (its description), or, when this key
 * recorded that it was saving a file of this name (`progress.recording`), one whose description
 * was never set: its attempt stopped, or Drive's reply was lost, before labelling it. An
 * unlabelled file is never taken otherwise: it may be another voicemail's of the same call.
 */
function keyedFile(folder: Folder, name: string, c: Ctx, progress: Progress) {
  for (const files = folder.getFilesByName(name); files.hasNext();) {
    const file = files.next();
    const owner = file.getDescription() ?? '';
    if (owner === c.key) return file;
    if (owner === '' && progress.recording === name) return file.setDescription(c.key);
  }
  return null;
}

/** The key's recording in the folder, or the name it gets: `<call_id>.mp3`, else `_2`, `_3` … */
function recordingOf(folder: Folder, c: Ctx, progress: Progress): { file: ReturnType<typeof keyedFile>; name: string } {
  let name = `${c.callId}.mp3`;
  for (let n = 2; ; n++) {
    const mine = keyedFile(folder, name, c, progress);
    if (mine || !folder.getFilesByName(name).hasNext()) return { file: mine, name };
    name = `${c.callId}_${n}.mp3`;
  }
}

/**
 * The call's recording in the voicemail folder as `<call_id>.mp3` (`_2`, `_3` … for a further
 * recording of the same call), labelled with the key: found if an earlier attempt saved it, else
 * fetched and saved. Looked for again once fetched: a retry of the same request (its caller gave up
 * waiting on this one) may have saved it meanwhile. The name is recorded in the progress before the
 * file is made, so that a retry knows an unlabelled file of that name as its own. Drive and
 * UrlFetch run outside the lock.
 */
function savedRecording(c: Ctx, progress: Progress, url: string) {
  const folder = folderFromConfig(c.svc, 'VOICEMAIL_FOLDER_ID', VOICEMAIL_FOLDER_NAME);
  const saved = recordingOf(folder, c, progress).file;
  if (saved) return saved;
  const sid = c.svc.properties.getProperty('TWILIO_ACCOUNT_SID');
  const token = c.svc.properties.getProperty('TWILIO_AUTH_TOKEN');
  const atTwilio = /^https:\/\/api\.twilio\.com\//.test(url);
  const twilio = atTwilio && sid && token;
  const res = c.svc.fetch(url, {
    method: 'get',
    muteHttpExceptions: true,
    ...(twilio ? { headers: { Authorization: `Basic ${c.svc.base64(`${sid}:${token}`)}` } } : {}),
  });
  const code = res.getResponseCode();
  if (code !== 200) {
    const why = `args.recording_url: the recording could not be fetched (HTTP ${code})`;
    // Credentials wrong or unset: fixed in script properties, then the same request works. Not a
    // permanent refusal, so the gateway retries and dead-letters it rather than dropping the voicemail.
    if (code === 401 || code === 403)
      throw new MeterRefusal(
        'config_error',
        `${why}: ${atTwilio ? 'check TWILIO_ACCOUNT_SID and TWILIO_AUTH_TOKEN in script properties' : 'its host asks for credentials the back office does not send'}`,
      );
    throw new MeterRefusal(code >= 500 || code === 408 || code === 429 ? 'internal' : 'invalid_argument', why);
  }
  // A retry of this request may have saved it meanwhile, unlabelled: take in the name it recorded first.
  locked(c, progress, () => undefined);
  const now = recordingOf(folder, c, progress);
  if (now.file) return now.file;
  locked(c, progress, () => (progress.recording = now.name));
  return folder.createFile(res.getBlob().setName(now.name)).setDescription(c.key);
}

function routeToVoicemail(c: Ctx): Steps {
  const url = arg(c.args, 'recording_url');
  if (!/^https:\/\//.test(url)) throw new MeterRefusal('invalid_argument', `args.recording_url: expected an https URL, got "${url}"`);
  return (progress) => {
    const file = savedRecording(c, progress, url);
    const task = locked(c, progress, () => {
      upsertContact(c, { intent: 'voicemail', transcript: arg(c.args, 'transcript') });
      const sheet = tab(c.svc.spreadsheet, TASKS);
      const row = findKeyed(sheet, TASKS, c.key);
      if (row) return rowRecord(TASKS, sheet.getRange(row, 1, 1, TASKS.header.length).getValues()[0]);
      const fresh = {
        task_id: `task-${c.svc.uuid()}`,
        created_at: c.now.toISOString(),
        due_at: new Date(c.now.getTime() + DAY_MS).toISOString(),
        type: 'Callback: Voicemail',
        phone: arg(c.args, 'phone'),
        call_id: c.callId,
        status: 'open',
        recording: file.getUrl(),
        idempotency_key: c.key,
      };
      appendTabRows(c.svc.spreadsheet, sheet, [recordRow(TASKS, fresh)]);
      return fresh;
    });
    const result = {
      task_id: String(task.task_id),
      due_at: String(task.due_at),
      recording: `/${VOICEMAIL_FOLDER_NAME}/${file.getName()}`,
      file_id: file.getId(),
    };
    return finish(c, progress, null, { ok: true, action: 'route_to_voicemail', ...result });
  };
}

export const ACTIONS: Record<ActionName, (c: Ctx) => Steps> = {
  book_slot: bookSlot,
  reschedule_slot: rescheduleSlot,
  create_lead: createLead,
  route_to_voicemail: routeToVoicemail,
};

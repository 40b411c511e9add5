/**
 * The voice concierge's back office (Document 3's workflow actions), reached with
 * `doPost?action=<function>` and a body `{call_id, args, idempotency_key}` (Apps Script cannot
 * read request headers, so the key travels in the body). Each action is authenticated like
 * ingest, runs under the script lock, and is idempotent: a replay of a key answers the first
 * result and changes nothing.
 *
 *   book_slot          calendar event (title from service and name, start/end from date, time and
 *                      BOOKING_MINUTES in TIMEZONE, location, notes); contact upserted by phone;
 *                      activity 'Booking Confirmed'; confirmation text. Answers the booking id.
 *   reschedule_slot    the event found by booking_id moved; activity 'Booking Rescheduled'; text.
 *   create_lead        contact upserted; lead at stage 'New' with a summary (an excerpt only).
 *   route_to_voicemail recording saved as voicemail/<call_id>.mp3 in the voicemail folder; task
 *                      'Callback: Voicemail' due in 24 hours.
 *
 * Every argument is checked before anything is written; a missing one, or a date or time that
 * does not parse, is refused naming the argument. Texts go through Twilio's Messages API with
 * credentials from script properties; without them a text is recorded as unsent, never dropped.
 */
import { configNumber, configText, readConfig, writeConfigValue, type ConfigValues } from './config';
import { withScriptLock } from './ingest';
import type { JsonReply } from './web';
import type { CalendarLike, FolderLike, MeterServices, SheetLike } from './services';
import { ACTIVITIES, CONTACTS, IDEMPOTENCY, LEADS, TASKS, appendTabRows, cellText, findRow, tab } from './tabs';

export type ActionName = 'book_slot' | 'reschedule_slot' | 'create_lead' | 'route_to_voicemail';
const VOICEMAIL_FOLDER_NAME = 'voicemail';
const DAY_MS = 86_400_000;
const EXCERPT = 280;

const REQUIRED: Record<ActionName, string[]> = {
  book_slot: ['name', 'phone', 'service', 'date', 'time'],
  reschedule_slot: ['booking_id', 'new_date', 'new_time'],
  create_lead: ['name', 'phone'],
  route_to_voicemail: ['phone', 'recording_url'],
};

class ArgError extends Error {}

type Args = Record<string, unknown>;
const text = (args: Args, name: string): string => (args[name] === undefined || args[name] === null ? '' : String(args[name]).trim());

/** Minutes east of UTC of a time zone at an instant (Intl, as Apps Script's V8 has it). */
function offsetMinutes(at: number, timeZone: string): number {
  const parts: Record<string, string> = {};
  for (const p of new Intl.DateTimeFormat('en-US', {
    timeZone,
    hourCycle: 'h23',
    year: 'numeric',
    month: '2-digit',
    day: '2-digit',
    hour: '2-digit',
    minute: '2-digit',
    second: '2-digit',
  }).formatToParts(new Date(at)))
    parts[p.type] = p.value;
  const asUtc = Date.UTC(
    Number(parts.year),
    Number(parts.month) - 1,
    Number(parts.day),
    Number(parts.hour),
    Number(parts.minute),
    Number(parts.second),
  );
  return Math.round((asUtc - at) / 60_000);
}

/** A local date and time in a time zone → the instant. Refuses what does not parse, naming the argument. */
function zonedInstant(date: string, time: string, timeZone: string, names: [string, string]): Date {
  const d = /^(\d{4})-(\d{2})-(\d{2})$/.exec(date);
  if (!d) throw new ArgError(`args.${names[0]}: expected a date as YYYY-MM-DD, got "${date}"`);
  const t = /^(\d{1,2}):(\d{2})$/.exec(time);
  if (!t || Number(t[1]) > 23 || Number(t[2]) > 59) throw new ArgError(`args.${names[1]}: expected a time as HH:MM (24 h), got "${time}"`);
  const [y, m, day] = [Number(d[1]), Number(d[2]), Number(d[3])];
  const local = Date.UTC(y, m - 1, day, Number(t[1]), Number(t[2]));
  const check = new Date(local);
  if (check.getUTCFullYear() !== y || check.getUTCMonth() !== m - 1 || check.getUTCDate() !== day)
    throw new ArgError(`args.${names[0]}: ${date} is not a calendar date`);
  // Two passes settle the offset across a daylight-saving change.
  let at = local - offsetMinutes(local, timeZone) * 60_000;
  at = local - offsetMinutes(at, timeZone) * 60_000;
  return new Date(at);
}

function excerpt(transcript: string): string {
  const flat = transcript.replace(/\s+/g, ' ').trim();
  return flat.length <= EXCERPT ? flat : `${flat.slice(0, EXCERPT - 1)}…`;
}

interface Context {
  svc: MeterServices;
  config: ConfigValues;
  args: Args;
  callId: string;
  now: Date;
  activities: unknown[][];
}

function timeZoneOf(config: ConfigValues): string {
  const tz = configText(config, 'TIMEZONE') || 'Etc/UTC';
  try {
    new Intl.DateTimeFormat('en', { timeZone: tz });
  } catch {
    throw new Error(`Config TIMEZONE: "${tz}" is not an IANA time zone`);
  }
  return tz;
}

function calendar(c: Context): CalendarLike {
  const id = configText(c.config, 'CALENDAR_ID');
  const cal = c.svc.calendar(id);
  if (!cal) throw new Error(`Config CALENDAR_ID: no calendar "${id}" is visible to the deploying account`);
  return cal;
}

/** Adds or updates the contact with this phone; returns its row. */
function upsertContact(c: Context, fields: { name?: string; email?: string; intent: string; transcript?: string }): void {
  const sheet = tab(c.svc.spreadsheet, CONTACTS);
  const phone = text(c.args, 'phone');
  const optedOut = c.args.opted_out === true || c.args.consent === 'opted_out';
  const row = findRow(sheet, 1, phone);
  const at = c.now.toISOString();
  if (row) {
    const range = sheet.getRange(row, 1, 1, CONTACTS.header.length);
    const [cur] = range.getValues();
    const next = [
      phone,
      fields.name || cur[1],
      fields.email || cur[2],
      c.callId,
      fields.intent,
      fields.transcript ? excerpt(fields.transcript) : cur[5],
      optedOut || cur[6] === true,
      cur[7] || at,
      at,
    ];
    range.setValues([next.map(cellText)]);
  } else {
    appendTabRows(sheet, [
      [
        phone,
        fields.name ?? '',
        fields.email ?? '',
        c.callId,
        fields.intent,
        fields.transcript ? excerpt(fields.transcript) : '',
        optedOut,
        at,
        at,
      ],
    ]);
  }
}

/**
 * Sends a text with Twilio's Messages API; without credentials, or on failure, says why. The
 * status is recorded in the activity the text belongs to (`text: sent` or `text: unsent: …`).
 */
function sendText(c: Context, to: string, body: string): string {
  const sid = c.svc.properties.getProperty('TWILIO_ACCOUNT_SID');
  const token = c.svc.properties.getProperty('TWILIO_AUTH_TOKEN');
  const from = c.svc.properties.getProperty('TWILIO_FROM');
  let status: string;
  if (!sid || !token || !from) status = 'unsent: Twilio credentials are not set in script properties';
  else {
    try {
      const res = c.svc.fetch(`https://api.twilio.com/2010-04-01/Accounts/${sid}/Messages.json`, {
        method: 'post',
        payload: { To: to, From: from, Body: body },
        headers: { Authorization: `Basic ${c.svc.base64(`${sid}:${token}`)}` },
        muteHttpExceptions: true,
      });
      const code = res.getResponseCode();
      status = code >= 200 && code < 300 ? 'sent' : `unsent: Twilio answered HTTP ${code}`;
    } catch (error) {
      status = `unsent: ${(error as Error).message}`;
    }
  }
  return status;
}

function voicemailFolder(c: Context): FolderLike {
  const id = configText(c.config, 'VOICEMAIL_FOLDER_ID');
  if (id) return c.svc.drive.getFolderById(id);
  const folder = c.svc.drive.createFolder(VOICEMAIL_FOLDER_NAME);
  writeConfigValue(c.svc.spreadsheet, 'VOICEMAIL_FOLDER_ID', folder.getId());
  return folder;
}

function fmt(d: Date, tz: string): string {
  return new Intl.DateTimeFormat('en-GB', {
    timeZone: tz,
    weekday: 'short',
    day: 'numeric',
    month: 'short',
    hour: '2-digit',
    minute: '2-digit',
    hourCycle: 'h23',
  }).format(d);
}

const PERFORM: Record<ActionName, (c: Context) => Record<string, unknown>> = {
  book_slot(c) {
    const tz = timeZoneOf(c.config);
    const start = zonedInstant(text(c.args, 'date'), text(c.args, 'time'), tz, ['date', 'time']);
    const end = new Date(start.getTime() + configNumber(c.config, 'BOOKING_MINUTES', 60, 1) * 60_000);
    const name = text(c.args, 'name');
    const service = text(c.args, 'service');
    const phone = text(c.args, 'phone');
    const event = calendar(c).createEvent(`${service} – ${name}`, start, end, {
      location: text(c.args, 'location'),
      description: [text(c.args, 'notes'), `Phone: ${phone}`, `Call: ${c.callId}`].filter(Boolean).join('\n'),
    });
    try {
      upsertContact(c, { name, email: text(c.args, 'email'), intent: 'book', transcript: text(c.args, 'transcript') });
    } catch (error) {
      event.deleteEvent(); // nothing half-written
      throw error;
    }
    const textStatus = sendText(
      c,
      phone,
      `Booking confirmed: ${service}, ${fmt(start, tz)}${text(c.args, 'location') ? ` at ${text(c.args, 'location')}` : ''}. Reply to change it.`,
    );
    c.activities.push([
      c.now.toISOString(),
      'Booking Confirmed',
      phone,
      c.callId,
      event.getId(),
      `${service}, ${fmt(start, tz)} | text: ${textStatus}`,
    ]);
    return { booking_id: event.getId(), start: start.toISOString(), end: end.toISOString(), text: textStatus };
  },
  reschedule_slot(c) {
    const tz = timeZoneOf(c.config);
    const start = zonedInstant(text(c.args, 'new_date'), text(c.args, 'new_time'), tz, ['new_date', 'new_time']);
    const end = new Date(start.getTime() + configNumber(c.config, 'BOOKING_MINUTES', 60, 1) * 60_000);
    const bookingId = text(c.args, 'booking_id');
    const event = calendar(c).getEventById(bookingId);
    if (!event) throw new ArgError(`args.booking_id: no booking with id "${bookingId}"`);
    event.setTime(start, end);
    const phone = text(c.args, 'phone');
    const textStatus = phone ? sendText(c, phone, `Your booking is moved to ${fmt(start, tz)}.`) : 'unsent: no phone in the arguments';
    c.activities.push([
      c.now.toISOString(),
      'Booking Rescheduled',
      phone,
      c.callId,
      bookingId,
      `${fmt(start, tz)}${text(c.args, 'notes') ? ` | ${text(c.args, 'notes')}` : ''} | text: ${textStatus}`,
    ]);
    return { booking_id: bookingId, start: start.toISOString(), end: end.toISOString(), text: textStatus };
  },
  create_lead(c) {
    upsertContact(c, {
      name: text(c.args, 'name'),
      email: text(c.args, 'email'),
      intent: 'qualify',
      transcript: text(c.args, 'transcript'),
    });
    const leadId = `lead-${c.svc.uuid()}`;
    appendTabRows(tab(c.svc.spreadsheet, LEADS), [
      [
        leadId,
        c.now.toISOString(),
        c.callId,
        text(c.args, 'phone'),
        text(c.args, 'name'),
        text(c.args, 'email'),
        text(c.args, 'service'),
        text(c.args, 'budget'),
        text(c.args, 'timeline'),
        text(c.args, 'utm'),
        'New',
        excerpt(text(c.args, 'transcript')),
      ],
    ]);
    c.activities.push([c.now.toISOString(), 'Lead Created', text(c.args, 'phone'), c.callId, '', leadId]);
    return { lead_id: leadId, stage: 'New' };
  },
  route_to_voicemail(c) {
    const url = text(c.args, 'recording_url');
    if (!/^https:\/\//.test(url)) throw new ArgError(`args.recording_url: expected an https URL, got "${url}"`);
    const sid = c.svc.properties.getProperty('TWILIO_ACCOUNT_SID');
    const token = c.svc.properties.getProperty('TWILIO_AUTH_TOKEN');
    const twilio = /^https:\/\/api\.twilio\.com\//.test(url) && sid && token;
    const res = c.svc.fetch(url, {
      method: 'get',
      muteHttpExceptions: true,
      ...(twilio ? { headers: { Authorization: `Basic ${c.svc.base64(`${sid}:${token}`)}` } } : {}),
    });
    if (res.getResponseCode() !== 200)
      throw new ArgError(`args.recording_url: the recording could not be fetched (HTTP ${res.getResponseCode()})`);
    const file = voicemailFolder(c).createFile(res.getBlob().setName(`${c.callId}.mp3`) as never);
    const taskId = `task-${c.svc.uuid()}`;
    const due = new Date(c.now.getTime() + DAY_MS);
    appendTabRows(tab(c.svc.spreadsheet, TASKS), [
      [taskId, c.now.toISOString(), due.toISOString(), 'Callback: Voicemail', text(c.args, 'phone'), c.callId, 'open', file.getUrl()],
    ]);
    upsertContact(c, { intent: 'voicemail', transcript: text(c.args, 'transcript') });
    return { task_id: taskId, due_at: due.toISOString(), recording: `/${VOICEMAIL_FOLDER_NAME}/${c.callId}.mp3`, file_id: file.getId() };
  },
};

export function backOfficeAction(svc: MeterServices, action: ActionName, body: unknown): JsonReply {
  if (!body || typeof body !== 'object' || Array.isArray(body))
    return { ok: false, error: 'body: expected {call_id, args, idempotency_key}' };
  const b = body as { call_id?: unknown; args?: unknown; idempotency_key?: unknown };
  if (typeof b.call_id !== 'string' || !/^[A-Za-z0-9._:-]{1,128}$/.test(b.call_id))
    return { ok: false, error: 'call_id: expected 1 to 128 characters of A-Z a-z 0-9 . _ : -' };
  if (typeof b.idempotency_key !== 'string' || !/^[A-Za-z0-9_-]{8,128}$/.test(b.idempotency_key))
    return { ok: false, error: 'idempotency_key: expected 8 to 128 characters of A-Z a-z 0-9 _ -' };
  if (!b.args || typeof b.args !== 'object' || Array.isArray(b.args)) return { ok: false, error: 'args: expected an object' };
  const args = b.args as Args;
  for (const name of REQUIRED[action]) if (text(args, name) === '') return { ok: false, error: `args.${name}: required for ${action}` };
  const key = b.idempotency_key;
  const callId = b.call_id;
  try {
    return withScriptLock(svc, () => {
      const idem: SheetLike = tab(svc.spreadsheet, IDEMPOTENCY);
      const seen = findRow(idem, 1, key);
      if (seen) return { ...(JSON.parse(String(idem.getRange(seen, 3).getValue())) as object), replayed: true } as unknown as JsonReply;
      const c: Context = { svc, config: readConfig(svc.spreadsheet), args, callId, now: svc.now(), activities: [] };
      const result = { ok: true, action, ...PERFORM[action](c) };
      if (c.activities.length) appendTabRows(tab(svc.spreadsheet, ACTIVITIES), c.activities);
      appendTabRows(idem, [[key, action, JSON.stringify(result), c.now.toISOString()]]);
      return { ...result, replayed: false };
    });
  } catch (error) {
    return { ok: false, error: (error as Error).message };
  }
}

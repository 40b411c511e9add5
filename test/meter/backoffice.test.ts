// The voice concierge's back office in the built bundle (node:vm), with fakes of CalendarApp,
// DriveApp and UrlFetchApp: bookings, reschedules, leads, voicemail, call records, rollups.
// One describe per group of actions: long because each behaviour is a short test of its own.
import { readFileSync } from 'node:fs';
import { beforeEach, describe, expect, it } from 'vitest';
import { voiceRollup } from '../../apps-script/src/voice-rollup';
import { CALL_FIELDS, type CallRecord } from '../../schema/call-record';
import { isPermanentRefusal } from '../../schema/meter-reply';
import { FakePlatform, callJson, loadBundle, webEvent, type Bundle, type FakeTextOutput } from './fakes/platform';

const SECRET = 'bo-secret';
let platform: FakePlatform;
let meter: Bundle;

function setConfig(key: string, value: unknown) {
  const row = platform.spreadsheet.tab('Config')!.data.find((r) => r[0] === key)!;
  row[1] = value as string;
}
beforeEach(() => {
  platform = new FakePlatform();
  platform.clock.set('2026-11-22T12:00:00Z');
  meter = loadBundle(platform);
  meter.setup();
  platform.properties.setProperty('SECRET_TOKEN', SECRET);
  setConfig('TIMEZONE', 'Europe/Lisbon');
  setConfig('BOOKING_MINUTES', 45);
});
const act = (action: string, body: unknown, token = SECRET) => callJson(meter, 'doPost', { action, token }, body);
const rows = (name: string) => platform.spreadsheet.tab(name)!.data.slice(1);
const booking = (key = 'key-book-0001') => ({
  call_id: 'call-1',
  idempotency_key: key,
  args: {
    name: 'Ana Silva',
    phone: '+351912345678',
    service: 'Haircut',
    date: '2027-07-01',
    time: '10:30',
    location: 'Rua Augusta 1',
    notes: 'short',
    email: 'ana@example.com',
  },
});

describe('book_slot', () => {
  it('a local time the clocks skip is refused naming the time, nothing booked; one that occurs twice is the first', () => {
    const skipped = { ...booking('key-dst-00001'), args: { ...booking().args, date: '2027-03-28', time: '01:30' } };
    expect(act('book_slot', skipped)).toEqual({
      ok: false,
      code: 'invalid_argument',
      error: 'args.time: 01:30 does not exist on 2027-03-28 in Europe/Lisbon (the clocks go forward)',
    });
    expect(platform.calendar.live()).toHaveLength(0);
    const after = { ...booking('key-dst-00002'), args: { ...booking().args, date: '2027-03-28', time: '02:30' } };
    expect(act('book_slot', after)).toMatchObject({ ok: true });
    expect(platform.calendar.live()[0].start.toISOString()).toBe('2027-03-28T01:30:00.000Z'); // 02:30 summer time
    // 01:30 occurs twice the night the clocks go back: the first, still summer time.
    const twice = { ...booking('key-dst-00003'), args: { ...booking().args, date: '2027-10-31', time: '01:30' } };
    expect(act('book_slot', twice)).toMatchObject({ ok: true });
    expect(platform.calendar.live()[1].start.toISOString()).toBe('2027-10-31T00:30:00.000Z');
  });

  it('a booking whose times were agreed in another zone than Config TIMEZONE (the concierge’s meta.timezone, sent as timezone) is a config_error naming both; nothing booked; the same zone, or none said, books', () => {
    const agreedIn = (timezone: string | undefined, key: string, time = '10:30') => ({
      ...booking(key),
      args: { ...booking().args, time },
      ...(timezone ? { timezone } : {}),
    });
    setConfig('TIMEZONE', 'Etc/UTC'); // the default, left as it was
    const refused = act('book_slot', agreedIn('America/New_York', 'key-zone-0001'));
    expect(refused).toEqual({
      ok: false,
      code: 'config_error',
      error:
        "Config TIMEZONE is Etc/UTC, but the voice concierge agrees times with callers in America/New_York (its meta.timezone): set Config TIMEZONE to America/New_York, or the caller's times would be booked hours off",
    });
    expect(isPermanentRefusal(refused.code)).toBe(false); // retried, then dead-lettered: the booking waits for the fix
    expect(platform.calendar.live()).toHaveLength(0);
    expect(rows('activities')).toHaveLength(0);
    setConfig('TIMEZONE', 'America/New_York');
    expect(act('book_slot', agreedIn('America/New_York', 'key-zone-0001'))).toMatchObject({ ok: true });
    expect(platform.calendar.live()[0].start.toISOString()).toBe('2027-07-01T14:30:00.000Z'); // 10:30 in New York
    expect(act('book_slot', agreedIn('US/Eastern', 'key-zone-0002', '12:00'))).toMatchObject({ ok: true }); // another name of the same zone
    expect(act('book_slot', agreedIn(undefined, 'key-zone-0003', '14:00'))).toMatchObject({ ok: true }); // a sender that does not say
    expect(act('book_slot', { ...booking('key-zone-0004'), timezone: 'Mars/Olympus' })).toMatchObject({ ok: false, code: 'invalid_body' });
  });

  it('a replay of a key booked before the zone was checked answers the first result, whatever the zone sent now; nothing booked again', () => {
    setConfig('TIMEZONE', 'Etc/UTC');
    const first = act('book_slot', booking('key-zone-old1')); // an earlier workflow, which sent no timezone
    expect(first).toMatchObject({ ok: true, replayed: false });
    const replay = act('book_slot', { ...booking('key-zone-old1'), timezone: 'America/New_York' }); // the gateway retried, now sending it
    expect(replay).toEqual({ ...first, replayed: true });
    expect(platform.calendar.live()).toHaveLength(1);
    expect(act('book_slot', { ...booking('key-zone-new1'), timezone: 'America/New_York' })).toMatchObject({
      ok: false,
      code: 'config_error',
    });
  });

  it("a slot that has already begun is refused naming the argument and today's date there; nothing booked, moved or texted", () => {
    platform.properties.setProperty('TWILIO_ACCOUNT_SID', 'AC1');
    platform.properties.setProperty('TWILIO_AUTH_TOKEN', 'tok');
    platform.properties.setProperty('TWILIO_FROM', '+15550001111');
    platform.urlFetch.respond = () => ({ code: 201, body: '{"sid":"SM1"}' });
    // The clock: 2026-11-22 12:00 UTC, 12:00 in Lisbon. A model that takes the year for 2025, or books "this morning".
    const lastYear = { ...booking('key-past-0001'), args: { ...booking().args, date: '2025-11-23', time: '10:00' } };
    expect(act('book_slot', lastYear)).toEqual({
      ok: false,
      code: 'invalid_argument',
      error:
        'args.date: 2025-11-23 10:00 has passed in Europe/Lisbon (it is now 2026-11-22 12:00 there): ask for a date and time from now on',
    });
    const thisMorning = { ...booking('key-past-0002'), args: { ...booking().args, date: '2026-11-22', time: '11:59' } };
    expect(act('book_slot', thisMorning)).toMatchObject({
      ok: false,
      code: 'invalid_argument',
      error: expect.stringMatching(/^args\.time: 2026-11-22 11:59 has passed in Europe\/Lisbon \(it is now 2026-11-22 12:00 there\)/),
    });
    expect(platform.calendar.events).toHaveLength(0);
    expect(rows('activities')).toHaveLength(0);
    expect(rows('contacts')).toHaveLength(0);
    expect(platform.urlFetch.requests).toHaveLength(0);
    // Later today books; moving it to yesterday is refused and leaves it where it is.
    const later = { ...booking('key-past-0003'), args: { ...booking().args, date: '2026-11-22', time: '12:30' } };
    const { booking_id } = act('book_slot', later);
    expect(booking_id).toBe('evt-1@google.com');
    const back = { call_id: 'call-2', idempotency_key: 'key-past-0004', args: { booking_id, new_date: '2026-11-21', new_time: '15:00' } };
    expect(act('reschedule_slot', back)).toMatchObject({
      ok: false,
      code: 'invalid_argument',
      error: expect.stringMatching(/^args\.new_date: /),
    });
    expect(platform.calendar.live()[0].start.toISOString()).toBe('2026-11-22T12:30:00.000Z');
    expect(rows('activities').map((r) => r[1])).toEqual(['Booking Confirmed']);
    expect(platform.urlFetch.requests).toHaveLength(1); // the booking's text only
  });

  it('a BOOKING_MINUTES that is no whole number of minutes up to a day is a config_error naming it; nothing is booked', () => {
    for (const value of [1e20, 30.5]) {
      setConfig('BOOKING_MINUTES', value);
      expect(act('book_slot', booking(`key-minutes-${value === 30.5 ? 'half' : 'huge'}`))).toEqual({
        ok: false,
        code: 'config_error',
        error: `Config BOOKING_MINUTES must be a whole number from 1 to 1440, found "${value}"`,
      });
    }
    expect(platform.calendar.live()).toHaveLength(0);
  });

  it('creates one event, contact, activity and text; a replay changes nothing and answers the first result', () => {
    platform.properties.setProperty('TWILIO_ACCOUNT_SID', 'AC1');
    platform.properties.setProperty('TWILIO_AUTH_TOKEN', 'tok');
    platform.properties.setProperty('TWILIO_FROM', '+15550001111');
    platform.urlFetch.respond = () => ({ code: 201, body: '{"sid":"SM1"}' });
    const first = act('book_slot', booking());
    expect(first).toMatchObject({ ok: true, action: 'book_slot', booking_id: 'evt-1@google.com', text: 'sent', replayed: false });
    const [ev] = platform.calendar.live();
    expect(ev.title).toBe('Haircut – Ana Silva');
    // 10:30 in Lisbon in July is 09:30 UTC (summer time); 45 minutes long.
    expect([ev.start.toISOString(), ev.end.toISOString()]).toEqual(['2027-07-01T09:30:00.000Z', '2027-07-01T10:15:00.000Z']);
    expect(ev.options.location).toBe('Rua Augusta 1');
    expect(ev.options.description).toContain('call-1');
    const replay = act('book_slot', booking());
    expect(replay).toEqual({ ...first, replayed: true });
    expect(platform.calendar.live()).toHaveLength(1);
    expect(rows('contacts')).toHaveLength(1);
    expect(rows('contacts')[0].slice(0, 5)).toEqual(['+351912345678', 'Ana Silva', 'ana@example.com', 'call-1', 'book']);
    expect(rows('activities').map((r) => r[1])).toEqual(['Booking Confirmed']);
    expect(rows('activities')[0][4]).toBe('evt-1@google.com');
    expect(rows('activities')[0][5]).toMatch(/\| text: sent$/);
    const sms = platform.urlFetch.requests.filter((r) => r.url.includes('api.twilio.com'));
    expect(sms).toHaveLength(1);
    expect(sms[0].url).toBe('https://api.twilio.com/2010-04-01/Accounts/AC1/Messages.json');
    expect(sms[0].options.payload).toMatchObject({ To: '+351912345678', From: '+15550001111' });
    expect(sms[0].options.headers?.Authorization).toBe(`Basic ${Buffer.from('AC1:tok').toString('base64')}`);
  });

  it("caller text in the event's description starts no tag Calendar would render (a live link); & and ' stay as typed", () => {
    const notes = `O'Brien & Sons: <a href="https://evil.example">click</a> <!-- hide --> &lt;b&gt;`;
    const phone = '+351912345678<img src=x>';
    expect(act('book_slot', { ...booking(), args: { ...booking().args, notes, phone } })).toMatchObject({ ok: true, replayed: false });
    const description = platform.calendar.live()[0].options.description!;
    // Google Calendar shows a description as HTML: no tag, comment or other markup may start in it.
    expect(description).not.toMatch(/[<>]/);
    expect(description.split('\n')).toEqual([
      `O'Brien & Sons: ‹a href="https://evil.example"›click‹/a› ‹!-- hide --› &lt;b&gt;`,
      'Phone: +351912345678‹img src=x›',
      'Call: call-1',
      'Booking ref: key-book-0001',
    ]);
    expect(act('book_slot', { ...booking(), args: { ...booking().args, notes, phone } })).toMatchObject({ ok: true, replayed: true });
  });

  it('without Twilio credentials the text is recorded as unsent', () => {
    expect(act('book_slot', booking()).text).toMatch(/^unsent: Twilio credentials/);
    expect(rows('activities').map((r) => r[1])).toEqual(['Booking Confirmed']);
    expect(rows('activities')[0][5]).toMatch(/\| text: unsent: Twilio credentials are not set/);
    expect(platform.urlFetch.requests).toHaveLength(0);
  });

  it('keeps its replay record in a hidden idempotency tab, hidden by setup or by the action that makes it; one shown by hand stays shown', () => {
    const sheets = platform.spreadsheet.sheets;
    expect(platform.spreadsheet.tab('idempotency')!.hidden).toBe(true);
    expect(['contacts', 'leads', 'activities', 'tasks', 'calls'].map((t) => platform.spreadsheet.tab(t)!.hidden)).toEqual([
      false,
      false,
      false,
      false,
      false,
    ]);
    // Deleted by hand: the first action makes it again, hidden too.
    sheets.splice(sheets.indexOf(platform.spreadsheet.tab('idempotency')!), 1);
    expect(act('book_slot', booking())).toMatchObject({ ok: true });
    expect(rows('idempotency')).toHaveLength(1);
    expect(platform.spreadsheet.tab('idempotency')!.hidden).toBe(true);
    // An operator who shows it to look at a key is not overruled by the next setup.
    platform.spreadsheet.tab('idempotency')!.hidden = false;
    meter.setup();
    expect(platform.spreadsheet.tab('idempotency')!.hidden).toBe(false);
  });

  it('refuses a missing argument or a bad date/time naming it, writing nothing', () => {
    const b = booking();
    expect(act('book_slot', { ...b, args: { ...b.args, phone: '' } })).toEqual({
      ok: false,
      error: 'args.phone: required for book_slot',
      code: 'invalid_argument',
    });
    expect(act('book_slot', { ...b, args: { ...b.args, date: '01/07/2026' } }).error).toBe(
      'args.date: expected a date as YYYY-MM-DD, got "01/07/2026"',
    );
    expect(act('book_slot', { ...b, args: { ...b.args, date: '2026-02-30' } }).error).toMatch(
      /^args\.date: 2026-02-30 is not a calendar date/,
    );
    expect(act('book_slot', { ...b, args: { ...b.args, time: '25:00' } }).error).toMatch(/^args\.time: expected a time/);
    expect(act('book_slot', { ...b, idempotency_key: 'x' }).error).toMatch(/^idempotency_key: /);
    expect(act('book_slot', b, 'wrong')).toEqual({ ok: false, error: 'unauthorized', code: 'unauthorized' });
    expect(platform.calendar.events).toHaveLength(0);
    expect(rows('contacts')).toHaveLength(0);
    expect(rows('idempotency')).toHaveLength(0);
  });

  it('an argument that is an object or a list is refused naming it, nothing written; numbers and true/false are taken as text', () => {
    const b = booking('key-shape-0001');
    expect(act('book_slot', { ...b, args: { ...b.args, name: { first: 'Ana', last: 'Silva' } } })).toEqual({
      ok: false,
      code: 'invalid_argument',
      error: 'args.name: expected text, got an object',
    });
    expect(act('book_slot', { ...b, args: { ...b.args, notes: ['window seat', 'quiet'] } })).toMatchObject({
      ok: false,
      code: 'invalid_argument',
      error: 'args.notes: expected text, got a list',
    });
    expect(platform.calendar.events).toHaveLength(0);
    expect(rows('idempotency')).toHaveLength(0);
    expect(act('book_slot', { ...b, args: { ...b.args, phone: 351912345678, opted_out: false } })).toMatchObject({ ok: true });
    expect(platform.calendar.live()[0].title).toBe('Haircut – Ana Silva');
    expect(rows('contacts')[0][0]).toBe('351912345678');
  });

  it('an argument longer than a cell could hold is refused naming it, nothing written; a replay with it shortened books', () => {
    const long = { ...booking('key-long-0001'), args: { ...booking().args, notes: 'n'.repeat(60_000) } };
    expect(act('book_slot', long)).toEqual({
      ok: false,
      code: 'invalid_argument',
      error: 'args.notes: at most 10000 characters, got 60000',
    });
    expect(platform.calendar.events).toHaveLength(0);
    expect(rows('idempotency')).toHaveLength(0);
    const fixed = { ...long, args: { ...long.args, notes: 'n'.repeat(10_000) } };
    const { booking_id } = act('book_slot', fixed);
    expect(rows('activities')).toHaveLength(1);
    // A reschedule's notes go into its activity row: refused before the event is moved.
    const move = { call_id: 'call-2', idempotency_key: 'key-long-0002', args: { booking_id, new_date: '2026-12-01', new_time: '15:00' } };
    expect(act('reschedule_slot', { ...move, args: { ...move.args, notes: 'm'.repeat(60_000) } })).toMatchObject({
      ok: false,
      error: 'args.notes: at most 10000 characters, got 60000',
    });
    expect(platform.calendar.live()[0].start.toISOString()).toBe('2027-07-01T09:30:00.000Z');
    expect(act('reschedule_slot', { ...move, args: { ...move.args, notes: 'm'.repeat(10_000) } })).toMatchObject({ ok: true });
    expect(rows('activities').map((r) => r[1])).toEqual(['Booking Confirmed', 'Booking Rescheduled']);
  });
});

describe('reschedule_slot, create_lead, route_to_voicemail', () => {
  it("a reschedule with the template's arguments (no phone) texts the phone the booking was made with, and its activity names it", () => {
    platform.properties.setProperty('TWILIO_ACCOUNT_SID', 'AC1');
    platform.properties.setProperty('TWILIO_AUTH_TOKEN', 'tok');
    platform.properties.setProperty('TWILIO_FROM', '+15550001111');
    platform.urlFetch.respond = () => ({ code: 201, body: '{"sid":"SM1"}' });
    const { booking_id } = act('book_slot', booking());
    // What the model can send: the phone bridge passes on only the arguments concierge.json declares.
    const declared = (
      JSON.parse(readFileSync('concierge.json', 'utf8')) as { functions: Array<{ name: string; args: string[] }> }
    ).functions.find((f) => f.name === 'reschedule_slot')!.args;
    const given: Record<string, string> = { booking_id, new_date: '2026-12-01', new_time: '15:00', notes: 'later please' };
    const args = Object.fromEntries(declared.map((a) => [a, given[a]]));
    expect(act('reschedule_slot', { call_id: 'call-9', idempotency_key: 'key-move-nophone', args })).toMatchObject({
      ok: true,
      text: 'sent',
    });
    const texts = platform.urlFetch.requests.filter((r) => r.url.includes('/Messages.json'));
    expect(texts.map((r) => r.options.payload)).toEqual([
      expect.objectContaining({ To: '+351912345678' }),
      expect.objectContaining({ To: '+351912345678', Body: expect.stringMatching(/^Your booking is moved to /) }),
    ]);
    expect(rows('activities').map((r) => [r[1], r[2]])).toEqual([
      ['Booking Confirmed', '+351912345678'],
      ['Booking Rescheduled', '+351912345678'],
    ]);
  });

  it('moves the booked event; an unknown booking_id is an error that says so', () => {
    const { booking_id } = act('book_slot', booking());
    const moved = act('reschedule_slot', {
      call_id: 'call-2',
      idempotency_key: 'key-move-0001',
      args: { booking_id, new_date: '2026-12-01', new_time: '15:00', phone: '+351912345678' },
    });
    expect(moved).toMatchObject({ ok: true, booking_id, start: '2026-12-01T15:00:00.000Z' }); // Lisbon is UTC in winter
    expect(platform.calendar.live()[0].start.toISOString()).toBe('2026-12-01T15:00:00.000Z');
    expect(rows('activities').map((r) => r[1])).toContain('Booking Rescheduled');
    const unknown = act('reschedule_slot', {
      call_id: 'call-2',
      idempotency_key: 'key-move-0002',
      args: { booking_id: 'nope', new_date: '2026-12-01', new_time: '15:00' },
    });
    expect(unknown).toEqual({ ok: false, error: 'args.booking_id: no booking with id "nope"', code: 'invalid_argument' });
  });

  it("a transcript's excerpt is cut between characters, never inside an emoji (half a UTF-16 pair is no text a cell can show)", () => {
    const transcript = `ab${'😀'.repeat(200)}`; // the 279th character is the first half of an emoji
    const lead = act('create_lead', {
      call_id: 'call-3',
      idempotency_key: 'key-lead-0002',
      args: { name: 'Rui', phone: '+351930000000', service: 'plumbing', transcript },
    });
    expect(lead).toMatchObject({ ok: true });
    const excerpt = `ab${'😀'.repeat(138)}…`;
    expect(rows('leads')[0]).toContain(excerpt);
    expect(rows('contacts')[0]).toContain(excerpt);
  });

  it('creates a lead with an excerpt of the transcript (this caller declined: stage Opted out); the contact keeps call, intent and opt-out', () => {
    const transcript = `Hello ${'I need a new kitchen sink installed and maybe the pipes. '.repeat(20)}`;
    const lead = act('create_lead', {
      call_id: 'call-3',
      idempotency_key: 'key-lead-0001',
      args: {
        name: 'Rui',
        phone: '+351930000000',
        email: 'rui@example.com',
        service: 'plumbing',
        budget: '500-1000',
        timeline: 'this month',
        utm: 'google',
        transcript,
        opted_out: true,
      },
    });
    expect(lead).toMatchObject({ ok: true, stage: 'Opted out' });
    const [row] = rows('leads');
    expect(row.slice(2, 11)).toEqual([
      'call-3',
      '+351930000000',
      'Rui',
      'rui@example.com',
      'plumbing',
      '500-1000',
      'this month',
      'google',
      'Opted out',
    ]);
    expect(String(row[11]).length).toBeLessThanOrEqual(280);
    expect(String(row[11])).toMatch(/…$/);
    const [contact] = rows('contacts');
    expect([contact[3], contact[4], contact[6]]).toEqual(['call-3', 'qualify', true]);
    expect(String(contact[5]).length).toBeLessThanOrEqual(280);
  });

  it('a caller who declined the consent line is no lead to work: stage "Opted out", activity "Opted Out", the contact tagged', () => {
    // What the phone bridge sends when a caller declines (opt-out.ts), and the consent flag alone.
    const declined = {
      call_id: 'call-7',
      idempotency_key: 'key-optout-01',
      args: {
        name: '(opted out)',
        phone: '+351930000007',
        opted_out: true,
        consent: 'opted_out',
        transcript: 'no, do not record me',
        utm: 'consent_opt_out',
      },
    };
    expect(act('create_lead', declined)).toMatchObject({ ok: true, stage: 'Opted out', replayed: false });
    const byConsent = {
      call_id: 'call-8',
      idempotency_key: 'key-optout-02',
      args: { name: 'Eva', phone: '+351930000008', consent: 'opted_out' },
    };
    expect(act('create_lead', byConsent)).toMatchObject({ ok: true, stage: 'Opted out' });
    expect(rows('leads').map((r) => [r[3], r[10]])).toEqual([
      ['+351930000007', 'Opted out'],
      ['+351930000008', 'Opted out'],
    ]);
    expect(rows('leads').filter((r) => r[10] === 'New')).toHaveLength(0);
    expect(rows('activities').map((r) => r[1])).toEqual(['Opted Out', 'Opted Out']);
    expect(rows('contacts').map((r) => r[6])).toEqual([true, true]);
    // A caller who consented is a lead as before.
    expect(
      act('create_lead', { call_id: 'call-9', idempotency_key: 'key-lead-0009', args: { name: 'Rui', phone: '+351930000009' } }),
    ).toMatchObject({
      stage: 'New',
    });
    expect(rows('activities').map((r) => r[1])).toEqual(['Opted Out', 'Opted Out', 'Lead Created']);
  });

  it('saves one recording as voicemail/<call_id>.mp3 and one task due 24 hours later; a replay adds nothing', () => {
    platform.urlFetch.respond = (req) =>
      req.url === 'https://api.twilio.com/rec/RE1.mp3' ? { code: 200, body: 'ID3audio' } : { code: 404 };
    const body = {
      call_id: 'call-4',
      idempotency_key: 'key-vm-00001',
      args: {
        phone: '+351910000000',
        recording_url: 'https://api.twilio.com/rec/RE1.mp3',
        transcript: 'please call me back',
        utc: '2026-11-22T21:00:00Z',
      },
    };
    const first = act('route_to_voicemail', body);
    expect(first).toMatchObject({ ok: true, recording: '/voicemail/call-4.mp3', due_at: '2026-11-23T12:00:00.000Z' });
    expect(act('route_to_voicemail', body).replayed).toBe(true);
    const folder = platform.drive.live('voicemail')[0];
    expect(folder.files.map((f) => [f.name, f.content])).toEqual([['call-4.mp3', 'ID3audio']]);
    expect(rows('tasks')).toHaveLength(1);
    expect(rows('tasks')[0].slice(2, 7)).toEqual(['2026-11-23T12:00:00.000Z', 'Callback: Voicemail', '+351910000000', 'call-4', 'open']);
    const missing = act('route_to_voicemail', {
      ...body,
      idempotency_key: 'key-vm-00002',
      args: { ...body.args, recording_url: 'https://api.twilio.com/rec/none.mp3' },
    });
    expect(missing).toEqual({
      ok: false,
      error: 'args.recording_url: the recording could not be fetched (HTTP 404)',
      code: 'invalid_argument',
    });
    expect(rows('tasks')).toHaveLength(1);
  });
});

describe('route_to_voicemail when Twilio refuses the recording for now', () => {
  it('a 401 or 403 (credentials wrong or unset) is a config_error naming them, a 429 is internal: retried and dead-lettered, not dropped', () => {
    platform.properties.setProperty('TWILIO_ACCOUNT_SID', 'AC1');
    platform.properties.setProperty('TWILIO_AUTH_TOKEN', 'rotated');
    let code = 401;
    platform.urlFetch.respond = () => ({ code });
    const body = {
      call_id: 'call-5',
      idempotency_key: 'key-vm-auth-01',
      args: { phone: '+351910000000', recording_url: 'https://api.twilio.com/rec/RE5.mp3' },
    };
    const refused = act('route_to_voicemail', body);
    expect(refused).toEqual({
      ok: false,
      code: 'config_error',
      error:
        'args.recording_url: the recording could not be fetched (HTTP 401): check TWILIO_ACCOUNT_SID and TWILIO_AUTH_TOKEN in script properties',
    });
    // The gateway's workflow retries what is not a permanent refusal, then dead-letters it, rather than answering it for good.
    expect(isPermanentRefusal(refused.code)).toBe(false);
    code = 403;
    expect(act('route_to_voicemail', body)).toMatchObject({ ok: false, code: 'config_error' });
    code = 429;
    expect(act('route_to_voicemail', body)).toMatchObject({
      ok: false,
      code: 'internal',
      error: 'args.recording_url: the recording could not be fetched (HTTP 429)',
    });
    expect(rows('tasks')).toHaveLength(0);
    // Once Twilio gives the file, the same request finishes: one recording, one task.
    platform.urlFetch.respond = () => ({ code: 200, body: 'ID3audio' });
    expect(act('route_to_voicemail', body)).toMatchObject({ ok: true, recording: '/voicemail/call-5.mp3', replayed: false });
    expect(rows('tasks')).toHaveLength(1);
  });
});

const call = (over: Partial<CallRecord>): CallRecord => ({
  call_id: 'c',
  started_at: '2026-11-21T10:00:00.000Z',
  duration_s: 60,
  model: 'm',
  intent_primary: 'book',
  turns: 4,
  ttfb_s: 1.2,
  asr_wer: null,
  confidence_avg: 0.9,
  escalated: false,
  outcome: 'booking',
  est_audio_cost_usd: 0.1,
  telephony_minutes: 1,
  country: 'PT',
  ...over,
});

describe('call records and rollups', () => {
  it('stores {"calls":[...]} typed in the calls tab, once per call_id; a bad record refuses the batch', () => {
    const records = [
      call({ call_id: 'a' }),
      call({
        call_id: 'b',
        outcome: 'voicemail_left',
        intent_primary: 'voicemail',
        escalated: false,
        est_audio_cost_usd: 0.01,
        ttfb_s: null,
      }),
    ];
    expect(callJson(meter, 'doPost', { token: SECRET }, { calls: records })).toEqual({ ok: true, appended: 2, duplicates: 0 });
    expect(callJson(meter, 'doPost', { token: SECRET }, { calls: records })).toEqual({ ok: true, appended: 0, duplicates: 2 });
    const tab = platform.spreadsheet.tab('calls')!;
    expect(tab.data[0]).toEqual([...CALL_FIELDS]);
    const [a] = tab.data.slice(1);
    expect(a[1]).toBeInstanceOf(Date);
    expect([a[2], a[5], a[9], a[11]]).toEqual([60, 4, false, 0.1]);
    const bad = callJson(
      meter,
      'doPost',
      { token: SECRET },
      { calls: [call({ call_id: 'c1' }), { ...call({ call_id: 'c2' }), outcome: 'won' }] },
    );
    expect(bad.ok).toBe(false);
    expect(bad.error).toMatch(/^calls\[1\]\.outcome: expected one of booking/);
    expect(tab.data).toHaveLength(3);
  });

  it('the digest shows the voice rollups for 7 and 30 days, equal to a direct computation', () => {
    const records = [
      call({ call_id: 'a', started_at: '2026-11-21T10:00:00.000Z', asr_wer: 0.1 }),
      call({
        call_id: 'b',
        started_at: '2026-11-20T10:00:00.000Z',
        escalated: true,
        outcome: 'abandoned',
        turns: 8,
        est_audio_cost_usd: 0.3,
      }),
      call({
        call_id: 'c',
        started_at: '2026-11-19T10:00:00.000Z',
        outcome: 'voicemail_left',
        intent_primary: 'voicemail',
        turns: 0,
        ttfb_s: null,
        est_audio_cost_usd: 0.02,
      }),
      call({ call_id: 'd', started_at: '2026-11-01T10:00:00.000Z', asr_wer: 0.3, est_audio_cost_usd: 0.5 }),
    ];
    callJson(meter, 'doPost', { token: SECRET }, { calls: records });
    meter.refreshDigest();
    const grid = platform.spreadsheet.tab('Digest')!.data;
    const value = (label: string) => grid.find((r) => r[0] === label)!.slice(1, 3);
    expect(value('calls')).toEqual([3, 4]);
    expect(value('booking rate')[0]).toBeCloseTo(1 / 2, 12); // answered: a, b
    expect(value('escalation rate')[0]).toBeCloseTo(1 / 2, 12);
    expect(value('containment rate')[1]).toBeCloseTo(2 / 3, 12); // 30 days: a, b, d answered; b escalated
    expect(value('average turns')[1]).toBeCloseTo((4 + 8 + 0 + 4) / 4, 12);
    expect(value('ASR WER (sampled calls)')[1]).toBeCloseTo(0.2, 12);
    expect(value('cost per booking (model, USD)')[1]).toBeCloseTo((0.1 + 0.5) / 2, 12);
    const direct = voiceRollup(platform.spreadsheet.tab('calls')!.data.slice(1), platform.clock.ms, 30);
    expect(value('cost per call (model, USD)')[1]).toBeCloseTo(direct.cost_per_call!, 12);
    // The same records leave through the export, for `npm run report -- voice --calls <file>`.
    const csv = (meter.doGet(webEvent({ token: SECRET, action: 'export', what: 'calls', since: '2026-11-19' })) as FakeTextOutput)
      .getContent()
      .trim()
      .split('\r\n');
    expect(csv[0]).toBe(CALL_FIELDS.join(','));
    expect(csv.slice(1).map((l) => l.split(',')[0])).toEqual(['a', 'b', 'c']);
    expect(csv[1]).toBe('a,2026-11-21T10:00:00.000Z,60,m,book,4,1.2,0.1,0.9,false,booking,0.1,1,PT,'); // ended_reason not given
  });
});

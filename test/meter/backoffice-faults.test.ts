// Back-office actions that fail half-way, on the built bundle: Google's services time out in the
// middle of a script ("Service Spreadsheets timed out"); the voice workflow retries with the same
// idempotency key. The retry finishes what is missing and repeats nothing; a text goes out at most once.
// One describe for all the half-way faults: long because each fault is a short test of its own.
import { describe, expect, it } from 'vitest';
import { backOffice, booking, lead, voicemail } from './backoffice-setup';

const timedOut = { ok: false, error: expect.stringMatching(/Service Spreadsheets timed out/) };
/** A retry's text when it found an earlier attempt sending: true whether that one was cut off or still runs. */
const SENDING_SEEN =
  'unknown: an earlier attempt of this request was sending it when this one looked (still running, or cut off); it may have been sent; not sent again';

describe('a back-office action that fails half-way', () => {
  it('book_slot: Sheets times out after the text went out; the retry makes no second event and sends no second text', () => {
    const { platform, act, rows, texts } = backOffice({ twilio: true });
    platform.calls.failAfter((name) => name === 'UrlFetchApp.fetch');
    expect(act('book_slot', booking())).toMatchObject(timedOut);
    const retry = act('book_slot', booking());
    expect(retry).toMatchObject({ ok: true, booking_id: 'evt-1@google.com', replayed: false });
    // Whether the interrupted attempt's text went out cannot be known: recorded, not re-sent.
    expect(retry.text).toBe(SENDING_SEEN);
    expect(platform.calendar.events).toHaveLength(1);
    expect(texts()).toHaveLength(1);
    expect(rows('contacts')).toHaveLength(1);
    expect(rows('activities').map((r) => r[1])).toEqual(['Booking Confirmed']);
    expect(String(rows('activities')[0][5])).toContain('text: unknown');
    const { replayed, ...same } = retry;
    expect(replayed).toBe(false);
    expect(act('book_slot', booking())).toEqual({ ...same, replayed: true });
  });

  it('book_slot: Sheets times out after the activity was logged; the retry keeps the known outcome "sent" and logs nothing twice', () => {
    const { platform, act, rows, texts } = backOffice({ twilio: true });
    platform.calls.failAfter((name, tab) => name === 'Range.setValues' && tab === 'activities');
    expect(act('book_slot', booking())).toMatchObject(timedOut);
    expect(act('book_slot', booking())).toMatchObject({ ok: true, booking_id: 'evt-1@google.com', text: 'sent', replayed: false });
    expect(texts()).toHaveLength(1);
    expect(rows('activities')).toHaveLength(1);
  });

  it('book_slot: the calendar event was made when Sheets timed out; the retry finds it by its tag and books nothing new', () => {
    const { platform, act, texts } = backOffice({ twilio: true });
    platform.calls.failAfter((name) => name === 'Calendar.createEvent');
    expect(act('book_slot', booking())).toMatchObject(timedOut);
    expect(act('book_slot', booking())).toMatchObject({ ok: true, booking_id: 'evt-1@google.com', text: 'sent' });
    expect(platform.calendar.events).toHaveLength(1); // never a second one, not even one made and deleted
    expect(platform.calendar.events[0].tags.get('meter_idempotency_key')).toBe('key-book-0001');
    expect(texts()).toHaveLength(1);
  });

  it('book_slot: its booking is found by its own tag or ref line, never by another booking in the slot whose longer key contains it', () => {
    const { platform, act } = backOffice();
    act('book_slot', { ...booking('key-book-00012'), args: { ...booking().args, name: 'Rui Costa', phone: '+351930000000' } });
    // Not taken for its own booking (it would answer Rui's): the slot is another's, so it is refused as taken.
    expect(act('book_slot', booking('key-book-0001'))).toMatchObject({
      ok: false,
      code: 'invalid_argument',
      error: expect.stringContaining('is taken'),
    });
    expect(platform.calendar.live().map((e) => e.title)).toEqual(['Haircut – Rui Costa']);
    // An event made by an attempt that stopped before tagging it is still found, by its own ref line.
    platform.calls.failAfter(
      (name) => name === 'Calendar.createEvent',
      (name) => name === 'CalendarEvent.setTag',
    );
    const later = { ...booking('key-book-0003'), args: { ...booking().args, time: '15:00' } };
    expect(act('book_slot', later)).toMatchObject({ ok: false, code: 'internal' });
    expect(act('book_slot', later)).toMatchObject({ ok: true, booking_id: 'evt-2@google.com' });
    expect(platform.calendar.live()).toHaveLength(2);
  });

  it('book_slot: the lock is busy after the text went out; the refusal does not say nothing was done, and the retry books and texts nothing more', () => {
    const { platform, act, texts } = backOffice({ twilio: true });
    platform.urlFetch.meanwhile = () => (platform.lock.busy = true); // another execution holds the lock from then on
    const refused = act('book_slot', booking());
    expect(refused).toMatchObject({ ok: false, code: 'busy' });
    expect(refused.error).not.toMatch(/nothing was written/);
    expect(refused.error).toMatch(/stopped part-way.*retry with the same idempotency_key/);
    platform.urlFetch.meanwhile = null;
    platform.lock.busy = false;
    expect(act('book_slot', booking())).toMatchObject({ ok: true, booking_id: 'evt-1@google.com' });
    expect(platform.calendar.events).toHaveLength(1);
    expect(texts()).toHaveLength(1);
  });

  it('book_slot: the Properties service fails as the text is claimed (its credentials read); the retry sends it once, recorded sent', () => {
    const { platform, act, texts } = backOffice({ twilio: true });
    let saves = 0; // the key's record, the slot claimed, then the booking recorded
    platform.calls.failAfter(
      (name, tab) => name === 'Range.setValues' && tab === 'idempotency' && ++saves === 3,
      (name) => name === 'Properties.getProperty',
      'Service Properties failed',
    );
    const first = act('book_slot', booking());
    expect(platform.calls.pendingFaults()).toBe(0); // the fault fired
    expect(first).toMatchObject({ ok: false, code: 'internal' });
    expect(texts()).toHaveLength(0);
    expect(act('book_slot', booking())).toMatchObject({ ok: true, text: 'sent' });
    expect(texts()).toHaveLength(1);
  });

  it('reschedule_slot: Sheets times out after the text went out; the retry sends no second text', () => {
    const { platform, act, texts } = backOffice({ twilio: true });
    const { booking_id } = act('book_slot', booking());
    const move = {
      call_id: 'call-2',
      idempotency_key: 'key-move-0001',
      args: { booking_id, new_date: '2026-12-01', new_time: '15:00', phone: '+351912345678' },
    };
    platform.calls.failAfter((name) => name === 'UrlFetchApp.fetch');
    expect(act('reschedule_slot', move)).toMatchObject(timedOut);
    expect(act('reschedule_slot', move)).toMatchObject({ ok: true, booking_id, start: '2026-12-01T15:00:00.000Z' });
    expect(texts()).toHaveLength(2); // the booking's and the move's, once each
  });

  it('reschedule_slot: a retry that comes after another reschedule does not move the booking back (its move was done)', () => {
    const { platform, act } = backOffice({ twilio: true });
    const { booking_id } = act('book_slot', booking());
    const move = (key: string, time: string) => ({
      call_id: 'call-2',
      idempotency_key: key,
      args: { booking_id, new_date: '2026-12-01', new_time: time, phone: '+351912345678' },
    });
    platform.calls.failAfter((name) => name === 'UrlFetchApp.fetch'); // moved and texted, then Sheets timed out
    expect(act('reschedule_slot', move('key-move-0001', '15:00'))).toMatchObject(timedOut);
    expect(act('reschedule_slot', move('key-move-0002', '16:00'))).toMatchObject({ ok: true, start: '2026-12-01T16:00:00.000Z' });
    expect(act('reschedule_slot', move('key-move-0001', '15:00'))).toMatchObject({ ok: true, booking_id, replayed: false });
    expect(platform.calendar.live().map((e) => e.start.toISOString())).toEqual(['2026-12-01T16:00:00.000Z']);
  });

  it('route_to_voicemail: Sheets times out after the recording was saved; the retry fetches nothing and makes one task', () => {
    const { platform, act, rows } = backOffice();
    platform.calls.failAfter((name) => name === 'Folder.createFile');
    expect(act('route_to_voicemail', voicemail())).toMatchObject(timedOut);
    expect(act('route_to_voicemail', voicemail())).toMatchObject({ ok: true, recording: '/voicemail/call-4.mp3' });
    const folder = platform.drive.live('voicemail')[0];
    expect(folder.files.map((f) => f.name)).toEqual(['call-4.mp3']);
    expect(platform.urlFetch.requests.filter((r) => r.url.endsWith('.mp3'))).toHaveLength(1);
    expect(rows('tasks')).toHaveLength(1);
  });

  it("route_to_voicemail: a recording saved before Drive's reply was lost is not taken by another voicemail of the same call", () => {
    const { platform, act, rows } = backOffice();
    platform.urlFetch.respond = (req) => ({ code: 200, body: `audio of ${req.url.slice(-7)}` });
    const second = {
      ...voicemail('key-vm-00002'),
      args: { ...voicemail().args, recording_url: 'https://api.twilio.com/rec/RE2.mp3' },
    };
    platform.calls.loseReply((name) => name === 'Folder.createFile'); // the first recording is saved, unlabelled
    expect(act('route_to_voicemail', voicemail())).toMatchObject({ ok: false, code: 'internal' });
    const other = act('route_to_voicemail', second); // the call's second voicemail, before the first one's retry
    const retry = act('route_to_voicemail', voicemail());
    const folder = platform.drive.live('voicemail')[0];
    const byId = new Map(folder.files.map((f) => [f.id, f]));
    expect(byId.get(retry.file_id)).toMatchObject({ content: 'audio of RE1.mp3', description: 'key-vm-00001' });
    expect(byId.get(other.file_id)).toMatchObject({ content: 'audio of RE2.mp3', description: 'key-vm-00002' });
    expect(folder.files).toHaveLength(2);
    expect(rows('tasks')).toHaveLength(2);
  });

  it('route_to_voicemail: a retry that comes while the first attempt still downloads saves one recording between them', () => {
    const { platform, act, rows } = backOffice();
    let retry: Record<string, unknown> | null = null;
    platform.urlFetch.meanwhile = (req) => {
      if (retry || !req.url.endsWith('.mp3')) return;
      retry = {}; // the gateway timed out waiting and sent the same request again
      retry = act('route_to_voicemail', voicemail());
    };
    const first = act('route_to_voicemail', voicemail());
    expect(retry).toMatchObject({ ok: true, recording: '/voicemail/call-4.mp3' });
    expect(first).toMatchObject({ ok: true, recording: '/voicemail/call-4.mp3', file_id: retry!.file_id });
    const folder = platform.drive.live('voicemail')[0];
    expect(folder.files.map((f) => f.name)).toEqual(['call-4.mp3']);
    expect(rows('tasks')).toHaveLength(1);
  });

  it("route_to_voicemail: a retry that saved the recording while the first attempt downloaded, and lost Drive's reply, leaves one recording", () => {
    const { platform, act, rows } = backOffice();
    let retry: Record<string, unknown> | null = null;
    platform.urlFetch.meanwhile = (req) => {
      if (retry || !req.url.endsWith('.mp3')) return;
      retry = {};
      platform.calls.loseReply((name) => name === 'Folder.createFile'); // the retry's file is saved, unlabelled
      retry = act('route_to_voicemail', voicemail());
    };
    const first = act('route_to_voicemail', voicemail());
    expect(retry).toMatchObject({ ok: false, code: 'internal' });
    expect(first).toMatchObject({ ok: true, recording: '/voicemail/call-4.mp3' });
    const folder = platform.drive.live('voicemail')[0];
    expect(folder.files.map((f) => [f.name, f.description])).toEqual([['call-4.mp3', 'key-vm-00001']]);
    expect(rows('tasks')).toHaveLength(1);
  });

  /** The gateway's retry of the same request (it gave up waiting), run while the first attempt makes the call `during`. */
  function retryDuring(platform: ReturnType<typeof backOffice>['platform'], during: string, retry: () => unknown) {
    const out: { reply?: unknown } = {};
    platform.calls.observe((name) => {
      if (name !== during || 'reply' in out) return;
      out.reply = null;
      out.reply = retry();
    });
    return out;
  }

  it('book_slot: a retry that comes while the first attempt looks up the slot sends no second text', () => {
    const { platform, act, texts } = backOffice({ twilio: true });
    const retry = retryDuring(platform, 'Calendar.getEvents', () => act('book_slot', booking()));
    const first = act('book_slot', booking());
    expect(retry.reply).toMatchObject({ ok: true, text: 'sent' });
    expect(first).toMatchObject({ ok: true, booking_id: (retry.reply as { booking_id: string }).booking_id });
    expect(platform.calendar.live()).toHaveLength(1);
    expect(texts()).toHaveLength(1);
  });

  it('book_slot: a retry that comes while the first attempt makes the event leaves one booking and one text', () => {
    const { platform, act, texts, rows } = backOffice({ twilio: true });
    const retry = retryDuring(platform, 'Calendar.createEvent', () => act('book_slot', booking()));
    const first = act('book_slot', booking());
    expect(retry.reply).toMatchObject({ ok: true });
    const kept = platform.calendar.live();
    expect(kept).toHaveLength(1);
    expect(first).toMatchObject({ ok: true, booking_id: kept[0].id });
    expect(retry.reply).toMatchObject({ booking_id: kept[0].id });
    expect(texts()).toHaveLength(1);
    expect(rows('activities')).toHaveLength(1);
  });

  it('book_slot: a retry that finishes while the first attempt still sends the text keeps its answer; the later finisher and every replay answer it', () => {
    const { platform, act, texts, rows } = backOffice({ twilio: true });
    const retry = retryDuring(platform, 'UrlFetchApp.fetch', () => act('book_slot', booking()));
    const first = act('book_slot', booking());
    const answered = retry.reply as Record<string, unknown>;
    // The retry found the text being sent by the first attempt (still running, not interrupted): not sent again, its outcome unknown to it.
    expect(answered).toMatchObject({ ok: true, replayed: false, text: SENDING_SEEN });
    expect(texts()).toHaveLength(1);
    expect(first).toEqual(answered);
    expect(act('book_slot', booking())).toEqual({ ...answered, replayed: true });
    expect(rows('activities')).toHaveLength(1);
    expect(String(rows('activities')[0][5])).toContain('text: unknown'); // the log says what the answer said
  });

  it('create_lead: Sheets times out after the lead row was written; the retry makes no second lead', () => {
    const { platform, act, rows } = backOffice();
    platform.calls.failAfter((name, tab) => name === 'Range.setValues' && tab === 'leads');
    expect(act('create_lead', lead())).toMatchObject(timedOut);
    const retry = act('create_lead', lead());
    expect(retry).toMatchObject({ ok: true, stage: 'New' });
    expect(rows('leads')).toHaveLength(1);
    expect(rows('leads')[0][0]).toBe(retry.lead_id);
    expect(rows('activities').map((r) => r[1])).toEqual(['Lead Created']);
  });

  it('a text whose request fails mid-way is recorded as unknown, never as unsent, and not sent again', () => {
    const { platform, act, texts } = backOffice({ twilio: true });
    platform.urlFetch.respond = () => {
      throw new Error('Timeout: https://api.twilio.com/2010-04-01/Accounts/AC1/Messages.json');
    };
    const first = act('book_slot', booking());
    expect(first).toMatchObject({ ok: true, text: expect.stringMatching(/^unknown: Timeout/) });
    expect(act('book_slot', booking())).toMatchObject({ text: first.text, replayed: true });
    expect(texts()).toHaveLength(1);
  });

  it('tabs of an earlier version (no idempotency_key or progress column) are widened on first use, their rows kept', () => {
    const { platform, act, rows } = backOffice();
    const activities = platform.spreadsheet.tab('activities')!;
    const idempotency = platform.spreadsheet.tab('idempotency')!;
    activities.deleteColumns(7, 1);
    idempotency.deleteColumns(5, 1);
    idempotency.loadRows(2, [
      ['key-old-00001', 'create_lead', '{"ok":true,"action":"create_lead","lead_id":"lead-old","stage":"New"}', '2026-11-01T00:00:00.000Z'],
    ]);
    expect(act('book_slot', booking())).toMatchObject({ ok: true, booking_id: 'evt-1@google.com' });
    expect(activities.data[0].at(-1)).toBe('idempotency_key');
    expect(rows('activities')[0].at(-1)).toBe('key-book-0001');
    expect(act('create_lead', lead('key-old-00001'))).toEqual({
      ok: true,
      action: 'create_lead',
      lead_id: 'lead-old',
      stage: 'New',
      replayed: true,
    });
  });
});

// The idempotency tab's `result` and `progress` cells edited by hand (or cut short) into something
// the meter cannot read, on the built bundle: an unreadable result is picked up from the progress;
// an unreadable progress is refused as record_unreadable naming the cell, and a text is never sent twice.
import { describe, expect, it } from 'vitest';
import { backOffice, booking, lead } from './backoffice-setup';

const RESULT = 2;
const PROGRESS = 4;

function bookedOnce() {
  const office = backOffice({ twilio: true });
  const first = office.act('book_slot', booking());
  const record = office.platform.spreadsheet.tab('idempotency')!.data[1];
  return { ...office, first, record };
}

describe('an idempotency record edited into something unreadable', () => {
  it('a result cut short: the retry picks up from the progress, sends no second text, answers the first result and repairs the cell', () => {
    const { act, texts, rows, first, record } = bookedOnce();
    const kept = String(record[RESULT]);
    record[RESULT] = kept.slice(0, 30);
    expect(act('book_slot', booking())).toEqual({ ...first, replayed: false });
    expect(texts()).toHaveLength(1);
    expect(rows('activities')).toHaveLength(1);
    expect(JSON.parse(String(record[RESULT]))).toEqual(JSON.parse(kept));
    expect(act('book_slot', booking())).toEqual({ ...first, replayed: true });
  });

  it.each([
    ['cut short', '{"booking_id":"evt-1@google.com","text":"se', /not valid JSON/],
    ['a number typed over it', 42, /found a number, not text/],
    ['JSON that is no object', '["sent"]', /valid JSON but not an object/],
    ['a step that is not text', '{"booking_id":"evt-1@google.com","text":true}', /step "text" is not text/],
  ])('a progress %s (the result unreadable too): refused as record_unreadable naming the cell; nothing is redone', (_, cell, why) => {
    const { platform, act, texts, rows, record } = bookedOnce();
    record[RESULT] = '{"ok":true,"act';
    record[PROGRESS] = cell;
    const reply = act('book_slot', booking());
    expect(reply).toMatchObject({ ok: false, code: 'record_unreadable' });
    expect(reply.error).toMatch(/^idempotency tab, row 2 \(key key-book-0001\), column progress: expected a JSON object, /);
    expect(reply.error).toMatch(why);
    expect(texts()).toHaveLength(1);
    expect(platform.calendar.live()).toHaveLength(1);
    expect(rows('activities')).toHaveLength(1);
    expect(record[PROGRESS]).toBe(cell); // left for the operator to fix
    // The operator writes what was done: the action is finished from there, the text not sent again.
    record[PROGRESS] = '{"booking_id":"evt-1@google.com","text":"sent"}';
    expect(act('book_slot', booking())).toMatchObject({ ok: true, booking_id: 'evt-1@google.com', text: 'sent', replayed: false });
    expect(texts()).toHaveLength(1);
  });

  it('an unreadable result of a row with no progress (an older version): refused naming the result cell', () => {
    const office = backOffice();
    office.act('create_lead', lead());
    const row = office.platform.spreadsheet.tab('idempotency')!.data[1];
    row[RESULT] = '{"ok":true';
    row[PROGRESS] = '';
    const reply = office.act('create_lead', lead());
    expect(reply).toMatchObject({ ok: false, code: 'record_unreadable' });
    expect(reply.error).toMatch(/^idempotency tab, row 2 \(key key-lead-0001\), column result: expected a JSON object, not valid JSON/);
    expect(office.rows('leads')).toHaveLength(1);
  });

  it('a progress broken by hand while an attempt sends the text: that attempt refuses, saying what it had done; no second text', () => {
    const { platform, act, texts } = backOffice({ twilio: true });
    platform.urlFetch.meanwhile = (req) => {
      if (req.url.includes('/Messages.json')) platform.spreadsheet.tab('idempotency')!.data[1][PROGRESS] = '{"booking_id":';
    };
    const reply = act('book_slot', booking());
    expect(reply).toMatchObject({ ok: false, code: 'record_unreadable' });
    expect(reply.error).toContain('column progress');
    expect(reply.error).toContain('This attempt had done: {"booking_id":"evt-1@google.com","text":"sent"}');
    expect(texts()).toHaveLength(1);
    expect(act('book_slot', booking())).toMatchObject({ ok: false, code: 'record_unreadable' });
    expect(texts()).toHaveLength(1);
  });
});

// A slot that overlaps another event in the booking calendar is refused, on the built bundle:
// two callers asking for the same time must not both be told they have it.
import { describe, expect, it } from 'vitest';
import { isPermanentRefusal } from '../../schema/meter-reply';
import { backOffice, booking } from './backoffice-setup';

const other = (key: string, time = '10:30', phone = '+351960000000') => {
  const b = booking(key);
  return { ...b, call_id: 'call-9', args: { ...b.args, name: 'Rita', phone, time } };
};

describe('a slot already taken', () => {
  it('book_slot: a second caller for an overlapping time is refused before anything is written; the model is told to offer another time', () => {
    const { platform, act, rows, texts } = backOffice({ twilio: true });
    expect(act('book_slot', booking())).toMatchObject({ ok: true });
    const before = { contacts: rows('contacts').length, activities: rows('activities').length, texts: texts().length };
    const refused = act('book_slot', other('key-book-0002', '11:00')); // 10:30-11:30 is booked; 11:00 overlaps it
    expect(refused).toEqual({
      ok: false,
      code: 'invalid_argument',
      error:
        'args.time: 2027-07-01 11:00 is taken in Europe/Lisbon (another event from 10:30 to 11:30): offer the caller another time and book that',
    });
    expect(isPermanentRefusal(refused.code)).toBe(true); // the gateway passes it to the model at once, not retried
    expect(platform.calendar.live()).toHaveLength(1);
    expect({ contacts: rows('contacts').length, activities: rows('activities').length, texts: texts().length }).toEqual(before);
    // The slot that follows is free: back to back is no overlap.
    expect(act('book_slot', other('key-book-0003', '11:30'))).toMatchObject({ ok: true });
    expect(platform.calendar.live()).toHaveLength(2);
  });

  it('book_slot: an event the business put in the calendar by hand takes the slot too', () => {
    const { platform, act } = backOffice();
    platform.calendar.createEvent('Closed for training', new Date('2027-07-01T09:00:00Z'), new Date('2027-07-01T12:00:00Z'));
    expect(act('book_slot', booking())).toMatchObject({ ok: false, code: 'invalid_argument' });
    expect(platform.calendar.live()).toHaveLength(1);
  });

  it("book_slot: a retry of the key that booked gets its booking, never 'taken' by its own event", () => {
    const { platform, act } = backOffice();
    const first = act('book_slot', booking());
    platform.spreadsheet.tab('idempotency')!.data[1][2] = ''; // the result was lost: the retry picks up from the progress
    expect(act('book_slot', booking())).toMatchObject({ ok: true, booking_id: first.booking_id });
    expect(act('book_slot', booking())).toMatchObject({ ok: true, booking_id: first.booking_id, replayed: true });
    expect(platform.calendar.live()).toHaveLength(1);
  });

  it('book_slot: a second caller asking while the first booking is being made is refused; one booking stands', () => {
    const { platform, act } = backOffice();
    let during: unknown;
    platform.calls.observe((name) => {
      if (name === 'Calendar.createEvent' && during === undefined) {
        during = null;
        during = act('book_slot', other('key-book-0002'));
      }
    });
    expect(act('book_slot', booking())).toMatchObject({ ok: true });
    expect(during).toMatchObject({ ok: false, code: 'invalid_argument' });
    expect(platform.calendar.live()).toHaveLength(1);
    expect(platform.outboundUnderLock).toEqual([]);
  });

  it('reschedule_slot: a move onto another booking is refused, the booking left where it was; a move within its own slot is fine', () => {
    const { platform, act } = backOffice();
    const mine = act('book_slot', booking());
    act('book_slot', other('key-book-0002', '14:00'));
    const move = (key: string, time: string) =>
      act('reschedule_slot', {
        call_id: 'call-2',
        idempotency_key: key,
        args: { booking_id: mine.booking_id, new_date: '2027-07-01', new_time: time },
      });
    expect(move('key-move-0001', '13:30')).toMatchObject({
      ok: false,
      code: 'invalid_argument',
      error: expect.stringContaining('args.new_time: 2027-07-01 13:30 is taken in Europe/Lisbon'),
    });
    expect(platform.calendar.getEventById(mine.booking_id as string)!.start.toISOString()).toBe('2027-07-01T09:30:00.000Z');
    expect(move('key-move-0002', '11:00')).toMatchObject({ ok: true, start: '2027-07-01T10:00:00.000Z' }); // overlaps only itself
  });
});

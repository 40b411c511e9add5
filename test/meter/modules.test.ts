// The meter's modules on their own (TypeScript source, services passed in), and the fakes'
// fidelity to the real services where the meter relies on it.
import { describe, expect, it } from 'vitest';
import { findStoredIds, appendRows, eventToRow } from '../../apps-script/src/events-sheet';
import { ingestEvents, parseEvents } from '../../apps-script/src/ingest';
import { setup } from '../../apps-script/src/setup';
import { spendTotals } from '../../apps-script/src/spend';
import { constantTimeEqual, requestToken } from '../../apps-script/src/auth';
import { CSV_HEADER, EVENT_FIELDS, eventToCsvLine, normalizeEvent, parseRfc3339 } from '../../schema/event-record';
import { FakePlatform } from './fakes/platform';
import { FakeSpreadsheet } from './fakes/spreadsheet';

const opts = { now: () => new Date('2026-11-22T10:00:00Z'), uuid: () => '00000000-0000-4000-8000-000000000000' };

describe('event record', () => {
  it('has the 19 fields of the event record in their fixed order', () => {
    expect(CSV_HEADER).toBe(
      'event_id,timestamp,actor_type,provider,model,region,input_tokens,output_tokens,latency_ms,cost_usd,eval_score,confidence,job_id,customer_id,pii_flag,review_required,reviewer_id,decision,error_code',
    );
  });

  it('parses RFC 3339 strictly, offsets included', () => {
    expect(parseRfc3339('2026-11-22T12:00:00+02:00')?.toISOString()).toBe('2026-11-22T10:00:00.000Z');
    expect(parseRfc3339('2026-02-30T00:00:00Z')).toBeNull();
    expect(parseRfc3339('2026-11-22')).toBeNull();
    expect(parseRfc3339('2026-11-22T25:00:00Z')).toBeNull();
  });

  it('coerces numbers, refuses what does not coerce, and treats booleans strictly', () => {
    const e = normalizeEvent({ input_tokens: ' 42 ', cost_usd: '1e-3', confidence: 0.5, pii_flag: 'true', review_required: true }, opts);
    expect([e.input_tokens, e.cost_usd, e.confidence, e.pii_flag, e.review_required]).toEqual([42, 0.001, 0.5, false, true]);
    expect(() => normalizeEvent({ latency_ms: true }, opts)).toThrow('latency_ms: expected a whole number >= 0');
    expect(() => normalizeEvent({ cost_usd: 'Infinity' }, opts)).toThrow('cost_usd: expected a number >= 0');
    expect(() => normalizeEvent({ customer_id: { a: 1 } }, opts)).toThrow('customer_id: expected a string');
    expect(() => normalizeEvent({ model: 'x'.repeat(1001) }, opts)).toThrow(/model: expected text of at most 1000/);
    expect(() => normalizeEvent({ event_id: 'a b' }, opts)).toThrow(/^event_id: expected/);
    expect(() => normalizeEvent([], { ...opts, index: 3 })).toThrow('events[3].event: expected a JSON object');
  });

  it('writes CSV lines in header order with RFC 3339 timestamps and quoting', () => {
    const e = normalizeEvent({ event_id: 'e1', customer_id: 'a,"b"', cost_usd: 0.5 }, opts);
    const line = eventToCsvLine(e);
    expect(line.split(',')[0]).toBe('e1');
    expect(line).toContain(',2026-11-22T10:00:00.000Z,');
    expect(line).toContain(',"a,""b""",');
    expect(line.endsWith(',n/a,')).toBe(true);
  });
});

describe('auth', () => {
  it('compares tokens exactly and prefers the query token', () => {
    expect(constantTimeEqual('abc', 'abc')).toBe(true);
    expect(constantTimeEqual('abc', 'abd')).toBe(false);
    expect(constantTimeEqual('abc', 'abcd')).toBe(false);
    expect(constantTimeEqual('', 'a')).toBe(false);
    expect(requestToken({ token: 'q' }, { token: 'b' })).toBe('q');
    expect(requestToken({}, { token: 'b' })).toBe('b');
    expect(requestToken(undefined, [1])).toBe('');
  });
});

describe('modules with the fakes', () => {
  it('ingest writes through the services it is given', () => {
    const platform = new FakePlatform();
    const svc = platform.services();
    setup(svc);
    const events = parseEvents({ events: [{ event_id: 'a' }, { event_id: 'b' }] }, svc);
    expect(ingestEvents(svc, events)).toEqual({ ok: true, appended: 2, duplicates: 0 });
    expect(ingestEvents(svc, events)).toEqual({ ok: true, appended: 0, duplicates: 2 });
  });

  it('finds stored ids with a bounded number of calls however large the sheet', () => {
    const platform = new FakePlatform();
    const svc = platform.services();
    setup(svc);
    const sheet = platform.spreadsheet.tab('events')!;
    sheet.loadRows(
      2,
      Array.from({ length: 20_000 }, (_, i) => [`id-${i}`, ...Array(18).fill('')]),
    );
    platform.calls.reset();
    const found = findStoredIds(sheet, ['id-5', 'id-19999', 'nope']);
    expect([...found].sort()).toEqual(['id-19999', 'id-5']);
    expect(platform.calls.total).toBeLessThanOrEqual(10);
  });

  it('sums spend by UTC day', () => {
    const now = Date.parse('2026-11-22T05:00:00Z');
    const t = (iso: string) => new Date(iso);
    expect(
      spendTotals(
        [
          [t('2026-11-22T00:00:00Z'), 1],
          [t('2026-11-21T23:00:00Z'), 2],
          ['', 5],
          [t('2026-11-15T12:00:00Z'), 4],
        ],
        now,
      ),
    ).toEqual({
      today: 1,
      last7d: 3,
    });
  });
});

describe('fakes behave like Apps Script', () => {
  const sheet = () => new FakeSpreadsheet().insertSheet('s');

  it('ranges are 1-based and bounded by the sheet', () => {
    const s = sheet();
    expect(() => s.getRange(0, 1)).toThrow(/outside the dimensions/);
    expect(() => s.getRange(1001, 1)).toThrow(/outside the dimensions/);
    expect(() => s.getRange(1, 1, 0, 1)).toThrow(/at least 1/);
    s.getRange(1, 1).setValues([['x']]);
    expect(s.getRange(1, 1, 1, 2).getValues()).toEqual([['x', '']]);
  });

  it('setValues must match the range dimensions', () => {
    const s = sheet();
    expect(() => s.getRange(1, 1, 2, 2).setValues([[1, 2]])).toThrow(/number of rows/);
    expect(() => s.getRange(1, 1, 1, 2).setValues([[1]])).toThrow(/number of columns/);
  });

  it('reads typed values back by type, the way Sheets parses written text', () => {
    const s = sheet();
    s.getRange(1, 1, 1, 6).setValues([['12', 'true', "'12", 3.5, new Date('2026-01-01T00:00:00Z'), '=1+1']]);
    const [row] = s.getRange(1, 1, 1, 6).getValues();
    expect(row.slice(0, 4)).toEqual([12, true, '12', 3.5]);
    expect(row[4]).toBeInstanceOf(Date);
    expect(s.getRange(1, 6).getFormulas()).toEqual([['=1+1']]);
  });

  it('holds the 10 million cell limit', () => {
    const s = sheet();
    expect(() => s.insertRowsAfter(1000, 400_000)).toThrow(/above the limit of 10000000 cells/);
  });

  it('appendRows writes one batch and grows the sheet', () => {
    const ss = new FakeSpreadsheet();
    const s = ss.insertSheet('events');
    s.deleteColumns(20, 7);
    const row = eventToRow(normalizeEvent({}, opts));
    expect(row).toHaveLength(EVENT_FIELDS.length);
    appendRows(
      ss,
      s,
      Array.from({ length: 1500 }, () => row),
    );
    expect(s.maxRows).toBe(2500); // 1500 rows (no header in this bare sheet) + 1000 rows of headroom
  });
});

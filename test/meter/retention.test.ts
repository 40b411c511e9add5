// Retention (applyRetention): the built bundle in node:vm, with a clock the tests control.
// One describe per feature: long because each behaviour is a short test of its own.
import { describe, expect, it } from 'vitest';
import { Formula } from './fakes/cells';
import { callJson } from './fakes/platform';
import { SECRET, dataRows, eventsTab, freshMeter, post, setConfig } from './maintenance-setup';

describe('applyRetention', () => {
  function seeded() {
    const { platform, meter } = freshMeter('2026-11-22T02:00:00Z');
    // Mixed order: old and recent rows interleaved, text that looks like numbers.
    const events = Array.from({ length: 60 }, (_, i) => ({
      event_id: `e${i}`,
      timestamp: i % 3 === 0 ? '2026-10-01T00:00:00Z' : '2026-11-20T00:00:00Z',
      job_id: `00${i}`,
      cost_usd: 0.01,
    }));
    post(meter, { events });
    return { platform, meter };
  }

  it('deletes nothing before the first export, and says why', () => {
    const { platform, meter } = seeded();
    expect(meter.applyRetention()).toMatch(/nothing deleted: no archive export has run yet; 20 old row/);
    expect(dataRows(eventsTab(platform))).toHaveLength(60);
  });

  it('deletes exported rows older than 30 days in one batch, keeping the rest intact and in order', () => {
    const { platform, meter } = seeded();
    meter.exportArchive();
    platform.calls.reset();
    expect(meter.applyRetention()).toMatch(/deleted 20 row\(s\) older than 2026-10-23T00:00:00.000Z/);
    expect(platform.calls.get('Range.setValues')).toBe(1);
    expect(platform.calls.get('Sheet.deleteRows')).toBe(1);
    expect(platform.calls.get('Range.getValues')).toBeLessThanOrEqual(2);
    const rows = dataRows(eventsTab(platform));
    expect(rows.map((r) => r[0])).toEqual(
      Array.from({ length: 60 }, (_, i) => i)
        .filter((i) => i % 3 !== 0)
        .map((i) => `e${i}`),
    );
    expect(rows[0][12]).toBe('001'); // text stayed text through the rewrite
    expect(rows.every((r) => r[1] instanceof Date)).toBe(true);
    // Ingest and the next export still line up with the moved rows.
    expect(meter.applyRetention()).toMatch(/no rows older/);
    post(meter, { event_id: 'new', timestamp: '2026-11-21T00:00:00Z' });
    expect(meter.exportArchive()).toMatch(/wrote 1 row/);
  });

  it("moves a column the operator keeps after the events' (notes typed by hand) with its rows; a column of formulas stays in place", () => {
    const { platform, meter } = seeded();
    const events = eventsTab(platform);
    events.insertColumnsAfter(19, 2);
    events.data[0].push('note', 'double cost');
    events.data.slice(1).forEach((r, i) => r.push(`checked ${String(r[0])}`, new Formula(`=J${i + 2}*2`)));
    expect(meter.setup()).toMatch(/columns after S hold values; left as they are/);
    meter.exportArchive();
    expect(meter.applyRetention()).toMatch(/deleted 20 row/);
    // The formulas' column is left as it is, down to the freed rows, which it keeps (their events' cells blank).
    const rows = dataRows(events);
    expect(rows.filter((r) => r[0] !== '')).toHaveLength(40);
    for (const r of rows.slice(0, 40)) expect(r[19]).toBe(`checked ${String(r[0])}`);
    for (const r of rows.slice(40)) expect(r.slice(0, 20)).toEqual(new Array(20).fill(''));
    expect(rows.map((r, i) => (r[20] as Formula).text === `=J${i + 2}*2`).every(Boolean)).toBe(true);
    expect(post(meter, { event_id: 'new', timestamp: '2026-11-21T00:00:00Z' })).toMatchObject({ appended: 1 });
    expect(dataRows(events)[40][0]).toBe('new'); // right after the kept rows: no blank rows left between
  });

  // Cells an array formula fills hold values and no formula: written back as values (moved with
  // the rows), they stop the array formula in Sheets ("would overwrite data", #REF!).
  it('leaves a column an array formula fills (its formula in the header) as it is, and every column after it', () => {
    const { platform, meter } = seeded();
    const events = eventsTab(platform);
    events.insertColumnsAfter(19, 2);
    events.data[0].push(new Formula('={"double cost";ARRAYFORMULA(J2:J*2)}'), 'note');
    events.data.slice(1).forEach((r, i) => r.push(i * 2, `checked ${String(r[0])}`));
    meter.setup();
    meter.exportArchive();
    const notes = dataRows(events).map((r) => r[20]);
    expect(meter.applyRetention()).toMatch(/deleted 20 row/);
    const rows = dataRows(events);
    expect(rows.map((r) => r[19])).toEqual(Array.from({ length: 60 }, (_, i) => i * 2)); // not one written over
    expect(rows.map((r) => r[20])).toEqual(notes);
  });

  it('keeps old rows the export has not taken yet', () => {
    const { platform, meter } = seeded();
    meter.exportArchive();
    post(meter, { event_id: 'late-old', timestamp: '2026-09-01T00:00:00Z' });
    expect(meter.applyRetention()).toMatch(/deleted 20 row.*kept 1 old row\(s\) the archive export has not taken yet/);
    expect(dataRows(eventsTab(platform)).map((r) => r[0])).toContain('late-old');
    meter.exportArchive();
    expect(meter.applyRetention()).toMatch(/deleted 1 row/);
  });

  it('deletes nothing when rows were moved by hand since the export', () => {
    const { platform, meter } = seeded();
    meter.exportArchive();
    eventsTab(platform).data.splice(1, 0, eventsTab(platform).data.pop()!); // someone sorted the tab
    expect(meter.applyRetention()).toMatch(/nothing deleted: the export watermark no longer matches/);
    expect(dataRows(eventsTab(platform))).toHaveLength(60);
  });

  it('honours RETENTION_DAYS from Config', () => {
    const { platform, meter } = seeded();
    meter.exportArchive();
    setConfig(platform, 'RETENTION_DAYS', 90);
    expect(meter.applyRetention()).toMatch(/no rows older than 2026-08-24/);
  });

  it("refuses a RETENTION_DAYS shorter than the caps' week, deleting nothing the 7-day spend still counts", () => {
    // $10 on each of 7 UTC days, exported; the next day the 7-day spend is those days but the first.
    const { platform, meter } = freshMeter('2026-11-22T02:00:00Z');
    const days = Array.from({ length: 7 }, (_, i) => `2026-11-${String(15 + i)}`);
    post(meter, { events: days.map((d) => ({ event_id: d, timestamp: `${d}T12:00:00Z`, cost_usd: 10 })) });
    meter.exportArchive();
    platform.clock.set('2026-11-22T03:00:00Z');
    const spend = () => callJson(meter, 'doGet', { action: 'spend', token: SECRET }) as { last_7d_cost_usd: number };
    expect(spend().last_7d_cost_usd).toBe(60);
    for (const short of [5, 6]) {
      setConfig(platform, 'RETENTION_DAYS', short);
      expect(() => meter.applyRetention()).toThrow(`Config RETENTION_DAYS must be a whole number from 7 to 36500, found "${short}"`);
      expect(dataRows(eventsTab(platform))).toHaveLength(7);
    }
    expect(spend().last_7d_cost_usd).toBe(60);
    // At the shortest window, only the day the week no longer counts goes.
    setConfig(platform, 'RETENTION_DAYS', 7);
    expect(meter.applyRetention()).toMatch(/no rows older than 2026-11-15T00:00:00.000Z/);
    expect(spend().last_7d_cost_usd).toBe(60);
    platform.clock.set('2026-11-23T03:00:00Z');
    expect(meter.applyRetention()).toMatch(/deleted 1 row\(s\) older than 2026-11-16T00:00:00.000Z/);
    expect(dataRows(eventsTab(platform))).toHaveLength(6);
  });

  it('works at 100k rows with the same handful of service calls', () => {
    const { platform, meter } = freshMeter('2026-11-22T02:00:00Z');
    const base = Date.parse('2026-11-21T00:00:00Z');
    eventsTab(platform).loadRows(
      2,
      Array.from({ length: 100_000 }, (_, i) => [
        `r${i}`,
        new Date(base - (i % 60) * 86_400_000),
        'agent',
        'p',
        'm',
        'n/a',
        1,
        1,
        1,
        0.001,
        '',
        '',
        '',
        '',
        false,
        false,
        '',
        'n/a',
        '',
      ]),
    );
    meter.exportArchive();
    platform.calls.reset();
    const old = Array.from({ length: 100_000 }, (_, i) => i % 60).filter((k) => k >= 30).length; // 2026-10-22 and before
    expect(meter.applyRetention()).toMatch(new RegExp(`deleted ${old} row`));
    expect(platform.calls.total).toBeLessThan(30); // with the idempotency tab's pruning
    expect(dataRows(eventsTab(platform))).toHaveLength(100_000 - old);
  });

  it('does not run while the lock is held', () => {
    const { platform, meter } = seeded();
    meter.exportArchive();
    platform.lock.busy = true;
    expect(() => meter.applyRetention()).toThrow(/meter busy/);
    expect(dataRows(eventsTab(platform))).toHaveLength(60);
  });
});

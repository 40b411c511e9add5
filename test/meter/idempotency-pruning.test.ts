// The hidden idempotency tab, one row per back-office action, pruned by the daily retention run:
// keys older than any retry could come (the events' window, at least 30 days) are dropped, recent
// ones answer their replay as before, and a run cut off half-way is finished by the next one.
import { describe, expect, it } from 'vitest';
import { SHEETS_CALL } from './fakes/calls';
import { backOffice, booking, lead } from './backoffice-setup';

const keys = (platform: ReturnType<typeof backOffice>['platform']) =>
  platform.spreadsheet
    .tab('idempotency')!
    .data.slice(1)
    .map((r) => r[0]);

/** Three keys 35, 34 and 10 days before the retention run (2026-12-27 03:00 UTC). */
function monthOfActions() {
  const office = backOffice();
  office.platform.clock.set('2026-11-22T12:00:00Z');
  office.act('book_slot', booking('key-book-0001'));
  office.platform.clock.set('2026-11-23T12:00:00Z');
  office.act('create_lead', lead('key-lead-0001'));
  office.platform.clock.set('2026-12-17T12:00:00Z');
  const recent = office.act('create_lead', { ...lead('key-lead-0002'), call_id: 'call-9' });
  office.platform.clock.set('2026-12-27T03:00:00Z');
  return { ...office, recent };
}

describe('applyRetention and the idempotency tab', () => {
  it('drops the keys older than 30 days, keeps the recent one (its replay answers as before) and every lead and activity', () => {
    const { platform, meter, act, rows, recent } = monthOfActions();
    const tab = platform.spreadsheet.tab('idempotency')!;
    const gridBefore = tab.maxRows;
    expect(meter.applyRetention()).toMatch(/removed 2 idempotency record\(s\) older than 2026-11-27T00:00:00\.000Z/);
    expect(keys(platform)).toEqual(['key-lead-0002']);
    expect(tab.maxRows).toBe(gridBefore - 2);
    expect(act('create_lead', { ...lead('key-lead-0002'), call_id: 'call-9' })).toEqual({ ...recent, replayed: true });
    expect(rows('leads')).toHaveLength(2);
    expect(rows('activities')).toHaveLength(3);
    expect(meter.applyRetention()).not.toMatch(/idempotency/);
    expect(keys(platform)).toEqual(['key-lead-0002']);
  });

  it('keeps the keys as long as the events when RETENTION_DAYS is longer', () => {
    const { platform, meter } = monthOfActions();
    platform.spreadsheet.tab('Config')!.data.find((r) => r[0] === 'RETENTION_DAYS')![1] = 90;
    meter.applyRetention();
    expect(keys(platform)).toEqual(['key-book-0001', 'key-lead-0001', 'key-lead-0002']);
  });

  it("still drops the old keys when RETENTION_DAYS is a window shorter than the caps' week, refused (a value earlier versions took)", () => {
    const { platform, meter } = monthOfActions();
    platform.spreadsheet.tab('Config')!.data.find((r) => r[0] === 'RETENTION_DAYS')![1] = 5;
    expect(() => meter.applyRetention()).toThrow('Config RETENTION_DAYS must be a whole number from 7 to 36500, found "5"');
    expect(keys(platform)).toEqual(['key-lead-0002']);
  });

  it('with RETENTION_DAYS under 7 and the script lock busy, the run still raises the RETENTION_DAYS refusal to fix, and logs that no key was pruned', () => {
    const { platform, meter } = monthOfActions();
    platform.spreadsheet.tab('Config')!.data.find((r) => r[0] === 'RETENTION_DAYS')![1] = 5;
    platform.lock.busy = true; // another execution holds the lock past the run's wait
    expect(() => meter.applyRetention()).toThrow('Config RETENTION_DAYS must be a whole number from 7 to 36500, found "5"');
    expect(platform.logs.at(-1)).toMatch(
      /^applyRetention: no events deleted: Config RETENTION_DAYS .*; the idempotency records were not pruned either: /,
    );
    platform.lock.busy = false;
    expect(() => meter.applyRetention()).toThrow('Config RETENTION_DAYS');
    expect(keys(platform)).toEqual(['key-lead-0002']);
  });

  it.each([
    ['with spare rows', false],
    ['with no spare row (near the cell limit)', true],
  ])('every key old, %s: the tab keeps its header and one empty row, and the next action is recorded', (_, exact) => {
    const { platform, meter, act } = monthOfActions();
    const tab = platform.spreadsheet.tab('idempotency')!;
    if (exact) tab.maxRows = tab.data.length;
    const gridBefore = tab.maxRows;
    platform.clock.set('2027-03-01T03:00:00Z');
    expect(meter.applyRetention()).toMatch(/removed 3 idempotency record/);
    expect(keys(platform)).toEqual([]);
    expect(tab.maxRows).toBe(exact ? 2 : gridBefore - 3);
    expect(act('create_lead', lead('key-lead-0003'))).toMatchObject({ ok: true, replayed: false });
    expect(keys(platform)).toEqual(['key-lead-0003']);
  });

  // How many Sheets calls a clean run makes: the failure is injected after each of them in turn.
  const clean = monthOfActions();
  const before = clean.platform.calls.total;
  clean.meter.applyRetention();
  const steps = clean.platform.calls.total - before;

  it.each(Array.from({ length: steps }, (_, i) => i + 1))('cut off after call %i: the next run finishes, the recent key kept', (step) => {
    const { platform, meter } = monthOfActions();
    let n = 0;
    let inRun = true;
    platform.calls.failAfter(
      () => inRun && ++n === step,
      (name) => inRun && SHEETS_CALL(name),
    );
    try {
      meter.applyRetention();
    } catch {
      // a Sheets call timed out: the next run goes on
    }
    inRun = false;
    expect(keys(platform)).toContain('key-lead-0002');
    meter.applyRetention();
    expect(keys(platform)).toEqual(['key-lead-0002']);
  });
});

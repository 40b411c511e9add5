// Retention interrupted half-way (a Sheets or Properties call that times out), then run again:
// the retry finishes the job, and no state in between counts a row twice.
import { describe, expect, it } from 'vitest';
import { SHEETS_CALL } from './fakes/calls';
import { callJson } from './fakes/platform';
import { SECRET, dataRows, eventsTab, freshMeter, post } from './maintenance-setup';

const OLD = '2026-10-01T00:00:00Z';
const RECENT = '2026-11-20T00:00:00Z';

/** Exported rows in this order (o = older than the window, n = recent), then two the export has not taken. */
function seeded(layout: string) {
  const { platform, meter } = freshMeter('2026-11-22T02:00:00Z');
  const events = [...layout].map((kind, i) => ({ event_id: `${kind}${i}`, timestamp: kind === 'o' ? OLD : RECENT, cost_usd: 1 }));
  post(meter, { events });
  meter.exportArchive();
  post(meter, {
    events: [
      { event_id: 'late-old', timestamp: '2026-09-01T00:00:00Z', cost_usd: 1 },
      { event_id: 'today', timestamp: '2026-11-22T01:00:00Z', cost_usd: 1 },
    ],
  });
  platform.clock.set('2026-11-22T03:00:00Z');
  const kept = [...events.filter((e) => e.timestamp === RECENT).map((e) => e.event_id), 'late-old', 'today'];
  const spend = () => (callJson(meter, 'doGet', { token: SECRET, action: 'spend' }) as { last_7d_cost_usd: number }).last_7d_cost_usd;
  const ids = () => dataRows(eventsTab(platform)).map((r) => r[0]);
  return { platform, meter, kept, spend, ids, recent: kept.length - 1 };
}

const retriable = (name: string) => SHEETS_CALL(name) || name.startsWith('Properties.');

describe.each([
  ['the watermark row is deleted', 'onoonoo'],
  ['the watermark row is kept', 'oonoonn'],
])('applyRetention interrupted after any step (%s)', (_, layout) => {
  // How many service calls a clean run makes: the failure is injected after each of them in turn.
  const clean = seeded(layout);
  const before = clean.platform.calls.total;
  clean.meter.applyRetention();
  const steps = clean.platform.calls.total - before;
  const journalLeft = (platform: typeof clean.platform) => platform.properties.getProperty('RETENTION_IN_PROGRESS');

  it('a clean run deletes the old exported rows and keeps the rest once, in order', () => {
    expect(clean.ids()).toEqual(clean.kept);
    expect(clean.spend()).toBe(clean.recent);
    expect(journalLeft(clean.platform)).toBeNull();
  });

  it.each(Array.from({ length: steps }, (__, i) => i + 1))('fails after call %i: no double count, and a retry finishes the job', (step) => {
    const { platform, meter, kept, spend, ids, recent } = seeded(layout);
    let n = 0;
    let inRun = true; // the fault belongs to this run only: it never fires in a later one
    platform.calls.failAfter(
      () => inRun && ++n === step,
      (name) => inRun && retriable(name),
    );
    let failed = false;
    try {
      meter.applyRetention();
    } catch {
      failed = true;
    }
    inRun = false;
    // Whatever the step, the tab never counts a row twice.
    expect(new Set(ids()).size).toBe(ids().length);
    expect(spend()).toBe(recent);
    if (!failed) {
      // No call failed after this step (or its failure was a toast's, shown or not): the job is done.
      expect(ids()).toEqual(kept);
      expect(journalLeft(platform)).toBeNull();
      return;
    }

    expect(meter.applyRetention()).not.toMatch(/nothing deleted/);
    expect(ids()).toEqual(kept);
    expect(spend()).toBe(recent);
    expect(eventsTab(platform).maxRows).toBe(eventsTab(clean.platform).maxRows); // the freed rows were dropped, once
    expect(journalLeft(platform)).toBeNull();
    // The watermark still points at the last exported row: the next export takes exactly the two
    // rows it had not taken, and the next retention deletes the late old one.
    platform.clock.set('2026-11-23T02:00:00Z');
    expect(meter.exportArchive()).toMatch(/wrote 2 row\(s\)/);
    expect(meter.applyRetention()).toMatch(/deleted 1 row/);
    expect(ids()).toEqual(kept.filter((id) => id !== 'late-old'));
  });
});

describe('applyRetention cut off after its rewrite, then the nightly export runs before the retry', () => {
  it('the export finishes the interrupted run and takes only the rows it had not taken, not the whole tab again', () => {
    const { platform, meter, kept, spend, ids, recent } = seeded('onoonoo');
    let inRun = true;
    platform.calls.failAfter(
      (name, tab) => inRun && name === 'Range.setValues' && tab === 'events',
      (name) => inRun && retriable(name),
    );
    expect(() => meter.applyRetention()).toThrow(/timed out/);
    inRun = false;
    expect(ids()).toEqual(kept);
    expect(spend()).toBe(recent);
    platform.clock.set('2026-11-23T02:00:00Z');
    const message = meter.exportArchive();
    expect(message).toMatch(/wrote 2 row\(s\)/);
    expect(message).not.toMatch(/exported from the top/);
    expect(platform.drive.folders[0].files.at(-1)!.content).not.toMatch(/^n1,/m); // exported the night before
    expect(meter.applyRetention()).toMatch(/^deleted 1 row/); // late-old, now exported
    expect(ids()).toEqual(kept.filter((id) => id !== 'late-old'));
    expect(platform.properties.getProperty('RETENTION_IN_PROGRESS')).toBeNull();
  });
});

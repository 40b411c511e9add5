// Events stamped in the future, on the built bundle: refused beyond the clock-skew allowance with
// the field and the allowance named, and never able to hold the export watermark back for good.
import { describe, expect, it } from 'vitest';
import { EVENT_FIELDS } from '../../schema/event-record';
import { FakePlatform, callJson, loadBundle } from './fakes/platform';
import type { Cell } from './fakes/cells';

const SECRET = 'future-secret';

function freshMeter(at: string) {
  const platform = new FakePlatform();
  platform.clock.set(at);
  const meter = loadBundle(platform);
  meter.setup();
  platform.properties.setProperty('SECRET_TOKEN', SECRET);
  return { platform, meter, post: (body: unknown) => callJson(meter, 'doPost', { token: SECRET }, body) };
}

/** A stored row as ingest writes it (for rows that reached the sheet before the rule existed). */
function row(id: string, iso: string, cost: number): Cell[] {
  const values: Record<string, Cell> = { event_id: id, timestamp: new Date(iso), cost_usd: cost, pii_flag: false, review_required: false };
  return EVENT_FIELDS.map((f) => values[f] ?? '');
}

describe('future-dated events', () => {
  it('refuses a batch with an event stamped beyond 5 minutes ahead, naming the field and the allowance, writing nothing', () => {
    const { platform, meter, post } = freshMeter('2026-11-22T12:00:00Z');
    const reply = post({
      events: [
        { event_id: 'ok-1', timestamp: '2026-11-22T11:00:00Z', cost_usd: 1 },
        { event_id: 'poison', timestamp: '2099-01-01T00:00:00Z', cost_usd: 60 },
      ],
    });
    expect(reply).toMatchObject({ ok: false, code: 'future_timestamp' });
    expect(reply.error).toMatch(/^events\[1\]\.timestamp: expected a time at most 5 minutes after the meter's clock/);
    expect(reply.error).toContain('got 2099-01-01T00:00:00.000Z');
    expect(platform.spreadsheet.tab('events')!.data).toHaveLength(1); // the header only
    expect(callJson(meter, 'doGet', { action: 'spend', token: SECRET }).cap_exceeded).toBe(false);
  });

  it('accepts an event up to 5 minutes ahead (clock skew) and none beyond', () => {
    const { post } = freshMeter('2026-11-22T12:00:00Z');
    expect(post({ event_id: 'skewed', timestamp: '2026-11-22T12:05:00Z' })).toMatchObject({ ok: true, appended: 1 });
    expect(post({ event_id: 'too-far', timestamp: '2026-11-22T12:05:00.001Z' })).toMatchObject({ ok: false, code: 'future_timestamp' });
  });

  it('a future row already in the tab does not hold the export watermark back: each night exports only new rows', () => {
    const { platform, meter, post } = freshMeter('2026-11-21T10:00:00Z');
    post({ event_id: 'a', timestamp: '2026-11-21T09:00:00Z' });
    // A row from before the rule (or pasted by hand), then ordinary traffic after it.
    platform.spreadsheet.tab('events')!.loadRows(3, [row('from-2099', '2099-01-01T00:00:00Z', 60)]);
    post({ event_id: 'b', timestamp: '2026-11-21T09:30:00Z' });

    platform.clock.set('2026-11-22T01:00:00Z');
    expect(meter.exportArchive()).toMatch(/wrote 3 row\(s\).*watermark at row 4.*1 row\(s\) stamped more than 5 minutes in the future/);
    platform.clock.set('2026-11-22T09:00:00Z');
    expect(post({ event_id: 'c', timestamp: '2026-11-22T08:00:00Z' })).toMatchObject({ ok: true, appended: 1 });

    platform.clock.set('2026-11-23T01:00:00Z');
    expect(meter.exportArchive()).toMatch(/wrote 1 row\(s\) to events_2026-11-22\.csv; watermark at row 5/);
    const second = platform.drive.folders[0].files[1].content.trim().split('\r\n').slice(1);
    expect(second.map((l) => l.split(',')[0])).toEqual(['c']);
  });
});

// The archive export (exportArchive and doGet?action=export): the built bundle in node:vm.
import { describe, expect, it } from 'vitest';
import { CSV_HEADER } from '../../schema/event-record';
import { SHEETS_CALL } from './fakes/calls';
import { callJson, webEvent, type FakePlatform, type FakeTextOutput } from './fakes/platform';
import { SECRET, freshMeter, post } from './maintenance-setup';

function csvOf(platform: FakePlatform) {
  const folder = platform.drive.folders[0];
  return folder.files.map((f) => ({ name: f.name, lines: f.content.trim().split('\r\n') }));
}

describe('exportArchive and doGet export', () => {
  it("writes the previous day's events plus late arrivals, leaves today's for the next night", () => {
    const { platform, meter } = freshMeter('2026-11-21T15:00:00Z');
    post(meter, { events: [{ event_id: 'd1', timestamp: '2026-11-21T10:00:00Z', cost_usd: 1, pii_flag: true }] });
    platform.clock.set('2026-11-22T00:30:00Z');
    post(meter, {
      events: [
        { event_id: 'late', timestamp: '2026-11-18T08:00:00Z' },
        { event_id: 'today1', timestamp: '2026-11-22T00:20:00Z' },
      ],
    });
    post(meter, { event_id: 'd2', timestamp: '2026-11-21T23:59:00Z' }); // after a today row: exported, past the watermark
    platform.clock.set('2026-11-22T01:00:00Z');
    expect(meter.exportArchive()).toMatch(/wrote 3 row\(s\) to events_2026-11-21\.csv; watermark at row 3/);
    const [file] = csvOf(platform);
    expect(file.name).toBe('events_2026-11-21.csv');
    expect(file.lines[0]).toBe(CSV_HEADER);
    expect(file.lines.slice(1).map((l) => l.split(',')[0])).toEqual(['d1', 'late', 'd2']);
    expect(file.lines[1]).toMatch(/^d1,2026-11-21T10:00:00\.000Z,agent,unknown,unknown,n\/a,0,0,0,1,,,,,true,false,,n\/a,$/);

    platform.clock.set('2026-11-23T01:00:00Z');
    expect(meter.exportArchive()).toMatch(/wrote 2 row\(s\) to events_2026-11-22\.csv/);
    expect(
      csvOf(platform)[1]
        .lines.slice(1)
        .map((l) => l.split(',')[0]),
    ).toEqual(['today1', 'd2']);
    expect(meter.exportArchive()).toMatch(/no rows to export/);
  });

  it('doGet?action=export serves the CSV of events on or after a UTC day', () => {
    const { meter } = freshMeter();
    post(meter, {
      events: [
        { event_id: 'a', timestamp: '2026-11-19T23:59:59Z' },
        { event_id: 'b', timestamp: '2026-11-20T00:00:00Z', customer_id: 'x,y' },
      ],
    });
    const out = meter.doGet(webEvent({ token: SECRET, action: 'export', since: '2026-11-20' })) as FakeTextOutput;
    expect(out.getMimeType()).toBe('CSV');
    const lines = out.getContent().trim().split('\r\n');
    expect(lines[0]).toBe(CSV_HEADER);
    expect(lines.slice(1).map((l) => l.split(',')[0])).toEqual(['b']);
    expect(lines[1]).toContain('"x,y"');
    expect(callJson(meter, 'doGet', { token: SECRET, action: 'export', since: '20-11-2026' }).error).toMatch(/^since: expected a UTC day/);
    expect(callJson(meter, 'doGet', { token: 'no', action: 'export', since: '2026-11-20' })).toEqual({
      ok: false,
      error: 'unauthorized',
      code: 'unauthorized',
    });
  });

  it('an export cut off after its file was written is finished by the next run: no second file of the same rows', () => {
    const { platform, meter } = freshMeter('2026-11-21T15:00:00Z');
    post(meter, { events: [{ event_id: 'd1', timestamp: '2026-11-21T10:00:00Z' }] });
    platform.clock.set('2026-11-22T01:00:00Z');
    // Drive took the file; the watermark's move then timed out (Sheets or Properties).
    platform.calls.failAfter(
      (name) => name === 'Folder.createFile',
      (name) => SHEETS_CALL(name) || name.startsWith('Properties.'),
    );
    expect(() => meter.exportArchive()).toThrow(/timed out/);
    expect(meter.exportArchive()).toMatch(/finished the previous run.*no rows to export; watermark at row 2/);
    expect(csvOf(platform).map((f) => f.name)).toEqual(['events_2026-11-21.csv']);
    post(meter, { event_id: 'd2', timestamp: '2026-11-21T23:00:00Z' });
    expect(meter.exportArchive()).toMatch(/wrote 1 row\(s\) to events_2026-11-21_2\.csv; watermark at row 3/);
    expect(
      csvOf(platform)[1]
        .lines.slice(1)
        .map((l) => l.split(',')[0]),
    ).toEqual(['d2']);
  });
});

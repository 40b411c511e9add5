// The archive export (exportArchive and doGet?action=export): the built bundle in node:vm.
import { describe, expect, it } from 'vitest';
import { CSV_HEADER } from '../../schema/event-record';
import { SHEETS_CALL, SHEETS_TIMEOUT } from './fakes/calls';
import { FakeFolder } from './fakes/outbound';
import { callJson, webEvent, type FakePlatform, type FakeTextOutput } from './fakes/platform';
import { SECRET, dataRows, eventsTab, freshMeter, post } from './maintenance-setup';
import { EVENT_FIELDS } from '../../schema/event-record';

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

  it("a night without events still writes the day's file, the header alone, once: a retry cut off half-way writes no second one", () => {
    const { platform, meter } = freshMeter('2026-11-21T15:00:00Z');
    post(meter, { events: [{ event_id: 'd1', timestamp: '2026-11-21T10:00:00Z' }] });
    platform.clock.set('2026-11-22T01:00:00Z');
    expect(meter.exportArchive()).toMatch(/wrote 1 row\(s\) to events_2026-11-21\.csv/);
    // Saturday: no events. Drive takes the file, then the watermark's move times out; the retry finishes.
    platform.clock.set('2026-11-23T01:00:00Z');
    platform.calls.failAfter(
      (name) => name === 'Folder.createFile',
      (name) => SHEETS_CALL(name) || name.startsWith('Properties.'),
    );
    expect(() => meter.exportArchive()).toThrow(/timed out/);
    expect(meter.exportArchive()).toMatch(/finished the previous run.*no rows to export; watermark at row 2/);
    expect(meter.exportArchive()).toMatch(/^no rows to export; watermark at row 2$/);
    // Sunday, quiet too: its file on the first run.
    platform.clock.set('2026-11-24T01:00:00Z');
    expect(meter.exportArchive()).toMatch(
      /^no rows to export \(events_2026-11-23\.csv written with the header only\); watermark at row 2$/,
    );
    expect(csvOf(platform)).toEqual([
      { name: 'events_2026-11-21.csv', lines: [CSV_HEADER, expect.stringMatching(/^d1,/)] },
      { name: 'events_2026-11-22.csv', lines: [CSV_HEADER] },
      { name: 'events_2026-11-23.csv', lines: [CSV_HEADER] },
    ]);
  });

  it('a backlog past what Apps Script can put in one file (50 MB) is written as several files, each row once, the watermark at the end', () => {
    const { platform, meter } = freshMeter('2026-11-22T12:00:00Z');
    // A full events tab's first export: long texts (128 characters, the record's limit) make each row about 1.1 KB, 88 MB in all.
    const long = (what: string, i: number) => `${what}-${i}-`.padEnd(128, 'x');
    const rows = Array.from({ length: 80_000 }, (_, i) => [
      long('ev', i),
      new Date('2026-11-21T10:00:00Z'),
      'agent',
      long('provider', i % 3),
      long('model', i % 7),
      long('region', i % 5),
      100,
      20,
      300,
      0.001,
      '',
      '',
      long('job', i),
      long('customer', i),
      false,
      false,
      long('reviewer', i),
      'n/a',
      long('error', i % 11),
    ]);
    const events = eventsTab(platform);
    events.loadRows(2, rows);
    platform.clock.set('2026-11-22T13:00:00Z');
    // Drive slow: each file takes 2.5 minutes, so the run stops after its second (Apps Script ends a run at 6).
    const createFile = FakeFolder.prototype.createFile;
    FakeFolder.prototype.createFile = function (this: FakeFolder, ...args: Parameters<typeof createFile>) {
      platform.clock.advance(150_000);
      return createFile.apply(this, args);
    };
    try {
      const first =
        /^wrote \d+ row\(s\) to events_2026-11-21\.csv, \d+ row\(s\) to events_2026-11-21_2\.csv; watermark at row \d+; more rows are due/;
      expect(meter.exportArchive()).toMatch(first);
    } finally {
      FakeFolder.prototype.createFile = createFile;
    }
    expect(csvOf(platform)).toHaveLength(2);
    // The next run goes on from there: the rest, in files under the limit, and no row twice.
    const message = meter.exportArchive();
    const files = csvOf(platform);
    expect(files.length).toBeGreaterThan(2);
    const rest = files.slice(2).map((f) => `\\d+ row\\(s\\) to ${f.name.replace('.', '\\.')}`);
    expect(message).toMatch(new RegExp(`^wrote ${rest.join(', ')}; watermark at row 80001$`));
    const ids = files.flatMap((f) => (expect(f.lines[0]).toBe(CSV_HEADER), f.lines.slice(1).map((l) => l.split(',')[0])));
    expect(ids).toEqual(rows.map((r) => r[0]));
    expect(meter.exportArchive()).toMatch(/no rows to export/);
  }, 60_000);

  it('a row passed over for its undated timestamp, once its date is typed back, goes into the next file; retention never deletes it unexported', () => {
    const { platform, meter } = freshMeter('2026-11-21T15:00:00Z');
    post(meter, {
      events: [
        { event_id: 'd1', timestamp: '2026-11-21T10:00:00Z' },
        { event_id: 'typed', timestamp: '2026-11-21T11:00:00Z', cost_usd: 80 },
        { event_id: 'd2', timestamp: '2026-11-21T12:00:00Z' },
      ],
    });
    const at = EVENT_FIELDS.indexOf('timestamp');
    const row = () => dataRows(eventsTab(platform)).find((r) => r[0] === 'typed')!;
    // Typed in another locale's order: Sheets keeps it as text, which reads as no date.
    row()[at] = '21/11/2026 11:00';
    platform.clock.set('2026-11-22T01:00:00Z');
    expect(meter.exportArchive()).toMatch(/wrote 2 row\(s\).*1 row\(s\) have no readable timestamp/);
    // The operator corrects it, as the meter asks; then the nights and retention go on.
    row()[at] = new Date('2026-11-21T11:00:00Z');
    platform.clock.set('2026-12-23T02:00:00Z');
    meter.applyRetention();
    expect(dataRows(eventsTab(platform)).map((r) => r[0])).toContain('typed');
    platform.clock.set('2026-12-23T03:00:00Z');
    expect(meter.exportArchive()).toMatch(/wrote 1 row\(s\)/);
    expect(
      csvOf(platform)[1]
        .lines.slice(1)
        .map((l) => l.split(',')[0]),
    ).toEqual(['typed']);
    expect(meter.exportArchive()).toMatch(/no rows to export/);
    meter.applyRetention();
    expect(dataRows(eventsTab(platform))).toEqual([]);
  });

  it('a row whose cost was typed over by hand ("$1.50", a negative refund) waits out of the file until corrected, then goes into the next one; retention keeps it meanwhile', () => {
    // Written as typed, the cell stopped `npm run archive` on the whole night's file (a cost that is
    // not a number >= 0), and the correction the meter asks for in the events tab never reached
    // the archive: the watermark had moved past the row, and retention then deleted it.
    const { platform, meter } = freshMeter('2026-11-21T15:00:00Z');
    post(meter, {
      events: [
        { event_id: 'd1', timestamp: '2026-11-21T10:00:00Z', cost_usd: 1 },
        { event_id: 'typed', timestamp: '2026-11-21T11:00:00Z', cost_usd: 80 },
        { event_id: 'refund', timestamp: '2026-11-21T11:30:00Z', cost_usd: 5 },
        { event_id: 'd2', timestamp: '2026-11-21T12:00:00Z', cost_usd: 2 },
      ],
    });
    const cost = EVENT_FIELDS.indexOf('cost_usd');
    const row = (id: string) => dataRows(eventsTab(platform)).find((r) => r[0] === id)!;
    row('typed')[cost] = '$1.50';
    row('refund')[cost] = -5;
    platform.clock.set('2026-11-22T01:00:00Z');
    expect(meter.exportArchive()).toMatch(
      /wrote 2 row\(s\).*2 row\(s\) have a cell npm run archive would refuse \(2 with cost_usd: expected a number >= 0\) and were not exported/,
    );
    const ids = (file: number) => {
      const { lines } = csvOf(platform)[file];
      return lines.slice(1).map((l) => l.split(',')[0]);
    };
    expect(ids(0)).toEqual(['d1', 'd2']);
    // The operator corrects them, as the meter asks; then the nights and retention go on.
    row('typed')[cost] = 1.5;
    platform.clock.set('2026-12-23T02:00:00Z');
    meter.applyRetention();
    expect(dataRows(eventsTab(platform)).map((r) => r[0])).toEqual(['typed', 'refund']);
    platform.clock.set('2026-12-23T03:00:00Z');
    expect(meter.exportArchive()).toMatch(/wrote 1 row\(s\)/);
    expect(ids(1)).toEqual(['typed']);
    expect(csvOf(platform)[1].lines[1].split(',')[cost]).toBe('1.5');
    row('refund')[cost] = 0;
    expect(meter.exportArchive()).toMatch(/wrote 1 row\(s\)/);
    expect(ids(2)).toEqual(['refund']);
    meter.applyRetention();
    expect(dataRows(eventsTab(platform))).toEqual([]);
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

  it('an export whose records fail half-way (the watermark or the held rows saved, not both) loses no held row to retention, and the next run finishes it', () => {
    const { platform, meter } = freshMeter('2026-10-01T15:00:00Z');
    post(meter, { events: ['good1', 'held', 'good2'].map((event_id, i) => ({ event_id, timestamp: `2026-10-01T10:0${i}:00Z` })) });
    dataRows(eventsTab(platform))[1][EVENT_FIELDS.indexOf('input_tokens')] = '1.2k'; // typed by hand: held back
    platform.clock.set('2026-11-22T01:00:00Z');
    // The file is written; of the export's two records (watermark, held rows), the second times out.
    const record = (_: string, key?: string) => key === 'EXPORT_WATERMARK' || key === 'EXPORT_UNDATED';
    platform.calls.failAfter(
      (name, key) => name === 'Properties.setProperty' && record(name, key),
      (name, key) => name.startsWith('Properties.') && name !== 'Properties.getProperty' && record(name, key),
      'Service Properties timed out',
    );
    expect(() => meter.exportArchive()).toThrow(/timed out/);
    platform.clock.set('2026-11-22T03:00:00Z');
    meter.applyRetention();
    expect(dataRows(eventsTab(platform)).map((r) => r[0])).toContain('held');
    platform.clock.set('2026-11-22T04:00:00Z');
    expect(meter.exportArchive()).toMatch(/finished the previous run.*no rows to export/);
    expect(csvOf(platform).map((f) => f.name)).toEqual(['events_2026-11-21.csv']);
    dataRows(eventsTab(platform)).find((r) => r[0] === 'held')![EVENT_FIELDS.indexOf('input_tokens')] = 1200;
    expect(meter.exportArchive()).toMatch(/wrote 1 row\(s\)/);
    const exported = csvOf(platform).flatMap((f) => f.lines.slice(1).map((l) => l.split(',')[0]));
    expect(exported.sort()).toEqual(['good1', 'good2', 'held']);
  });

  it('a run started while another writes its file (a manual run during the nightly one) exports nothing twice', () => {
    const { platform, meter } = freshMeter('2026-11-21T15:00:00Z');
    post(meter, { events: [{ event_id: 'd1', timestamp: '2026-11-21T10:00:00Z' }] });
    platform.clock.set('2026-11-22T01:00:00Z');
    let manual: unknown = null;
    platform.calls.observe((name) => {
      if (name !== 'Folder.createFile' || manual !== null) return;
      manual = '';
      platform.clock.advance(60_000);
      manual = meter.exportArchive();
    });
    expect(meter.exportArchive()).toMatch(/wrote 1 row\(s\) to events_2026-11-21\.csv; watermark at row 2/);
    expect(manual).toMatch(/^another export is running \(since 2026-11-22T01:00:00\.000Z\): this run did nothing/);
    expect(csvOf(platform).map((f) => f.name)).toEqual(['events_2026-11-21.csv']);
    expect(meter.exportArchive()).toMatch(/no rows to export; watermark at row 2/);
  });

  it('overlapping runs that both fail half-way leave no row unexported (the watermark never passes a row no file holds)', () => {
    const { platform, meter } = freshMeter('2026-11-21T15:00:00Z');
    post(meter, { events: [{ event_id: 'd1', timestamp: '2026-11-21T10:00:00Z' }] });
    platform.clock.set('2026-11-22T01:00:00Z');
    let manual: unknown = null;
    let inManual = false;
    platform.calls.observe((name) => {
      if (name !== 'Folder.createFile' || manual !== null) return;
      manual = '';
      // While the nightly run writes its file: a late row arrives, then a manual run that fails at its Drive write.
      post(meter, { event_id: 'late', timestamp: '2026-11-21T20:00:00Z' });
      inManual = true;
      platform.calls.failAfter(
        () => true,
        (n) => inManual && n === 'Folder.createFile',
      );
      try {
        manual = meter.exportArchive();
      } catch (e) {
        manual = e;
      }
      inManual = false;
      platform.calls.failAfter(() => true, SHEETS_CALL); // then the nightly run's watermark move times out
    });
    expect(() => meter.exportArchive()).toThrow(SHEETS_TIMEOUT);
    meter.exportArchive();
    meter.exportArchive();
    const exported = csvOf(platform).flatMap((f) => f.lines.slice(1).map((l) => l.split(',')[0]));
    expect(new Set(exported)).toEqual(new Set(['d1', 'late']));
  });

  it('a run whose claim was written but whose reply was lost lets go: the next run, a minute later, exports', () => {
    const { platform, meter } = freshMeter('2026-11-21T15:00:00Z');
    post(meter, { events: [{ event_id: 'd1', timestamp: '2026-11-21T10:00:00Z' }] });
    platform.clock.set('2026-11-22T01:00:00Z');
    platform.calls.loseReply((name, key) => name === 'Properties.setProperty' && key === 'EXPORT_IN_PROGRESS');
    expect(() => meter.exportArchive()).toThrow(/server error/);
    platform.clock.advance(60_000);
    expect(meter.exportArchive()).toMatch(/^wrote 1 row\(s\) to events_2026-11-21\.csv; watermark at row 2/);
    expect(csvOf(platform).map((f) => f.name)).toEqual(['events_2026-11-21.csv']);
  });

  it('an export that died holding the claim (it could not let go) blocks for 30 minutes at most, then is finished', () => {
    const { platform, meter } = freshMeter('2026-11-21T15:00:00Z');
    post(meter, { events: [{ event_id: 'd1', timestamp: '2026-11-21T10:00:00Z' }] });
    platform.clock.set('2026-11-22T01:00:00Z');
    // The file is written; the watermark's move times out, and so does the run's letting go.
    platform.calls.failAfter((name) => name === 'Folder.createFile');
    platform.calls.failAfter(
      (name) => name === 'Folder.createFile',
      (name) => name === 'Properties.getProperty',
    );
    expect(() => meter.exportArchive()).toThrow(/timed out/);
    platform.clock.set('2026-11-22T01:20:00Z');
    expect(meter.exportArchive()).toMatch(/another export is running \(since 2026-11-22T01:00:00\.000Z\)/);
    platform.clock.set('2026-11-22T01:30:00Z');
    expect(meter.exportArchive()).toMatch(
      /^finished the previous run \(events_2026-11-21\.csv was written.*no rows to export; watermark at row 2/,
    );
    expect(csvOf(platform).map((f) => f.name)).toEqual(['events_2026-11-21.csv']);
  });
});

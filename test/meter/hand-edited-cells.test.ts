// Cells of the events tab edited by hand into values the archive refuses: the nightly export holds
// such a row back (as it does an undated one) instead of writing a file npm run archive refuses
// whole. The built bundle in node:vm; its file goes through the archive itself.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { convert } from '../../archive/convert';
import { openDuck } from '../../archive/duck';
import { voiceRollupSql } from '../../archive/voice-rollups';
import { CALL_FIELDS } from '../../schema/call-record';
import { EVENT_FIELDS } from '../../schema/event-record';
import type { Cell } from './fakes/cells';
import { webEvent, type FakePlatform, type FakeTextOutput } from './fakes/platform';
import { SECRET, aCall, dataRows, eventsTab, freshMeter, post } from './maintenance-setup';

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

/** Runs npm run archive's convert on a CSV text; the rows it archived. */
async function archive(csv: string): Promise<number> {
  const dir = mkdtempSync(join(tmpdir(), 'hand-edited-'));
  dirs.push(dir);
  const file = join(dir, 'in.csv');
  writeFileSync(file, csv);
  return (await convert(file, { out: join(dir, 'archive') })).rows;
}

const at = (f: (typeof EVENT_FIELDS)[number]) => EVENT_FIELDS.indexOf(f);
const files = (platform: FakePlatform) => platform.drive.folders[0].files;
const ids = (csv: string) =>
  csv
    .trim()
    .split('\r\n')
    .slice(1)
    .map((l) => l.split(',')[0]);

/** Hand edits the archive refuses, one per row: [event_id, field, value typed]. */
const EDITS: Array<[string, (typeof EVENT_FIELDS)[number], Cell]> = [
  ['tokens', 'input_tokens', '1.2k'],
  ['negative', 'output_tokens', -3],
  ['flag', 'pii_flag', 'yes'],
  ['score', 'eval_score', 1.5],
  ['confidence', 'confidence', -0.1],
  ['billion', 'cost_usd', 1e9],
  ['noid', 'event_id', ''],
];

describe('hand-edited cells and the archive export', () => {
  it('the nightly export holds back every row the archive would refuse, says how many, exports each once corrected; retention keeps them', async () => {
    const { platform, meter } = freshMeter('2026-11-21T15:00:00Z');
    const events = ['good1', ...EDITS.map(([id]) => id), 'good2'].map((event_id, i) => ({
      event_id,
      timestamp: `2026-11-21T10:0${i}:00Z`,
      cost_usd: 1,
    }));
    post(meter, { events });
    const rows = () => dataRows(eventsTab(platform));
    const row = (n: number) => rows()[n];
    EDITS.forEach(([, field, value], i) => (row(i + 1)[at(field)] = value));
    platform.clock.set('2026-11-22T01:00:00Z');
    const message = meter.exportArchive() as string;
    expect(message).toMatch(/wrote 2 row\(s\)/);
    expect(message).toMatch(/7 row\(s\) have a cell npm run archive would refuse \(.*\) and were not exported/);
    expect(message).toContain('1 with input_tokens: expected a whole number >= 0');
    expect(message).toContain('1 with cost_usd: expected a number >= 0 and below 1000000000');
    expect(message).toContain('1 with event_id: expected an event id');
    expect(message).toContain('the watermark waits at a row whose event_id is refused');
    // The row with no event_id cannot be remembered (by its id): the watermark waits before it, so
    // the next night's file holds good2 again (the archive keeps one row per event_id).
    expect(ids(files(platform)[0].content)).toEqual(['good1', 'good2']);
    expect(await archive(files(platform)[0].content)).toBe(2);

    // Corrected by hand, as the run asks: the next night exports them, and the archive takes them.
    EDITS.forEach(([id, field], i) => (row(i + 1)[at(field)] = field === 'event_id' ? id : field === 'pii_flag' ? false : 0));
    platform.clock.set('2026-12-23T02:00:00Z');
    meter.applyRetention();
    expect(rows().map((r) => r[0])).toEqual([...EDITS.map(([id]) => id), 'good2']);
    platform.clock.set('2026-12-23T03:00:00Z');
    expect(meter.exportArchive()).toMatch(/wrote 8 row\(s\)/);
    expect(ids(files(platform)[1].content)).toEqual([...EDITS.map(([id]) => id), 'good2']);
    expect(await archive(files(platform)[1].content)).toBe(8);
    meter.applyRetention();
    expect(rows()).toEqual([]);
  });

  it("a corrected row the watermark passed goes into a later night's file", async () => {
    const { platform, meter } = freshMeter('2026-11-21T15:00:00Z');
    post(meter, {
      events: ['good1', 'tokens', 'good2'].map((event_id, i) => ({ event_id, timestamp: `2026-11-21T10:0${i}:00Z` })),
    });
    const row = () => dataRows(eventsTab(platform))[1];
    row()[at('input_tokens')] = '1.2k';
    platform.clock.set('2026-11-22T01:00:00Z');
    expect(meter.exportArchive()).toMatch(/wrote 2 row\(s\).*watermark at row 4.*1 row\(s\) have a cell npm run archive would refuse/);
    expect(await archive(files(platform)[0].content)).toBe(2);
    expect(meter.exportArchive()).toMatch(/no rows to export/);
    row()[at('input_tokens')] = 1200;
    expect(meter.exportArchive()).toMatch(/wrote 1 row\(s\).*1 row\(s\) passed over earlier/);
    expect(ids(files(platform)[1].content)).toEqual(['tokens']);
    expect(await archive(files(platform)[1].content)).toBe(1);
  });

  it('a row whose timestamp and event_id were both cleared by hand is exported once both are typed back, and retention keeps it until then', async () => {
    const { platform, meter } = freshMeter('2026-11-21T15:00:00Z');
    post(meter, {
      events: ['good1', 'cleared', 'good2'].map((event_id, i) => ({ event_id, timestamp: `2026-11-21T10:0${i}:00Z`, cost_usd: 1 })),
    });
    const rows = () => dataRows(eventsTab(platform));
    rows()[1][at('timestamp')] = '';
    rows()[1][at('event_id')] = '';
    platform.clock.set('2026-11-22T01:00:00Z');
    expect(meter.exportArchive()).toMatch(/1 row\(s\) have no readable timestamp/);
    expect(ids(files(platform)[0].content)).toEqual(['good1', 'good2']);

    // Typed back as the run asks; a month later retention runs before the next export.
    rows()[1][at('timestamp')] = new Date('2026-11-21T10:01:00Z');
    rows()[1][at('event_id')] = 'cleared';
    platform.clock.set('2026-12-23T02:00:00Z');
    meter.applyRetention();
    expect(rows().map((r) => r[0])).toContain('cleared');
    platform.clock.set('2026-12-23T03:00:00Z');
    meter.exportArchive();
    const exported = files(platform).flatMap((f) => ids(f.content));
    expect(exported.filter((id) => id === 'cleared')).toEqual(['cleared']);
    expect(await archive(files(platform).at(-1)!.content)).toBeGreaterThan(0);
  });

  it('a row whose every cell was cleared by hand holds nothing to export: the watermark moves past it and later nights export only their own rows', () => {
    const { platform, meter } = freshMeter('2026-11-21T15:00:00Z');
    post(meter, {
      events: ['good1', 'junk', 'good2'].map((event_id, i) => ({ event_id, timestamp: `2026-11-21T10:0${i}:00Z`, cost_usd: 1 })),
    });
    const row = dataRows(eventsTab(platform))[1];
    row.fill(''); // the test event "deleted" by selecting its row and pressing Delete
    platform.clock.set('2026-11-22T01:00:00Z');
    expect(meter.exportArchive()).not.toMatch(/no readable timestamp/);
    expect(ids(files(platform)[0].content)).toEqual(['good1', 'good2']);

    platform.clock.set('2026-11-22T10:00:00Z');
    post(meter, { event_id: 'next', timestamp: '2026-11-22T09:00:00Z', cost_usd: 1 });
    platform.clock.set('2026-11-23T01:00:00Z');
    meter.exportArchive();
    expect(ids(files(platform)[1].content)).toEqual(['next']);
  });

  it('doGet?action=export logs the rows left out for a timestamp typed over into no date, which the nightly export holds back and counts too', () => {
    // Without a date a row is on no day "on or after since": it was left out of the export unsaid.
    const { platform, meter } = freshMeter('2026-11-21T15:00:00Z');
    post(meter, { events: ['good', 'typed', 'cleared'].map((event_id, i) => ({ event_id, timestamp: `2026-11-21T10:0${i}:00Z` })) });
    const rows = dataRows(eventsTab(platform));
    rows[1][at('timestamp')] = 'yesterday';
    rows[2].fill(''); // a row deleted with the Delete key: nothing to correct, nothing said
    const out = meter.doGet(webEvent({ token: SECRET, action: 'export', since: '2026-11-21' })) as FakeTextOutput;
    expect(ids(out.getContent())).toEqual(['good']);
    expect(platform.logs.join('\n')).toMatch(
      /export since 2026-11-21: 1 row\(s\) have no readable timestamp and were left out \(correct them in the events tab\)/,
    );
  });

  it('doGet?action=export leaves out the rows the archive would refuse, and logs how many and why', async () => {
    // Written as typed, they made npm run archive refuse the whole export.
    const { platform, meter } = freshMeter('2026-11-21T15:00:00Z');
    const events = ['good1', ...EDITS.map(([id]) => id), 'good2'].map((event_id, i) => ({
      event_id,
      timestamp: `2026-11-21T10:0${i}:00Z`,
    }));
    post(meter, { events });
    EDITS.forEach(([, field, value], i) => (dataRows(eventsTab(platform))[i + 1][at(field)] = value));
    const out = meter.doGet(webEvent({ token: SECRET, action: 'export', since: '2026-11-21' })) as FakeTextOutput;
    expect(ids(out.getContent())).toEqual(['good1', 'good2']);
    expect(await archive(out.getContent())).toBe(2);
    expect(platform.logs.join('\n')).toMatch(
      /export since 2026-11-21: 7 row\(s\) have a cell npm run archive would refuse \(.*1 with pii_flag: expected true or false.*\) and were left out/,
    );
  });
});

/**
 * Runs `work` in the script's time zone, Etc/UTC (appsscript.json): Apps Script reads a date typed
 * without a zone in it, where the bundle in node:vm reads it in the machine's.
 */
function inScriptZone<T>(work: () => T): T {
  const zone = process.env.TZ;
  process.env.TZ = 'Etc/UTC';
  try {
    return work();
  } finally {
    if (zone === undefined) delete process.env.TZ;
    else process.env.TZ = zone;
  }
}

describe('hand-edited cells of the calls tab and its export', () => {
  /** Runs npm run report -- voice's rollups on a CSV text. */
  async function voiceReport(csv: string) {
    const dir = mkdtempSync(join(tmpdir(), 'hand-edited-calls-'));
    dirs.push(dir);
    const file = join(dir, 'calls.csv');
    writeFileSync(file, csv);
    const duck = await openDuck();
    try {
      return (await duck.all(voiceRollupSql(file, null)))[0];
    } finally {
      duck.close();
    }
  }

  it('doGet?action=export&what=calls passes over a row whose every cell was cleared, and does not ask to correct it', () => {
    const { platform, meter } = freshMeter('2026-11-21T15:00:00Z');
    expect(post(meter, { calls: ['first', 'junk', 'last'].map((call_id) => aCall({ call_id })) })).toMatchObject({ ok: true, appended: 3 });
    dataRows(platform.spreadsheet.tab('calls')!)[1].fill('');
    const out = meter.doGet(webEvent({ token: SECRET, action: 'export', what: 'calls', since: '2026-11-01' })) as FakeTextOutput;
    expect(
      out
        .getContent()
        .trim()
        .split('\r\n')
        .slice(1)
        .map((l) => l.split(',')[0]),
    ).toEqual(['first', 'last']);
    expect(platform.logs.join('\n')).not.toMatch(/export of calls since/);
  });

  it('doGet?action=export&what=calls leaves out the rows a call record cannot hold, logs how many and why, and the voice report reads the rest', async () => {
    const { platform, meter } = freshMeter('2026-11-21T15:00:00Z');
    const ids = ['good', 'cost', 'turns', 'cleared', 'us-order', 'typed-text'];
    expect(post(meter, { calls: ids.map((call_id) => aCall({ call_id })) })).toMatchObject({ ok: true, appended: 6 });
    const rows = dataRows(platform.spreadsheet.tab('calls')!);
    const col = (f: (typeof CALL_FIELDS)[number]) => CALL_FIELDS.indexOf(f);
    rows[1][col('est_audio_cost_usd')] = '$0.10';
    rows[2][col('turns')] = '4 turns';
    rows[3][col('started_at')] = '';
    rows[4][col('started_at')] = '11/21/2026 10:00'; // kept as text by a sheet whose locale puts the day first
    rows[5][col('est_audio_cost_usd')] = ' 0.1'; // a plain number kept as text
    const out = inScriptZone(() =>
      meter.doGet(webEvent({ token: SECRET, action: 'export', what: 'calls', since: '2026-11-01' })),
    ) as FakeTextOutput;
    const lines = out.getContent().trim().split('\r\n');
    expect(lines.slice(1).map((l) => l.split(',')[0])).toEqual(['good', 'cost', 'us-order', 'typed-text']);
    expect(lines[3].split(',')[col('started_at')]).toBe('2026-11-21T10:00:00.000Z');
    const report = await voiceReport(out.getContent());
    expect(report).toMatchObject({ calls: 4 });
    expect(report.cost_per_call).toBeCloseTo(0.1);
    expect(platform.logs.join('\n')).toMatch(
      /export of calls since 2026-11-01: 2 row\(s\) left out.*\(1 with turns: expected a number.*, 1 with started_at: expected an RFC 3339 date-time\): correct them in the calls tab/,
    );
  });

  it("doGet?action=export&what=calls does not read a started_at typed as '2026' or '0.1' as a date: the row is left out and logged, not exported as a call of 1 January", () => {
    const { platform, meter } = freshMeter('2026-11-21T15:00:00Z');
    expect(post(meter, { calls: ['good', 'year', 'decimal'].map((call_id) => aCall({ call_id })) })).toMatchObject({
      ok: true,
      appended: 3,
    });
    const rows = dataRows(platform.spreadsheet.tab('calls')!);
    rows[1][CALL_FIELDS.indexOf('started_at')] = '2026';
    rows[2][CALL_FIELDS.indexOf('started_at')] = '0.1';
    const out = meter.doGet(webEvent({ token: SECRET, action: 'export', what: 'calls', since: '2026-01-01' })) as FakeTextOutput;
    expect(
      out
        .getContent()
        .trim()
        .split('\r\n')
        .slice(1)
        .map((l) => l.split(',')[0]),
    ).toEqual(['good']);
    expect(platform.logs.join('\n')).toMatch(
      /export of calls since 2026-01-01: 2 row\(s\) left out.*\(2 with started_at: expected an RFC 3339 date-time\)/,
    );
  });

  it("a call whose audio cost was typed by hand ('$0.20') is exported without a cost, so the voice report counts the calls, answered calls and bookings the Digest does", async () => {
    const { platform, meter } = freshMeter('2026-11-21T15:00:00Z');
    const calls = [aCall({ call_id: 'priced', est_audio_cost_usd: 0.1 }), aCall({ call_id: 'typed', est_audio_cost_usd: 0.2 })];
    expect(post(meter, { calls })).toMatchObject({ ok: true, appended: 2 });
    platform.spreadsheet.tab('calls')!.data.find((r) => r[0] === 'typed')![CALL_FIELDS.indexOf('est_audio_cost_usd')] = '$0.20';
    meter.refreshDigest();
    const grid = platform.spreadsheet.tab('Digest')!.data;
    const last7d = (label: string) => grid.find((r) => r[0] === label)![1];
    const out = meter.doGet(webEvent({ token: SECRET, action: 'export', what: 'calls', since: '2026-11-01' })) as FakeTextOutput;
    const report = await voiceReport(out.getContent());
    expect([report.calls, report.answered_calls, report.bookings]).toEqual([last7d('calls'), last7d('answered calls'), 2]);
    expect(report.cost_per_call).toBeCloseTo(last7d('cost per call (model, USD)') as number, 12);
    expect(report.cost_per_booking).toBeCloseTo(last7d('cost per booking (model, USD)') as number, 12);
    // The booking without a cost is left out of both, not counted as $0.
    expect(report.cost_per_booking).toBeCloseTo(0.1, 12);
    expect(platform.logs.join('\n')).toMatch(
      /export of calls since 2026-11-01: 1 row\(s\) with an est_audio_cost_usd that is not a number ≥ 0 written without a cost/,
    );
  });
});

// Inputs of the archive (the meter's export URL, the meter bundle's own export CSV) and expiry.
import { existsSync, mkdirSync, readdirSync, readFileSync, truncateSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { convert } from '../../archive/convert';
import { expireArchive } from '../../archive/expire';
import { CSV_HEADER, EVENT_FIELDS, eventToCsvLine, normalizeEvent, type EventInput } from '../../schema/event-record';
import { lit, openDuck } from '../../archive/duck';
import { FakePlatform, loadBundle, webEvent, type FakeTextOutput } from '../meter/fakes/platform';
import { csvIn, report, rowsIn, scratchDir } from './archive-setup';
import { refusedUrl } from '../gateway/fake-provider';

const scratch = scratchDir();
const csv = (events: EventInput[], name?: string) => csvIn(scratch(), events, name);

/** A CSV of hand-made rows: each `[event_id, timestamp, cost_usd]` in an otherwise valid event line. */
function handMade(rows: Array<[string, string, string]>): string {
  const now = () => new Date('2026-11-21T12:00:00Z');
  const base = eventToCsvLine(normalizeEvent({ event_id: 'x', cost_usd: 1 }, { now, uuid: () => 'x' })).split(',');
  const at = (f: (typeof EVENT_FIELDS)[number]) => EVENT_FIELDS.indexOf(f);
  const lines = rows.map(([id, timestamp, cost]) => {
    const cells = [...base];
    [cells[at('event_id')], cells[at('timestamp')], cells[at('cost_usd')]] = [id, timestamp, cost];
    return cells.join(',');
  });
  const file = join(scratch(), `hand${lines.length}-${rows[0][0]}.csv`);
  writeFileSync(file, [CSV_HEADER, ...lines].join('\n') + '\n');
  return file;
}

describe("the meter's rules for times and numbers", () => {
  it('takes a leap second and a lower-case t and z, as the meter does; refuses 24:00, an offset +99:99, 1_000, +5 and -0, as it does', async () => {
    const out = join(scratch(), 'arch');
    await convert(
      handMade([
        ['leap', '2016-12-31T23:59:60Z', '1'],
        ['lower', '2026-11-21t09:00:00z', '2'],
      ]),
      { out },
    );
    const duck = await openDuck();
    try {
      const rows = await duck.all<{ event_id: string; at: string }>(
        `SELECT event_id, strftime(timestamp, '%Y-%m-%dT%H:%M:%S') AS at FROM read_parquet(${lit(join(out, '**', '*.parquet'))}) ORDER BY event_id`,
      );
      expect(rows).toEqual([
        { event_id: 'leap', at: '2017-01-01T00:00:00' }, // the instant after :59, as the meter stores it
        { event_id: 'lower', at: '2026-11-21T09:00:00' },
      ]);
    } finally {
      duck.close();
    }
    const refused: Array<[string, string, RegExp]> = [
      ['2026-11-21T24:00:00Z', '1', /line 2, timestamp: expected an RFC 3339 date-time/],
      // An offset past 23:59, which DuckDB takes (+99:99 moved the event four days back).
      ['2026-11-21T09:00:00+99:99', '2', /line 2, timestamp: expected an RFC 3339 date-time/],
      ['2026-11-21T09:00:00Z', '1_000', /line 2, cost_usd: expected/],
      ['2026-11-21T09:00:00Z', '+5', /line 2, cost_usd: expected/],
      ['2026-11-21T09:00:00Z', '-0', /line 2, cost_usd: expected/],
    ];
    for (const [timestamp, cost, problem] of refused)
      await expect(convert(handMade([[`bad${cost}`, timestamp, cost]]), { out })).rejects.toThrow(problem);
  });
});

describe('inputs', () => {
  let server: Server;
  afterAll(() => server?.close());

  it("takes the meter's export URL, follows its 302 with GET and sends the token from the environment", async () => {
    const body = readFileSync(csv([{ event_id: 'u1', timestamp: '2026-11-21T09:00:00Z', cost_usd: 2 }]), 'utf8');
    const seen: string[] = [];
    server = createServer((req, res) => {
      seen.push(`${req.method} ${req.url}`);
      if (req.url!.startsWith('/exec')) {
        res.writeHead(302, { location: '/echo?user_content_key=abc' }).end();
      } else if (new URL(req.url!, 'http://x').searchParams.get('user_content_key') === 'abc') {
        const asked = seen.filter((s) => s.startsWith('GET /exec')).at(-1)!;
        res
          .writeHead(200, { 'content-type': 'text/csv' })
          .end(asked.includes('token=s3cret') ? body : '{"ok":false,"error":"unauthorized"}');
      }
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const port = (server.address() as { port: number }).port;
    const out = join(scratch(), 'arch');
    await convert(`http://127.0.0.1:${port}/exec?action=export&since=2026-11-21`, { out, env: { METER_TOKEN: 's3cret' } });
    expect(seen).toEqual(['GET /exec?action=export&since=2026-11-21&token=s3cret', 'GET /echo?user_content_key=abc']);
    seen.length = 0;
    expect(await rowsIn(out)).toEqual([{ event_id: 'u1', cost_usd: 2 }]);
    await expect(convert(`http://127.0.0.1:${port}/exec?action=export&since=2026-11-21`, { out, env: {} })).rejects.toThrow(
      'export URL refused: unauthorized',
    );
  });

  it('never prints the token of an export URL, in its progress lines or errors (an HTML sign-in page, bad rows)', async () => {
    const html = createServer((req, res) => {
      if (req.url!.startsWith('/html')) res.writeHead(200, { 'content-type': 'text/html' }).end('<!DOCTYPE html><title>Sign in</title>');
      else
        res.writeHead(200, { 'content-type': 'text/csv' }).end(`${CSV_HEADER}\nx,yesterday,agent,p,m,n/a,1,1,1,1,,,,,false,false,,n/a,\n`);
    });
    await new Promise<void>((r) => html.listen(0, '127.0.0.1', r));
    try {
      const base = `http://127.0.0.1:${(html.address() as { port: number }).port}`;
      const out = join(scratch(), 'arch');
      for (const path of ['/html', '/csv']) {
        const lines: string[] = [];
        const error = await convert(`${base}${path}?action=export&token=s3cret&since=2026-11-21`, { out, log: (l) => lines.push(l) }).catch(
          (e: Error) => e,
        );
        expect(String(error)).toMatch(path === '/html' ? /line 1: expected the event header/ : /line 2, timestamp/);
        expect(String(error)).toContain('token=***');
        expect([String(error), ...lines].join('\n')).not.toContain('s3cret');
      }
    } finally {
      html.close();
    }
  });

  // fetch refused it with a message quoting the URL whole: the password and METER_TOKEN on stderr.
  it('refuses an export URL with user:password in it, showing neither the password nor the token, and writes nothing', async () => {
    const out = join(scratch(), 'arch');
    const error = await convert('http://meter:hunter2@127.0.0.1:9/exec?action=export&since=2026-11-21', {
      out,
      env: { METER_TOKEN: 's3cret' },
    }).catch((e: Error) => e);
    expect(String(error)).toContain('export URL: expected no user:password in it');
    expect(String(error)).not.toMatch(/hunter2|s3cret/);
    expect(readdirSync(out)).toEqual([]);
  });

  // Taken for a file path, an export URL pasted with its scheme in capitals had its token printed in "no such file".
  it('an export URL whose scheme is in capitals is read as a URL, its token never printed', async () => {
    const away = (await refusedUrl()).replace(/\/v1$/, '').replace(/^http:/, 'HTTP:');
    const out = join(scratch(), 'arch');
    const error = await convert(`${away}/exec?action=export&since=2026-11-21&token=s3cret`, { out }).catch((e: Error) => e);
    expect(String(error)).toContain('token=*** not reached (');
    expect(String(error)).not.toContain('s3cret');
    expect(readdirSync(out)).toEqual([]);
  });

  // It failed with "fetch failed" alone: neither the URL nor the cause named.
  it('an export URL that cannot be reached is named (its token as ***) with the cause, and nothing is written', async () => {
    const away = (await refusedUrl()).replace(/\/v1$/, '');
    const out = join(scratch(), 'arch');
    const error = await convert(`${away}/exec?action=export&since=2026-11-21`, { out, env: { METER_TOKEN: 's3cret' } }).catch(
      (e: Error) => e,
    );
    expect(String(error)).toContain(`export URL ${away}/exec?action=export&since=2026-11-21&token=*** not reached (`);
    expect(String(error)).toContain('ECONNREFUSED');
    expect(String(error)).not.toContain('s3cret');
    expect(readdirSync(out)).toEqual([]);
  });

  // It failed with "terminated" alone: neither what was cut short nor why.
  it('an export whose connection is cut half-way is named (its token as ***) with the cause, and the archive is left as it was', async () => {
    const out = join(scratch(), 'arch');
    await convert(csv([{ event_id: 'stored', timestamp: '2026-11-20T09:00:00Z', cost_usd: 1 }]), { out });
    const body = readFileSync(csv([{ event_id: 'half', timestamp: '2026-11-21T09:00:00Z', cost_usd: 2 }]), 'utf8');
    const cut = createServer((req, res) => {
      res.writeHead(200, { 'content-type': 'text/csv', 'content-length': String(Buffer.byteLength(body) * 2) });
      res.write(body, () => res.socket!.destroy()); // whole lines, then the connection drops
    });
    await new Promise<void>((r) => cut.listen(0, '127.0.0.1', r));
    try {
      const url = `http://127.0.0.1:${(cut.address() as { port: number }).port}/exec?action=export&since=2026-11-21`;
      const error = await convert(url, { out, env: { METER_TOKEN: 's3cret' } }).catch((e: Error) => e);
      expect(String(error)).toContain(`export URL ${url}&token=***: download cut short (`);
      expect(String(error)).not.toContain('s3cret');
      expect((await rowsIn(out)).map((r) => r.event_id)).toEqual(['stored']);
      expect(readdirSync(out)).toEqual(['events_20261120.parquet']);
    } finally {
      cut.close();
    }
  });

  it("takes the meter bundle's own export CSV: the sheet's totals equal the archive's", async () => {
    const platform = new FakePlatform();
    const meter = loadBundle(platform);
    meter.setup();
    platform.properties.setProperty('SECRET_TOKEN', 't');
    meter.doPost(
      webEvent(
        { token: 't' },
        {
          events: [
            { cost_usd: 0.05, customer_id: '00123', timestamp: '2026-11-21T08:00:00Z' },
            { cost_usd: 3.1, timestamp: '2026-11-21T09:00:00Z', pii_flag: true },
          ],
        },
      ),
    );
    const exported = (meter.doGet(webEvent({ token: 't', action: 'export', since: '2026-11-01' })) as FakeTextOutput).getContent();
    const file = join(scratch(), 'export.csv');
    writeFileSync(file, exported);
    const out = join(scratch(), 'arch');
    await convert(file, { out });
    expect(await report('export-daily', out)).toEqual([{ day: '2026-11-21', cost_usd: 3.15 }]);
    expect((await report('customers', out)).map((r) => r.customer_id).sort()).toEqual(['', '00123']);
  });

  it('a timestamp typed by hand as text that the meter reads as a date goes into the nightly file as RFC 3339 UTC, and the file archives', async () => {
    const platform = new FakePlatform();
    platform.clock.set('2026-11-22T12:00:00Z');
    const meter = loadBundle(platform);
    meter.setup();
    platform.properties.setProperty('SECRET_TOKEN', 't');
    const events = [
      { event_id: 'measured', timestamp: '2026-11-22T09:00:00Z', cost_usd: 2 },
      { event_id: 'typed', timestamp: '2026-11-22T09:30:00Z', cost_usd: 80 },
    ];
    meter.doPost(webEvent({ token: 't' }, { events }));
    // Typed in month/day order into a sheet whose locale reads day/month: Sheets keeps it as text,
    // which the meter reads as 22 November (its spend counts the row on that day).
    const tab = platform.spreadsheet.tab('events')!;
    tab.data.find((r) => r[0] === 'typed')![EVENT_FIELDS.indexOf('timestamp')] = '11/22/2026 10:00';
    platform.clock.set('2026-11-23T01:00:00Z');
    expect(meter.exportArchive()).toMatch(/wrote 2 row\(s\) to events_2026-11-22\.csv/);
    const [exported] = platform.drive.folders[0].files;
    expect(exported.content.split('\r\n')[2]).toMatch(/^typed,2026-11-22T10:00:00\.000Z,/);
    const file = join(scratch(), exported.name);
    writeFileSync(file, exported.content);
    const out = join(scratch(), 'arch');
    await convert(file, { out });
    expect(await report('export-daily', out)).toEqual([{ day: '2026-11-22', cost_usd: 82 }]);
  });
});

describe('a large input', () => {
  it('past the longest string Node makes (512 MB), a CSV is archived, not refused for its size', async () => {
    // A gateway's own events.csv after a few months. The bytes after its rows are a hole in a
    // sparse file (no disk used, read as zeros, where DuckDB's reader ends the input): the size is what counts.
    const file = csv([{ event_id: 'big-1', timestamp: '2026-11-21T09:00:00Z', cost_usd: 1.5 }]);
    truncateSync(file, 600 * 1024 * 1024);
    const out = join(scratch(), 'arch');
    await convert(file, { out });
    expect(await rowsIn(out)).toEqual([{ event_id: 'big-1', cost_usd: 1.5 }]);
  }, 60_000);
});

describe('npm run archive:expire', () => {
  it('removes files of days older than the window, flat and partitioned', () => {
    const out = join(scratch(), 'arch');
    mkdirSync(join(out, 'provider=p', 'day=20260101'), { recursive: true });
    for (const f of [
      'events_20260520.parquet',
      'events_20260527.parquet',
      'events_20261120.parquet',
      'provider=p/day=20260101/events_20260101.parquet',
      'notes.txt',
    ]) {
      writeFileSync(join(out, f), 'x');
    }
    const now = new Date('2026-11-22T05:00:00Z'); // 180 days before: 2026-05-26
    expect(expireArchive(out, 180, now, true).removed).toHaveLength(2);
    expect(existsSync(join(out, '.archive-expired'))).toBe(false); // a dry run records nothing
    const result = expireArchive(out, 180, now);
    expect(result.cutoff).toBe('2026-05-26');
    expect(result.removed.map((f) => f.slice(out.length + 1)).sort()).toEqual([
      'events_20260520.parquet',
      'provider=p/day=20260101/events_20260101.parquet',
    ]);
    expect(readdirSync(out).sort()).toEqual(['.archive-expired', 'events_20260527.parquet', 'events_20261120.parquet', 'notes.txt']);
    expect(readFileSync(join(out, '.archive-expired'), 'utf8')).toBe('2026-05-26\n');
    expect(() => expireArchive(out, 0, now)).toThrow(/--days/);
  });
});

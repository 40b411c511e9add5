// The columnar archive: CSV → Parquet with DuckDB, merge by event_id, reports, expiry, and the
// meter's own export (the built bundle) as input.
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import { convert } from '../../archive/convert';
import { openDuck, lit } from '../../archive/duck';
import { expireArchive } from '../../archive/expire';
import { reportSql, type ReportName } from '../../archive/reports';
import { CSV_HEADER, eventToCsvLine, normalizeEvent, type EventInput } from '../../schema/event-record';
import { FakePlatform, loadBundle, webEvent, type FakeTextOutput } from '../meter/fakes/platform';

const root = join(import.meta.dirname, '..', '..');
let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'archive-test-'));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

let n = 0;
/** A CSV in the event header, built with the shared record definition (as the gateway writes it). */
function csv(events: EventInput[], name = `in${n++}.csv`): string {
  const now = () => new Date('2026-11-21T12:00:00Z');
  const lines = events.map((e, i) => eventToCsvLine(normalizeEvent(e, { now, uuid: () => `gen-${n}-${i}` })));
  const file = join(dir, name);
  writeFileSync(file, [CSV_HEADER, ...lines].join('\n') + '\n');
  return file;
}

async function report(name: ReportName, archive: string, asOf = '2026-11-21') {
  const duck = await openDuck();
  try {
    return await duck.all(reportSql(name, archive, asOf));
  } finally {
    duck.close();
  }
}

async function rowsIn(archive: string) {
  const duck = await openDuck();
  try {
    return await duck.all<{ event_id: string; cost_usd: number }>(
      `SELECT event_id, CAST(cost_usd AS DOUBLE) AS cost_usd FROM read_parquet(${lit(join(archive, '**', '*.parquet'))}, union_by_name = true) ORDER BY event_id`,
    );
  } finally {
    duck.close();
  }
}

const snapshot = (d: string) =>
  readdirSync(d, { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile())
    .map((e) => {
      const p = join(e.parentPath, e.name);
      return `${p}:${statSync(p).size}:${readFileSync(p).toString('base64').slice(0, 64)}`;
    })
    .sort();

describe('npm run archive', () => {
  it("Document 2's smoke test: 0.05 and 3.10 give 3.15 in the daily totals and the 7-day customers", async () => {
    const out = join(dir, 'arch');
    await convert(
      csv([
        {
          event_id: 'a',
          timestamp: '2026-11-21T09:00:00Z',
          provider: 'openai',
          cost_usd: 0.05,
          customer_id: 'acme',
          input_tokens: 100,
          output_tokens: 20,
        },
        {
          event_id: 'b',
          timestamp: '2026-11-21T10:00:00Z',
          provider: 'openai',
          cost_usd: 3.1,
          customer_id: 'acme',
          input_tokens: 900,
          output_tokens: 410,
        },
      ]),
      { out },
    );
    expect(readdirSync(out)).toEqual(['events_20261121.parquet']);
    expect(await report('daily', out)).toEqual([
      { day: '2026-11-21', provider: 'openai', cost_usd: 3.15, input_tokens: 1000, output_tokens: 430, tokens_total: 1430 },
    ]);
    expect(await report('customers', out)).toEqual([{ customer_id: 'acme', cost_usd: 3.15, calls: 2 }]);
    expect(await report('customers', out, '2026-11-28')).toEqual([]); // 7 days later: out of the window
  });

  it('writes typed, zstd-compressed columns', async () => {
    const out = join(dir, 'arch');
    await convert(csv([{ event_id: 'a', timestamp: '2026-11-21T09:00:00+02:00', cost_usd: '1.5e-7', eval_score: 0.5, pii_flag: true }]), {
      out,
    });
    const duck = await openDuck();
    try {
      const file = lit(join(out, 'events_20261121.parquet'));
      const types = Object.fromEntries(
        (await duck.all<{ column_name: string; column_type: string }>(`DESCRIBE SELECT * FROM read_parquet(${file})`)).map((r) => [
          r.column_name,
          r.column_type,
        ]),
      );
      expect(types).toMatchObject({
        timestamp: 'TIMESTAMP',
        input_tokens: 'BIGINT',
        latency_ms: 'BIGINT',
        cost_usd: 'DECIMAL(18,9)',
        eval_score: 'DOUBLE',
        pii_flag: 'BOOLEAN',
        review_required: 'BOOLEAN',
        customer_id: 'VARCHAR',
      });
      const [row] = await duck.all(
        `SELECT strftime("timestamp", '%Y-%m-%dT%H:%M:%S') AS t, CAST(cost_usd AS VARCHAR) AS c, pii_flag FROM read_parquet(${file})`,
      );
      expect(row).toEqual({ t: '2026-11-21T07:00:00', c: '0.000000150', pii_flag: true });
      const codecs = await duck.all<{ compression: string }>(`SELECT DISTINCT compression FROM parquet_metadata(${file})`);
      expect(codecs.map((c) => c.compression)).toEqual(['ZSTD']);
    } finally {
      duck.close();
    }
  });

  it('running again replaces the day: no event twice, late arrivals join, the input wins', async () => {
    const out = join(dir, 'arch');
    const first = csv([
      { event_id: 'a', timestamp: '2026-11-21T09:00:00Z', cost_usd: 1 },
      { event_id: 'b', timestamp: '2026-11-21T10:00:00Z', cost_usd: 2 },
    ]);
    await convert(first, { out });
    await convert(first, { out });
    expect(await rowsIn(out)).toEqual([
      { event_id: 'a', cost_usd: 1 },
      { event_id: 'b', cost_usd: 2 },
    ]);
    await convert(
      csv([
        { event_id: 'b', timestamp: '2026-11-21T10:00:00Z', cost_usd: 5 },
        { event_id: 'late', timestamp: '2026-11-21T23:00:00Z', cost_usd: 3 },
      ]),
      { out },
    );
    expect(await rowsIn(out)).toEqual([
      { event_id: 'a', cost_usd: 1 },
      { event_id: 'b', cost_usd: 5 },
      { event_id: 'late', cost_usd: 3 },
    ]);
    await convert(csv([{ event_id: 'only', timestamp: '2026-11-21T01:00:00Z', cost_usd: 9 }]), { out, replace: true });
    expect(await rowsIn(out)).toEqual([{ event_id: 'only', cost_usd: 9 }]);
  });

  it('partitions as provider=<p>/day=<yyyymmdd>/events_*.parquet and merges there too', async () => {
    const out = join(dir, 'arch');
    const input = csv([
      { event_id: 'a', timestamp: '2026-11-20T09:00:00Z', provider: 'openai', cost_usd: 1 },
      { event_id: 'b', timestamp: '2026-11-21T09:00:00Z', provider: 'anthropic', cost_usd: 2 },
    ]);
    await convert(input, { out, partition: true });
    await convert(input, { out, partition: true });
    const files = readdirSync(out, { recursive: true })
      .map(String)
      .filter((f) => f.endsWith('.parquet'))
      .sort();
    expect(files).toEqual([
      'provider=anthropic/day=20261121/events_20261121.parquet',
      'provider=openai/day=20261120/events_20261120.parquet',
    ]);
    expect((await report('daily', out)).map((r) => [r.day, r.provider, r.cost_usd])).toEqual([
      ['2026-11-20', 'openai', 1],
      ['2026-11-21', 'anthropic', 2],
    ]);
  });

  it('reports a malformed row with its line and field, and leaves the archive as it was', async () => {
    const out = join(dir, 'arch');
    await convert(csv([{ event_id: 'a', timestamp: '2026-11-21T09:00:00Z', cost_usd: 1 }]), { out });
    const before = snapshot(out);
    const bad = join(dir, 'bad.csv');
    const line = (id: string, time: string, cost: string) => `${id},${time},agent,p,m,n/a,1,1,1,${cost},,,,,false,false,,n/a,`;
    writeFileSync(
      bad,
      [CSV_HEADER, line('z', '2026-11-21T09:00:00Z', '1'), line('y', '2026-11-21T09:00:00Z', 'abc'), line('x', 'yesterday', '1')].join(
        '\n',
      ),
    );
    await expect(convert(bad, { out })).rejects.toThrow(
      /2 problem\(s\); nothing was written\nline 3, cost_usd: expected a number >= 0, got "abc"\nline 4, timestamp: expected an RFC 3339/,
    );
    expect(snapshot(out)).toEqual(before);
    writeFileSync(bad, 'id,when\n1,2\n');
    await expect(convert(bad, { out })).rejects.toThrow(/line 1: expected the event header/);
  });

  it('the CLI exits 1 with the line and field, and 0 with the files written', () => {
    const bad = join(dir, 'bad.csv');
    writeFileSync(bad, `${CSV_HEADER}\nx,2026-11-21T09:00:00Z,agent,p,m,n/a,1.5,0,0,0,,,,,false,false,,n/a,\n`);
    const tsx = join(root, 'node_modules', '.bin', 'tsx');
    const failed = spawnSync(tsx, ['archive/cli.ts', 'convert', bad, '--out', join(dir, 'o')], { cwd: root, encoding: 'utf8' });
    expect(failed.status).toBe(1);
    expect(failed.stderr).toContain('line 2, input_tokens: expected a whole number >= 0, got "1.5"');
    const ok = execFileSync(
      tsx,
      ['archive/cli.ts', 'convert', csv([{ event_id: 'a', timestamp: '2026-11-21T09:00:00Z' }]), '--out', join(dir, 'o')],
      { cwd: root, encoding: 'utf8' },
    );
    expect(ok.trim()).toBe(join(dir, 'o', 'events_20261121.parquet'));
    const daily = execFileSync(tsx, ['archive/cli.ts', 'report', 'export-daily', '--archive', join(dir, 'o')], {
      cwd: root,
      encoding: 'utf8',
    });
    expect(daily).toBe('day,cost_usd\n2026-11-21,0\n');
  });
});

describe('reports', () => {
  it('burn sums the day and the 6 preceding calendar days; days without events count as zero', async () => {
    const out = join(dir, 'arch');
    await convert(
      csv([
        { event_id: '1', timestamp: '2026-11-01T10:00:00Z', customer_id: 'c', cost_usd: 10 },
        { event_id: '2', timestamp: '2026-11-04T10:00:00Z', customer_id: 'c', cost_usd: 5 },
        { event_id: '3', timestamp: '2026-11-09T10:00:00Z', customer_id: 'c', cost_usd: 1 },
        { event_id: '4', timestamp: '2026-11-09T11:00:00Z', customer_id: 'd', cost_usd: 2 },
      ]),
      { out },
    );
    const rows = (await report('burn', out)).filter((r) => r.customer_id === 'c');
    expect(rows).toHaveLength(9); // every calendar day from Nov 1 to Nov 9
    const burn = Object.fromEntries(rows.map((r) => [String(r.day).slice(8), [r.cost_usd, r.burn_7d_usd]]));
    expect(burn['04']).toEqual([5, 15]);
    expect(burn['07']).toEqual([0, 15]); // Nov 1..7
    expect(burn['08']).toEqual([0, 5]); // Nov 2..8: the 10 has left the window
    expect(burn['09']).toEqual([1, 6]); // "6 preceding rows" would have given 16
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
    const out = join(dir, 'arch');
    await convert(`http://127.0.0.1:${port}/exec?action=export&since=2026-11-21`, { out, env: { METER_TOKEN: 's3cret' } });
    expect(seen).toEqual(['GET /exec?action=export&since=2026-11-21&token=s3cret', 'GET /echo?user_content_key=abc']);
    seen.length = 0;
    expect(await rowsIn(out)).toEqual([{ event_id: 'u1', cost_usd: 2 }]);
    await expect(convert(`http://127.0.0.1:${port}/exec?action=export&since=2026-11-21`, { out, env: {} })).rejects.toThrow(
      'export URL refused: unauthorized',
    );
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
    const file = join(dir, 'export.csv');
    writeFileSync(file, exported);
    const out = join(dir, 'arch');
    await convert(file, { out });
    expect(await report('export-daily', out)).toEqual([{ day: '2026-11-21', cost_usd: 3.15 }]);
    expect((await report('customers', out)).map((r) => r.customer_id).sort()).toEqual(['', '00123']);
  });
});

describe('npm run archive:expire', () => {
  it('removes files of days older than the window, flat and partitioned', () => {
    const out = join(dir, 'arch');
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
    const result = expireArchive(out, 180, now);
    expect(result.cutoff).toBe('2026-05-26');
    expect(result.removed.map((f) => f.slice(out.length + 1)).sort()).toEqual([
      'events_20260520.parquet',
      'provider=p/day=20260101/events_20260101.parquet',
    ]);
    expect(readdirSync(out).sort()).toEqual(['events_20260527.parquet', 'events_20261120.parquet', 'notes.txt']);
    expect(() => expireArchive(out, 0, now)).toThrow(/--days/);
  });
});

// The columnar archive: CSV → Parquet with DuckDB, merge by event_id, checks, the CLI, reports.
// One describe per command: long because each behaviour is a short test of its own.
import { execFileSync, spawnSync } from 'node:child_process';
import {
  appendFileSync,
  chmodSync,
  copyFileSync,
  cpSync,
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { basename, join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { convert } from '../../archive/convert';
import { openDuck, lit } from '../../archive/duck';
import { expireArchive } from '../../archive/expire';
import { formatRows } from '../../archive/reports';
import { CALLS_CSV_HEADER, callToCsvLine, type OUTCOMES } from '../../schema/call-record';
import { CSV_HEADER, eventToCsvLine, normalizeEvent, type EventInput } from '../../schema/event-record';
import { spawn } from '../children';
import { appendThroughFullDisk, hasPrlimit } from '../full-disk';
import { csvIn, report, root, rowsIn, scratchDir } from './archive-setup';

const scratch = scratchDir();
const csv = (events: EventInput[], name?: string) => csvIn(scratch(), events, name);
/** An openai call of acme's. */
const at = (event_id: string, timestamp: string, cost_usd: number): EventInput => ({
  event_id,
  timestamp,
  provider: 'openai',
  customer_id: 'acme',
  cost_usd,
});

const snapshot = (d: string) =>
  readdirSync(d, { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile())
    .map((e) => {
      const p = join(e.parentPath, e.name);
      return `${p}:${statSync(p).size}:${readFileSync(p).toString('base64').slice(0, 64)}`;
    })
    .sort();

describe('npm run archive', () => {
  it("the meter's smoke test (docs/meter.md): 0.05 and 3.10 give 3.15 in the daily totals and the 7-day customers", async () => {
    const out = join(scratch(), 'arch');
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
      {
        day: '2026-11-21',
        provider: 'openai',
        cost_usd: 3.15,
        input_tokens: 1000,
        output_tokens: 430,
        tokens_total: 1430,
        unpriced_calls: 0,
      },
    ]);
    expect(await report('customers', out)).toEqual([{ customer_id: 'acme', cost_usd: 3.15, calls: 2, unpriced_calls: 0 }]);
    expect(await report('customers', out, '2026-11-28')).toEqual([]); // 7 days later: out of the window
  });

  it('takes an archive folder whose name holds characters DuckDB reads as a pattern ([eu], *, ?): each run, flat or partitioned, merges', async () => {
    for (const name of ['archive [eu]', 'a*b?']) {
      const out = join(scratch(), name);
      await convert(csv([at('a', '2026-11-21T09:00:00Z', 1)]), { out });
      await convert(csv([at('b', '2026-11-21T10:00:00Z', 2)]), { out, partition: true });
      await convert(csv([at('c', '2026-11-21T11:00:00Z', 4)]), { out });
      expect(readdirSync(out).filter((f) => !f.startsWith('.'))).toEqual(['events_20261121.parquet']);
      expect((await report('daily', out)).map((r) => [r.day, r.cost_usd])).toEqual([['2026-11-21', 7]]);
    }
  });

  it('reads the files it names and no other: [eu], * and ? in a path are not patterns that match a folder beside it', async () => {
    for (const [name, beside] of [
      ['arch[eu]', 'arche'],
      ['a*b', 'axb'],
      ['a?b', 'a_b'],
    ]) {
      await convert(csv([at('other', '2026-11-21T08:00:00Z', 100)]), { out: join(scratch(), beside) });
      const out = join(scratch(), name);
      await convert(csv([at('a', '2026-11-21T09:00:00Z', 1)]), { out });
      await convert(csv([at('b', '2026-11-21T10:00:00Z', 2)]), { out }); // merges with its stored day
      expect((await report('daily', out)).map((r) => [r.day, r.cost_usd])).toEqual([['2026-11-21', 3]]);
      expect((await report('customers', out)).map((r) => r.calls)).toEqual([2]);
    }
    // An input named in[1].csv beside in1.csv.
    const input = csv([at('c', '2026-11-22T09:00:00Z', 4)], 'in[1].csv');
    csv([at('d', '2026-11-22T09:00:00Z', 400)], 'in1.csv');
    const out = join(scratch(), 'plain');
    await convert(input, { out });
    expect((await report('daily', out)).map((r) => [r.day, r.cost_usd])).toEqual([['2026-11-22', 4]]);
  });

  it('writes typed, zstd-compressed columns', async () => {
    const out = join(scratch(), 'arch');
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
    const out = join(scratch(), 'arch');
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

  it('an event_id stored on another day (exported again with another timestamp) is counted once: the input wins, with --replace too', async () => {
    const out = join(scratch(), 'arch');
    await convert(
      csv([
        { event_id: 'a', timestamp: '2026-11-20T23:59:00Z', customer_id: 'acme', cost_usd: 1 },
        { event_id: 'b', timestamp: '2026-11-20T10:00:00Z', customer_id: 'acme', cost_usd: 2 },
      ]),
      { out, partition: true },
    );
    await convert(csv([{ event_id: 'a', timestamp: '2026-11-21T00:01:00Z', customer_id: 'acme', cost_usd: 1 }]), { out });
    expect(await rowsIn(out)).toEqual([
      { event_id: 'a', cost_usd: 1 },
      { event_id: 'b', cost_usd: 2 },
    ]);
    expect((await report('export-daily', out)).map((r) => [r.day, r.cost_usd])).toEqual([
      ['2026-11-20', 2],
      ['2026-11-21', 1],
    ]);
    expect(await report('customers', out)).toEqual([{ customer_id: 'acme', cost_usd: 3, calls: 2, unpriced_calls: 0 }]);
    // --replace makes the input's days exactly its rows; the other day keeps its own events.
    await convert(csv([{ event_id: 'b', timestamp: '2026-11-22T08:00:00Z', customer_id: 'acme', cost_usd: 2 }]), { out, replace: true });
    expect((await report('export-daily', out)).map((r) => [r.day, r.cost_usd])).toEqual([
      ['2026-11-21', 1],
      ['2026-11-22', 2],
    ]);
  });

  it('--replace leaves alone a day only a repeated row the input replaced later was on: its stored events stay', async () => {
    const out = join(scratch(), 'arch');
    await convert(csv([at('a', '2026-11-20T09:00:00Z', 1), at('b', '2026-11-20T10:00:00Z', 2), at('c', '2026-11-22T09:00:00Z', 4)]), {
      out,
    });
    // x stamped on the 20th, then again on the 22nd (its timestamp corrected): the 22nd's row wins.
    await convert(csv([at('x', '2026-11-20T11:00:00Z', 8), at('x', '2026-11-22T11:00:00Z', 16)]), { out, replace: true });
    expect((await report('export-daily', out)).map((r) => [r.day, r.cost_usd])).toEqual([
      ['2026-11-20', 3],
      ['2026-11-22', 16],
    ]);
    // Stored on the 20th before, x leaves it; a and b stay.
    await convert(csv([at('x', '2026-11-20T11:00:00Z', 8)]), { out });
    await convert(csv([at('x', '2026-11-20T11:00:00Z', 8), at('x', '2026-11-22T11:00:00Z', 32)]), { out, replace: true });
    expect((await rowsIn(out)).map((r) => [r.event_id, r.cost_usd])).toEqual([
      ['a', 1],
      ['b', 2],
      ['x', 32],
    ]);
  });

  it('partitions as provider=<p>/day=<yyyymmdd>/events_*.parquet and merges there too', async () => {
    const out = join(scratch(), 'arch');
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

  it('a year of ten providers in one input (4,000 partitions) is archived with --partition, every provider and day its file', async () => {
    const out = join(scratch(), 'arch');
    const day0 = Date.parse('2025-10-01T12:00:00Z');
    const events = Array.from({ length: 400 }, (_, d) =>
      Array.from({ length: 10 }, (_, p) => ({
        event_id: `e${d}-${p}`,
        timestamp: new Date(day0 + d * 86_400_000).toISOString(),
        provider: `provider-${p}`,
        cost_usd: 0.5,
      })),
    ).flat();
    // DuckDB's buffer for each partition it writes passed the 2 GB limit: "Out of Memory Error".
    const result = await convert(csv(events), { out, partition: true });
    expect([result.rows, result.days.length, result.files.length]).toEqual([4000, 400, 4000]);
    const daily = await report('daily', out);
    expect(daily).toHaveLength(4000);
    expect(daily.reduce((sum, r) => sum + Number(r.cost_usd), 0)).toBe(2000);
  }, 120_000);

  it('partitioned, an event with an empty provider (its cell cleared by hand in the events tab) is counted, merged and expired like any other', async () => {
    const out = join(scratch(), 'arch');
    // The export writes the cleared cell as an empty field; the gateway never sends one (ingest makes it "unknown").
    const input = csv([at('a', '2026-11-21T09:00:00Z', 1), at('b', '2026-11-21T10:00:00Z', 2)]);
    writeFileSync(input, readFileSync(input, 'utf8').replace(/^(b,[^,]*,[^,]*,)openai,/m, '$1,'));
    await convert(input, { out, partition: true });
    await convert(input, { out, partition: true });
    expect((await report('daily', out)).map((r) => [r.provider, r.cost_usd])).toEqual([
      ['', 2],
      ['openai', 1],
    ]);
    // The provider typed back in: the event moves to that folder, counted once.
    await convert(csv([at('b', '2026-11-21T10:00:00Z', 2)]), { out, partition: true });
    expect((await report('daily', out)).map((r) => [r.provider, r.cost_usd])).toEqual([['openai', 3]]);
    expect(expireArchive(out, 1, new Date('2026-11-24T00:00:00Z')).removed).toHaveLength(1);
    expect(readdirSync(out)).toEqual(['.archive-expired']);
  });

  it('days archive:expire removed stay removed: archiving the gateway CSV that still holds them again skips them, and says so', async () => {
    const out = join(scratch(), 'arch');
    const gatewayCsv = csv([at('old', '2026-01-10T09:00:00Z', 1), at('new', '2026-11-20T09:00:00Z', 2)], 'events.csv');
    await convert(gatewayCsv, { out });
    expect(expireArchive(out, 180, new Date('2026-11-22T05:00:00Z')).removed.map((f) => basename(f))).toEqual(['events_20260110.parquet']);
    // The next nights: the same CSV grown by a day, then by a row written twice (one row per event_id is kept).
    for (const repeated of [false, true]) {
      const line = eventToCsvLine(normalizeEvent(at('next', '2026-11-21T09:00:00Z', 3), { now: () => new Date(), uuid: () => 'x' }));
      appendFileSync(gatewayCsv, `${line}\n`);
      const lines: string[] = [];
      await convert(gatewayCsv, { out, log: (said) => lines.push(said) });
      expect(lines).toContain(
        '1 row(s) of 1 day(s) before 2026-05-26 skipped: archive:expire removed those days (.archive-expired in the archive folder; remove it to archive them again)',
      );
      expect(
        readdirSync(out)
          .filter((f) => f.endsWith('.parquet'))
          .sort(),
      ).toEqual(['events_20261120.parquet', 'events_20261121.parquet']);
      expect(lines.some((said) => said.includes('repeated event_id'))).toBe(repeated);
      expect((await rowsIn(out)).map((r) => r.event_id)).toEqual(['new', 'next']);
    }
  });

  it('days a shorter window removed stay removed after the nightly expiry with the longer window: the later cutoff is kept', async () => {
    const out = join(scratch(), 'arch');
    const gatewayCsv = csv([at('july', '2026-07-01T09:00:00Z', 1), at('new', '2026-11-20T09:00:00Z', 2)], 'events.csv');
    await convert(gatewayCsv, { out });
    // An operator shrinks the archive to 30 days once; the nightly run keeps its 180.
    expect(expireArchive(out, 30, new Date('2026-11-22T05:00:00Z')).removed.map((f) => basename(f))).toEqual(['events_20260701.parquet']);
    expect(expireArchive(out, 180, new Date('2026-11-23T05:00:00Z')).removed).toEqual([]);
    expect(readFileSync(join(out, '.archive-expired'), 'utf8')).toBe('2026-10-23\n');
    const lines: string[] = [];
    await convert(gatewayCsv, { out, log: (said) => lines.push(said) });
    expect(lines).toContain(
      '1 row(s) of 1 day(s) before 2026-10-23 skipped: archive:expire removed those days (.archive-expired in the archive folder; remove it to archive them again)',
    );
    expect((await rowsIn(out)).map((r) => r.event_id)).toEqual(['new']);
  });

  it('reports a malformed row with its line and field, and leaves the archive as it was', async () => {
    const out = join(scratch(), 'arch');
    await convert(csv([{ event_id: 'a', timestamp: '2026-11-21T09:00:00Z', cost_usd: 1 }]), { out });
    const before = snapshot(out);
    const bad = join(scratch(), 'bad.csv');
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

  // The refusal showed the two headers, 200 characters each, the added column cut off the end of the second.
  it('an export whose header gained, lost or renamed a column (a meter of another version) is refused naming that column; nothing is written', async () => {
    const out = join(scratch(), 'arch');
    await convert(csv([{ event_id: 'a', timestamp: '2026-11-21T09:00:00Z', cost_usd: 1 }]), { out });
    const before = snapshot(out);
    const row = `b,2026-11-21T09:00:00Z,agent,p,m,n/a,1,1,1,1,,,,c,false,false,,n/a,`;
    const file = join(scratch(), 'newer.csv');
    for (const [header, line, said] of [
      [`${CSV_HEADER},billing_region`, `${row},eu`, 'column 20 "billing_region" is not a field of the event record'],
      [CSV_HEADER.replace('cost_usd,', 'cost_usd,currency,'), `${row},usd`, 'column 11: expected "eval_score", got "currency"'],
      [CSV_HEADER.replace(',error_code', ''), row.slice(0, -1), 'no column 19, expected "error_code"'],
    ]) {
      writeFileSync(file, `${header}\n${line}\n`);
      const error = await convert(file, { out }).catch((e: Error) => e);
      expect(String(error)).toContain(`${file}: line 1: expected the event header "${CSV_HEADER}", got "`);
      expect(String(error)).toContain(`" (${said})`);
    }
    expect(snapshot(out)).toEqual(before);
  });

  it('names the line of a row with too few or too many fields or an unterminated quote (a download cut short), and writes nothing', async () => {
    const out = join(scratch(), 'arch');
    await convert(csv([{ event_id: 'a', timestamp: '2026-11-21T09:00:00Z', cost_usd: 1 }]), { out });
    const before = snapshot(out);
    const bad = join(scratch(), 'cut.csv');
    const row = `b,2026-11-21T09:00:00Z,agent,p,m,n/a,1,1,1,1,,,,c,false,false,,n/a,`;
    for (const [last, problem] of [
      ['c,2026-11-21T09:0', 'expected 19 fields, got 2'],
      [`${row},extra`, 'expected 19 fields, got 20'],
      ['c,2026-11-21T09:00:00Z,agent,p,m,n/a,1,1,1,1,,,,"cut', 'a quoted field without its closing quote'],
    ]) {
      writeFileSync(bad, `${CSV_HEADER}\n${row}\n${last}`);
      const error = await convert(bad, { out }).catch((e: Error) => e);
      expect(String(error)).toContain(`${bad}: line 3: ${problem}`);
      expect(String(error)).toContain('nothing was written');
      expect(String(error)).not.toMatch(/strict_mode|Possible fixes/);
    }
    expect(snapshot(out)).toEqual(before);
  });

  it("names the file's own line past a text over several lines or a blank line (DuckDB's row numbers are not lines)", async () => {
    const out = join(scratch(), 'arch');
    const bad = join(scratch(), 'hand.csv');
    // Line 2 starts a row whose text holds a line break (line 3 ends it); line 4 is blank.
    const before = `${CSV_HEADER}\r\na,2026-11-21T09:00:00Z,agent,p,m,n/a,1,1,1,1,,,,"two\r\nlines",false,false,,n/a,\r\n\r\n`;
    for (const [last, problem] of [
      ['b,2026-11-21T09:00:00Z,agent,p,m,n/a,1,1,1,-1,,,,c,false,false,,n/a,', 'line 5, cost_usd: expected a number >= 0, got "-1"'],
      ['c,2026-11-21T09:0', 'line 5: expected 19 fields, got 2'],
    ]) {
      writeFileSync(bad, `${before}${last}\r\n`);
      await expect(convert(bad, { out })).rejects.toThrow(problem);
    }
    expect(existsSync(out) ? readdirSync(out).filter((f) => f.endsWith('.parquet')) : []).toEqual([]);
  });

  it('names the line of a refused row past texts holding a quote typed by hand (5" screen): such a quote opens no text', async () => {
    const out = join(scratch(), 'arch');
    const bad = join(scratch(), 'hand.csv');
    const row = (id: string, cost: string, text: string) =>
      `${id},2026-11-21T09:00:00Z,agent,p,m,n/a,1,1,1,${cost},,,,${text},false,false,,n/a,`;
    // DuckDB's reader takes a quote inside a text that is not quoted as a character of it (lines 2 and 3).
    writeFileSync(
      bad,
      [
        CSV_HEADER,
        row('a', '1', 'a 5" screen'),
        row('b', '1', '12" pizza'),
        row('c', '-1', 'c'),
        '',
        row('d', '1', '"two\nlines"'),
        row('e', '-2', 'e'),
        '',
      ].join('\n'),
    );
    const error = String(await convert(bad, { out }).catch((e: Error) => e));
    expect(error).toContain('line 4, cost_usd: expected a number >= 0, got "-1"');
    expect(error).toContain('line 8, cost_usd: expected a number >= 0, got "-2"');
  });

  // The gateway's CSV after a disk that filled in the middle of a write holds the start of a row
  // on a line of its own, the row whole after it: the archive stopped at it ("expected 19 fields")
  // every night until someone deleted the line by hand.
  it.skipIf(!hasPrlimit)(
    "the gateway's CSV after its disk filled mid-write: the cut part of a row is skipped and said, every event archived once, on every run",
    async () => {
      const file = join(scratch(), 'events.csv');
      const events = Array.from({ length: 10 }, (_, i) => at(`full-${i}`, `2026-11-21T0${i}:00:00Z`, i + 1));
      const lines = events.map((e, i) =>
        eventToCsvLine(normalizeEvent({ ...e, job_id: `job-${'x'.repeat(200)}` }, { now: () => new Date(), uuid: () => `u${i}` })),
      );
      // The gateway's own appender on a disk that fills: the kernel takes part of the rows, then refuses the rest.
      await appendThroughFullDisk(file, CSV_HEADER, lines);
      const written = readFileSync(file, 'utf8').split('\n');
      const cutAt = written.findIndex((l, i) => i > 0 && l !== '' && !lines.includes(l)) + 1; // 1-based, as the archive counts
      expect(cutAt).toBeGreaterThan(1); // the disk did cut a row
      const wholeAt = written.indexOf(lines.find((l) => l.startsWith(written[cutAt - 1]))!) + 1;

      const out1 = join(scratch(), 'arch');
      for (let run = 0; run < 2; run++) {
        const said: string[] = [];
        const result = await convert(file, { out: out1, log: (l) => said.push(l) });
        expect(result.rows).toBe(10);
        expect(said).toContain(
          `${file}: line ${cutAt}: part of a row a full disk cut short (the row is whole on line ${wholeAt}): skipped`,
        );
        expect(await rowsIn(out1)).toEqual(events.map((e) => ({ event_id: e.event_id, cost_usd: e.cost_usd })));
      }
      // A bad row after the cut one is still refused, named by its line in the file.
      appendFileSync(file, `bad,2026-11-21T09:00:00Z,agent,p,m,n/a,1,1,1,abc,,,,,false,false,,n/a,\n`);
      await expect(convert(file, { out: out1 })).rejects.toThrow(`line ${written.length}, cost_usd: expected a number >= 0, got "abc"`);
    },
    30_000,
  );

  it('a line inside a text with line breaks is never taken for a cut row, even when a later row starts with it', async () => {
    const out = join(scratch(), 'arch');
    const file = join(scratch(), 'multi.csv');
    const row = (id: string, customer: string) => `${id},2026-11-21T09:00:00Z,agent,p,m,n/a,1,1,1,1,,,,${customer},false,false,,n/a,`;
    // Line 3 ("b") is inside x's customer_id; line 5 is the start of line 6, cut by a full disk.
    writeFileSync(file, [CSV_HEADER, row('x', '"a\nb\nc"'), 'b12', row('b123', 'acme')].join('\n') + '\n');
    const said: string[] = [];
    await convert(file, { out, log: (l) => said.push(l) });
    expect(said.filter((l) => l.includes('full disk'))).toEqual([
      `${file}: line 5: part of a row a full disk cut short (the row is whole on line 6): skipped`,
    ]);
    const duck = await openDuck();
    try {
      expect(await duck.all(`SELECT event_id, customer_id FROM read_parquet(${lit(join(out, '*.parquet'))}) ORDER BY event_id`)).toEqual([
        { event_id: 'b123', customer_id: 'acme' },
        { event_id: 'x', customer_id: 'a\nb\nc' },
      ]);
    } finally {
      duck.close();
    }
  });

  it('stores the largest count and cost the meter accepts, and names the line and field of a row beyond them', async () => {
    const out = join(scratch(), 'arch');
    const max = { event_id: 'max', timestamp: '2026-11-21T09:00:00Z', input_tokens: Number.MAX_SAFE_INTEGER, cost_usd: 999_999_999.999 };
    await convert(csv([max]), { out });
    expect(await rowsIn(out)).toEqual([{ event_id: 'max', cost_usd: 999_999_999.999 }]);
    const before = snapshot(out);
    const bad = join(scratch(), 'big.csv');
    const line = (id: string, tokens: string, cost: string) =>
      `${id},2026-11-21T09:00:00Z,agent,p,m,n/a,${tokens},1,1,${cost},,,,,false,false,,n/a,`;
    writeFileSync(
      bad,
      [
        CSV_HEADER,
        line('a', '1', '1'),
        line('b', '99999999999999999999', '1'),
        line('c', '1', '1000000000'),
        line('d', '1', '1e+308'),
      ].join('\n'),
    );
    await expect(convert(bad, { out })).rejects.toThrow(
      '3 problem(s); nothing was written\n' +
        'line 3, input_tokens: expected a whole number from 0 to 9007199254740991, got "99999999999999999999"\n' +
        'line 4, cost_usd: expected a number >= 0 and below 1000000000, got "1000000000"\n' +
        'line 5, cost_usd: expected a number >= 0 and below 1000000000, got "1e+308"',
    );
    expect(snapshot(out)).toEqual(before);
  });

  it('a header-only input (the export URL on a day without events) archives nothing and leaves the archive as it was', async () => {
    const out = join(scratch(), 'arch');
    await convert(csv([{ event_id: 'a', timestamp: '2026-11-21T09:00:00Z', cost_usd: 1 }]), { out });
    const before = snapshot(out);
    const empty = join(scratch(), 'empty.csv');
    writeFileSync(empty, `${CSV_HEADER}\r\n`);
    expect(await convert(empty, { out })).toEqual({ rows: 0, days: [], files: [] });
    expect(await convert(empty, { out, replace: true })).toEqual({ rows: 0, days: [], files: [] });
    expect(snapshot(out)).toEqual(before);
  });

  it('the CLI exits 1 with the line and field, and 0 with the files written', () => {
    const bad = join(scratch(), 'bad.csv');
    writeFileSync(bad, `${CSV_HEADER}\nx,2026-11-21T09:00:00Z,agent,p,m,n/a,1.5,0,0,0,,,,,false,false,,n/a,\n`);
    const tsx = join(root, 'node_modules', '.bin', 'tsx');
    const failed = spawnSync(tsx, ['bin/archive.ts', 'convert', bad, '--out', join(scratch(), 'o')], { cwd: root, encoding: 'utf8' });
    expect(failed.status).toBe(1);
    expect(failed.stderr).toContain('line 2, input_tokens: expected a whole number >= 0, got "1.5"');
    const ok = execFileSync(
      tsx,
      ['bin/archive.ts', 'convert', csv([{ event_id: 'a', timestamp: '2026-11-21T09:00:00Z' }]), '--out', join(scratch(), 'o')],
      { cwd: root, encoding: 'utf8' },
    );
    expect(ok.trim()).toBe(join(scratch(), 'o', 'events_20261121.parquet'));
    const daily = execFileSync(tsx, ['bin/archive.ts', 'report', 'export-daily', '--archive', join(scratch(), 'o')], {
      cwd: root,
      encoding: 'utf8',
    });
    expect(daily).toBe('day,cost_usd\n2026-11-21,0\n');
  });
});

describe('reports', () => {
  it('read only the archive, not the scratch folder a killed run left (whole staged files, a half-written one), which a run a day later removes', async () => {
    const out = join(scratch(), 'arch');
    await convert(csv([{ event_id: 'a', timestamp: '2026-11-21T09:00:00Z', cost_usd: 1 }]), { out });
    // What SIGKILL during `npm run archive` leaves: its scratch folder, nothing moved in yet.
    const left = join(out, '.archive-tmp-999-1');
    mkdirSync(join(left, 'pass1', 'day=20261121'), { recursive: true });
    mkdirSync(join(left, 'pass2', 'day=20261121'), { recursive: true });
    copyFileSync(join(out, 'events_20261121.parquet'), join(left, 'pass1', 'day=20261121', 'part_0.parquet'));
    writeFileSync(
      join(left, 'pass2', 'day=20261121', 'part_0.parquet'),
      readFileSync(join(out, 'events_20261121.parquet')).subarray(0, 100),
    );
    expect((await report('daily', out)).map((r) => [r.day, r.cost_usd])).toEqual([['2026-11-21', 1]]);
    expect(await report('customers', out)).toEqual([{ customer_id: '', cost_usd: 1, calls: 1, unpriced_calls: 0 }]);
    // The next run removes what a run killed more than a day ago left; a run of today may still be going.
    const today = join(out, `.archive-tmp-998-${Date.now() - 60_000}`);
    mkdirSync(today);
    await convert(csv([{ event_id: 'b', timestamp: '2026-11-21T10:00:00Z', cost_usd: 2 }]), { out });
    expect(readdirSync(out).filter((f) => f.startsWith('.archive-tmp-'))).toEqual([basename(today)]);
  });

  it('daily and customers count the calls without a price (UNPRICED), whose cost is not in the sums, as the meter does', async () => {
    const out = join(scratch(), 'arch');
    await convert(
      csv([
        at('priced', '2026-11-21T09:00:00Z', 2),
        { ...at('null', '2026-11-21T10:00:00Z', 0), cost_usd: null }, // sent as null: UNPRICED added
        { ...at('meter', '2026-11-21T11:00:00Z', 0), error_code: 'TIMEOUT|UNPRICED' }, // the meter's export: 0, marked
        { ...at('part', '2026-11-21T12:00:00Z', 0.5), error_code: 'UNPRICED' }, // a cost known in part
        { ...at('beta', '2026-11-21T13:00:00Z', 0), customer_id: 'beta', cost_usd: null },
      ]),
      { out },
    );
    expect((await report('daily', out)).map((r) => [r.day, r.provider, r.cost_usd, r.unpriced_calls])).toEqual([
      ['2026-11-21', 'openai', 2.5, 4],
    ]);
    expect(await report('customers', out)).toEqual([
      { customer_id: 'acme', cost_usd: 2.5, calls: 4, unpriced_calls: 3 },
      { customer_id: 'beta', cost_usd: 0, calls: 1, unpriced_calls: 1 },
    ]);
  });

  it('a day file that cannot be read (a page damaged inside, or cut short) is named, with what was expected, by report and by a run, which writes nothing', async () => {
    const out = join(scratch(), 'arch');
    await convert(csv(['19', '20', '21'].map((d) => at(`e${d}`, `2026-11-${d}T09:00:00Z`, 1))), { out });
    const bad = join(out, 'events_20261120.parquet');
    const damaged = readFileSync(bad);
    // Every page damaged, the footer whole (its length is in the 4 bytes before the closing PAR1):
    // DuckDB's error alone named no file, or the first of the list.
    for (let i = 4; i < damaged.length - 8 - damaged.readUInt32LE(damaged.length - 8); i++) damaged[i] ^= 0x5a;
    writeFileSync(bad, damaged);
    const expected = `${bad}: cannot be read (`;
    const what = 'expected a Parquet file of events as npm run archive writes it';
    const report = (name: string) =>
      spawnSync(
        'npx',
        ['tsx', join(root, 'bin/archive.ts'), 'report', name, '--archive', out, ...(name === 'customers' ? ['--as-of', '2026-11-21'] : [])],
        { encoding: 'utf8' },
      );
    for (const r of [report('daily'), report('customers')]) {
      expect(r.status).toBe(1);
      expect(r.stderr).toContain(expected);
      expect(r.stderr).toContain(what);
    }
    const before = snapshot(out);
    // A run that merges that day reads it (another day's run need not: DuckDB skips it by its statistics).
    await expect(convert(csv([at('e20b', '2026-11-20T10:00:00Z', 1)]), { out })).rejects.toThrow(
      new RegExp(`^${expected.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')}.*${what}.*nothing was written$`),
    );
    expect(snapshot(out)).toEqual(before);
    writeFileSync(bad, damaged.subarray(0, 100)); // cut short: DuckDB named it, but not what was expected
    expect(report('daily').stderr).toContain(`${expected}Invalid Input Error: No magic bytes found at end of file`);
  });

  it("read only the archive's day files: a copy the operator keeps under the folder is not counted again", async () => {
    const out = join(scratch(), 'arch');
    const event = { event_id: 'a', timestamp: '2026-11-21T09:00:00Z', provider: 'openai', customer_id: 'acme', cost_usd: 1 };
    await convert(csv([event]), { out, partition: true });
    const day = join(out, 'provider=openai', 'day=20261121', 'events_20261121.parquet');
    for (const copy of ['backup/events_20261121.parquet', 'provider=openai/day=20261121/copy.parquet', 'old.parquet']) {
      mkdirSync(join(out, copy, '..'), { recursive: true });
      copyFileSync(day, join(out, copy));
    }
    expect((await report('daily', out)).map((r) => [r.day, r.cost_usd])).toEqual([['2026-11-21', 1]]);
    expect(await report('customers', out)).toEqual([{ customer_id: 'acme', cost_usd: 1, calls: 1, unpriced_calls: 0 }]);
  });

  it("a day file or partition folder linked in (a symlink onto another disk) is the archive's: reports count it, a run merges with it, expiry removes its day files", async () => {
    const out = join(scratch(), 'arch');
    const disk = join(scratch(), 'other-disk');
    mkdirSync(disk);
    // Flat: a day file moved to the other disk, linked back under its name.
    await convert(csv([at('a', '2026-11-20T09:00:00Z', 1), at('b', '2026-11-21T09:00:00Z', 2)]), { out });
    renameSync(join(out, 'events_20261120.parquet'), join(disk, 'events_20261120.parquet'));
    symlinkSync(join(disk, 'events_20261120.parquet'), join(out, 'events_20261120.parquet'));
    const daily = async (dir: string) => (await report('daily', dir)).map((r) => [r.day, r.cost_usd]);
    expect(await daily(out)).toEqual([
      ['2026-11-20', 1],
      ['2026-11-21', 2],
    ]);
    await convert(csv([at('c', '2026-11-20T10:00:00Z', 4)]), { out });
    expect(await daily(out)).toEqual([
      ['2026-11-20', 5],
      ['2026-11-21', 2],
    ]);
    // Partitioned: a provider's folder on the other disk.
    const parted = join(scratch(), 'parted');
    await convert(csv([at('a', '2026-11-20T09:00:00Z', 1), at('b', '2026-11-21T09:00:00Z', 2)]), { out: parted, partition: true });
    renameSync(join(parted, 'provider=openai'), join(disk, 'provider=openai'));
    symlinkSync(join(disk, 'provider=openai'), join(parted, 'provider=openai'));
    expect(await daily(parted)).toEqual([
      ['2026-11-20', 1],
      ['2026-11-21', 2],
    ]);
    await convert(csv([at('c', '2026-11-21T10:00:00Z', 4)]), { out: parted, partition: true });
    expect(await daily(parted)).toEqual([
      ['2026-11-20', 1],
      ['2026-11-21', 6],
    ]);
    // The rewritten day is written back in the folder (atomically, over the link); the other disk's copy is left as it was.
    expect(lstatSync(join(out, 'events_20261120.parquet')).isSymbolicLink()).toBe(false);
    expect(existsSync(join(disk, 'events_20261120.parquet'))).toBe(true);
    // Expiry removes the day files inside the linked folder, and their emptied day folders; the link stays.
    expect(expireArchive(parted, 1, new Date('2026-11-23T12:00:00Z')).removed).toHaveLength(2);
    expect(lstatSync(join(parted, 'provider=openai')).isSymbolicLink()).toBe(true);
    expect(readdirSync(join(disk, 'provider=openai'))).toEqual([]);
  });

  it('a link that leads nowhere (a loop, or through a file) is nothing, as a broken one: reports, runs and expiry go on without it', async () => {
    const out = join(scratch(), 'arch');
    await convert(csv([at('a', '2026-11-20T09:00:00Z', 1)]), { out });
    symlinkSync(join(out, 'events_20261121.parquet'), join(out, 'events_20261121.parquet')); // ELOOP
    symlinkSync(join(out, 'events_20261120.parquet', 'x'), join(out, 'provider=gone')); // ENOTDIR
    expect((await report('daily', out, '2026-11-21')).map((r) => [r.day, r.cost_usd])).toEqual([['2026-11-20', 1]]);
    await convert(csv([at('b', '2026-11-21T10:00:00Z', 2)]), { out });
    expect((await report('daily', out, '2026-11-21')).map((r) => [r.day, r.cost_usd])).toEqual([
      ['2026-11-20', 1],
      ['2026-11-21', 2],
    ]);
    expect(expireArchive(out, 1, new Date('2026-11-23T12:00:00Z')).removed).toHaveLength(2);
    expect(lstatSync(join(out, 'provider=gone')).isSymbolicLink()).toBe(true);
  });

  it("a provider folder linked in from another file system takes the run's files (copied there, then renamed into place)", async (ctx) => {
    if (!existsSync('/dev/shm')) return ctx.skip();
    const disk = mkdtempSync(join('/dev/shm', 'archive-test-'));
    try {
      const out = join(scratch(), 'parted');
      await convert(csv([at('a', '2026-11-21T09:00:00Z', 1)]), { out, partition: true });
      cpSync(join(out, 'provider=openai'), join(disk, 'provider=openai'), { recursive: true });
      rmSync(join(out, 'provider=openai'), { recursive: true });
      symlinkSync(join(disk, 'provider=openai'), join(out, 'provider=openai'));
      await convert(csv([at('b', '2026-11-21T10:00:00Z', 2), at('c', '2026-11-22T10:00:00Z', 4)]), { out, partition: true });
      expect((await report('daily', out, '2026-11-22')).map((r) => [r.day, r.cost_usd])).toEqual([
        ['2026-11-21', 3],
        ['2026-11-22', 4],
      ]);
      expect(readdirSync(join(disk, 'provider=openai', 'day=20261121'))).toEqual(['events_20261121.parquet']);
    } finally {
      rmSync(disk, { recursive: true, force: true });
    }
  });

  it('a copy left beside its day file by a run killed between the copy and the rename (*.part) is removed by the next run; one a process running here may be writing, and other files, stay', async () => {
    const out = join(scratch(), 'parted');
    await convert(csv([at('a', '2026-11-21T09:00:00Z', 1)]), { out, partition: true });
    const dayDir = join(out, 'provider=openai', 'day=20261121');
    const day = join(dayDir, 'events_20261121.parquet');
    const killed = spawnSync(process.execPath, ['-e', '']).pid; // a run that is gone
    const running = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)'], { stdio: 'ignore' });
    copyFileSync(day, `${day}.${killed}.part`);
    copyFileSync(day, `${day}.${running.pid}.part`);
    const flat = join(out, `events_20261120.parquet.${killed}.part`);
    const others = ['notes.part', 'events_20261121.parquet.part', 'events_20261121.parquet.12.part.bak'];
    copyFileSync(day, flat);
    for (const name of others) writeFileSync(join(out, name), 'not the archive’s');
    await convert(csv([at('b', '2026-11-21T10:00:00Z', 2)]), { out, partition: true });
    // before: the killed run's copies stayed, the day folder's beside its day file for good
    expect(readdirSync(dayDir).sort()).toEqual(['events_20261121.parquet', `events_20261121.parquet.${running.pid}.part`]);
    expect(existsSync(flat)).toBe(false);
    for (const name of others) expect(existsSync(join(out, name)), name).toBe(true);
    expect((await report('daily', out, '2026-11-21')).map((r) => [r.day, r.cost_usd])).toEqual([['2026-11-21', 3]]);
    // Its writer gone too, expiry removes it with the day, and the day folder it would have kept.
    running.kill('SIGKILL');
    await new Promise((done) => (running.exitCode === null && running.signalCode === null ? running.once('exit', done) : done(null)));
    expect(expireArchive(out, 1, new Date('2026-12-01T12:00:00Z')).removed).toEqual([day]);
    expect(existsSync(join(out, 'provider=openai'))).toBe(false);
  });

  it('a copy left in a folder the run may not change (made read-only since) is left and said: the run and expiry go on', async (ctx) => {
    const out = join(scratch(), 'stuck');
    await convert(csv([at('a', '2026-11-21T09:00:00Z', 1)]), { out, partition: true });
    const dayDir = join(out, 'provider=openai', 'day=20261121');
    const part = join(dayDir, `events_20261121.parquet.${spawnSync(process.execPath, ['-e', '']).pid}.part`);
    copyFileSync(join(dayDir, 'events_20261121.parquet'), part);
    const unlock = unchangeable(dayDir);
    if (!unlock) return ctx.skip(); // this machine cannot keep its owner out of a folder
    try {
      const lines: string[] = [];
      // before: "ENOTDIR: not a directory, scandir '…part'" (rmSync's word for EPERM): no run nor expiry got further, whatever day it had
      await convert(csv([at('b', '2026-11-22T10:00:00Z', 2)]), { out, partition: true, log: (l) => lines.push(l) });
      expect(lines.find((l) => l.startsWith(`left ${part}: `))).toMatch(
        /: could not remove it \((EPERM|EACCES)\); it is never read as a day file/,
      );
      expect(existsSync(part)).toBe(true);
      expect((await report('daily', out, '2026-11-22')).map((r) => [r.day, r.cost_usd])).toEqual([
        ['2026-11-21', 1],
        ['2026-11-22', 2],
      ]);
      const expired = expireArchive(out, 1, new Date('2026-11-22T12:00:00Z'));
      expect(expired.left).toEqual([expect.stringMatching(/\.part: could not remove it \(E[A-Z]+\)/)]);
      expect([expired.removed, expired.kept]).toEqual([[], 2]);
    } finally {
      unlock();
    }
  });

  it('burn sums the day and the 6 preceding calendar days; days without events count as zero', async () => {
    const out = join(scratch(), 'arch');
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

  it('the table aligns a column of numbers right even when its first row is empty (a provider whose calls are all unpriced)', async () => {
    const input = join(scratch(), 'unpriced.csv');
    const line = (id: string, provider: string, cost: string, code: string) =>
      `${id},2026-11-21T09:00:00Z,agent,${provider},m,n/a,1,1,1,${cost},,,,acme,false,false,,n/a,${code}`;
    writeFileSync(input, [CSV_HEADER, line('a', 'anthropic', '', 'UNPRICED'), line('b', 'openai', '12.5', '')].join('\n') + '\n');
    const out = join(scratch(), 'arch');
    await convert(input, { out });
    const rows = await report('daily', out);
    const table = formatRows(rows, Object.keys(rows[0]), 'table').split('\n');
    const costAt = table[0].indexOf('cost_usd');
    expect([table[2].slice(costAt, costAt + 8), table[3].slice(costAt, costAt + 8)]).toEqual(['        ', '    12.5']);
  });

  it('burn of 2,000 customers over 90 days (180,000 rows) prints as the default table, every row', () => {
    const events = Array.from({ length: 2000 }, (_, c) => [
      { event_id: `a${c}`, timestamp: '2026-08-01T10:00:00Z', customer_id: `cust${c}`, cost_usd: 0.5 },
      { event_id: `b${c}`, timestamp: '2026-10-29T10:00:00Z', customer_id: `cust${c}`, cost_usd: 0.25 },
    ]).flat();
    const out = join(scratch(), 'arch');
    const tsx = join(root, 'node_modules', '.bin', 'tsx');
    execFileSync(tsx, ['bin/archive.ts', 'convert', csv(events), '--out', out], { cwd: root, stdio: 'ignore' });
    const burn = spawnSync(tsx, ['bin/archive.ts', 'report', 'burn', '--archive', out], {
      cwd: root,
      encoding: 'utf8',
      maxBuffer: 64 << 20,
    });
    expect(burn.stderr).toBe('');
    expect(burn.status).toBe(0);
    const lines = burn.stdout.trimEnd().split('\n');
    expect(lines).toHaveLength(2 + 2000 * 90); // header, rule, a row per customer and calendar day
    expect(lines[2].split(/\s+/)).toEqual(['cust0', '2026-08-01', '0.5', '0.5']);
  });

  it('report voice prints its costs as money in every format: calls of $1.20, $0 and $0 cost $0.4 each, not 0.39999999999999997', () => {
    const call = (call_id: string, outcome: (typeof OUTCOMES)[number], est_audio_cost_usd: number) =>
      callToCsvLine({
        call_id,
        started_at: '2026-11-21T10:00:00.000Z',
        duration_s: 60,
        model: 'gpt-realtime-mini',
        intent_primary: 'book',
        turns: 4,
        ttfb_s: 1.2,
        asr_wer: null,
        confidence_avg: 0.9,
        escalated: false,
        outcome,
        est_audio_cost_usd,
        telephony_minutes: 1,
        country: 'PT',
        ended_reason: 'completed',
      });
    const calls = join(scratch(), 'calls.csv');
    // Bookings of $0.10 and $0.20: $0.15 per booking, not 0.15000000000000002.
    const lines = [call('a', 'abandoned', 1.2), call('b', 'booking', 0), call('c', 'lead_created', 0)];
    const booked = [call('d', 'booking', 0.1), call('e', 'booking', 0.2)];
    writeFileSync(calls, [CALLS_CSV_HEADER, ...lines].join('\n') + '\n');
    const voice = (format: string, file = calls) =>
      spawnSync(join(root, 'node_modules', '.bin', 'tsx'), ['bin/archive.ts', 'report', 'voice', '--calls', file, '--format', format], {
        cwd: root,
        encoding: 'utf8',
      });
    const json = JSON.parse(voice('json').stdout);
    expect([json[0].cost_per_call, json[0].cost_per_booking]).toEqual([0.4, 0]);
    const csvOut = voice('csv').stdout.trim().split('\n');
    const columns = csvOut[0].split(',');
    expect(csvOut[1].split(',')[columns.indexOf('cost_per_call')]).toBe('0.4');
    const table = voice('table').stdout.trimEnd().split('\n');
    expect(table[2].split(/\s+/).slice(-2)).toEqual(['0.4', '0']);
    const bookings = join(scratch(), 'bookings.csv');
    writeFileSync(bookings, [CALLS_CSV_HEADER, ...booked].join('\n') + '\n');
    expect(JSON.parse(voice('json', bookings).stdout)[0].cost_per_booking).toBe(0.15);
  });
});

/**
 * Makes `dir` a folder whose entries its owner cannot remove (immutable for root, read-only for
 * another user); returns the undo, or null when this machine cannot (a file system without it).
 */
function unchangeable(dir: string): (() => void) | null {
  const root = process.getuid?.() === 0;
  const undo = root ? () => spawnSync('chattr', ['-i', dir]) : () => chmodSync(dir, 0o755);
  if (root) spawnSync('chattr', ['+i', dir]);
  else chmodSync(dir, 0o555);
  try {
    writeFileSync(join(dir, 'probe'), '');
  } catch {
    return undo;
  }
  rmSync(join(dir, 'probe'));
  undo();
  return null;
}

// Billing data the gateway writes, under hostile input: caller text that a spreadsheet would run as
// a formula, headers longer than the event record allows.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { convert } from '../../archive/convert';
import { lit, openDuck } from '../../archive/duck';
import { formatRows, reportSql } from '../../archive/reports';
import { FakeProvider } from './fake-provider';
import { chat, mapOf, startGateway, type TestGateway } from './harness';

let hot: FakeProvider;
let gw: TestGateway | undefined;
beforeEach(async () => {
  hot = await new FakeProvider().start();
});
afterEach(async () => {
  await gw?.close();
  gw = undefined;
  await hot.stop();
});

async function query<T>(sql: string): Promise<T[]> {
  const duck = await openDuck();
  try {
    return await duck.all<T>(sql);
  } finally {
    duck.close();
  }
}

describe('formula text from callers', () => {
  // (A leading tab cannot reach us in a header: HTTP trims it.)
  const hostile = ['=HYPERLINK("https://evil.example","click")', '+1+2', '-2+3', '@SUM(A1)', "'quoted"];

  it('is written neutralised to .data/events.csv, and the archive and its CSV report give the exact text back', async () => {
    gw = await startGateway(mapOf([hot.url]));
    for (const [i, customer] of hostile.entries()) {
      const res = await chat(gw.url, undefined, { 'x-customer-id': customer, 'x-job-id': `job-${i}` });
      expect(res.status).toBe(200);
    }
    await gw.meter.flush();
    // What a spreadsheet opening the file sees: no cell starts with a formula character.
    const cells = await query<{ customer_id: string }>(
      `SELECT customer_id FROM read_csv(${lit(gw.csv)}, header = true, all_varchar = true) ORDER BY job_id`,
    );
    expect(cells.map((c) => c.customer_id)).toEqual(hostile.map((h) => `'${h}`));

    const out = join(mkdtempSync(join(tmpdir(), 'formula-archive-')), 'arch');
    await convert(gw.csv, { out });
    const archived = await query<{ customer_id: string }>(
      `SELECT customer_id FROM read_parquet(${lit(join(out, '*.parquet'))}) ORDER BY job_id`,
    );
    expect(archived.map((r) => r.customer_id)).toEqual(hostile);

    const asOf = new Date().toISOString().slice(0, 10);
    const duck = await openDuck();
    try {
      const { columns, rows } = await duck.query(reportSql('customers', out, asOf));
      const report = formatRows(rows, columns, 'csv').split('\n').slice(1);
      expect(report.some((line) => line.startsWith(`"'=HYPERLINK(""https://evil.example"",""click"")"`))).toBe(true);
      expect(report.filter((line) => /^[=+\-@\t\r]/.test(line))).toEqual([]);
    } finally {
      duck.close();
    }
  });
});

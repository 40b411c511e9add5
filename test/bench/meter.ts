// npm run bench:meter — spreadsheet service calls and time per operation of the built bundle,
// against events tabs of 1k, 10k and 100k rows. The call counts must not grow with the sheet.
import { randomUUID } from 'node:crypto';
import { FakePlatform, loadBundle, webEvent, type Bundle } from '../meter/fakes/platform';
import { benchUsage } from './usage';

benchUsage(`usage: npm run bench:meter
Spreadsheet service calls, reads and time per meter operation of the built bundle, against events
tabs of 1k, 10k and 100k rows; fails when a call count grows with the sheet. No settings.
`);

const SIZES = [1_000, 10_000, 100_000];
const SECRET = 'bench-secret';

function prepared(rows: number): { platform: FakePlatform; meter: Bundle } {
  const platform = new FakePlatform();
  const meter = loadBundle(platform);
  meter.setup();
  platform.properties.setProperty('SECRET_TOKEN', SECRET);
  const day = Date.parse('2026-11-22T00:00:00Z');
  const data = Array.from({ length: rows }, (_, i) => [
    randomUUID(),
    new Date(day - (i % 40) * 86_400_000),
    'agent',
    'openai',
    'gpt-4o-mini',
    'n/a',
    100,
    20,
    300,
    0.0012,
    '',
    '',
    `job-${i}`,
    `cust-${i % 50}`,
    false,
    false,
    '',
    'n/a',
    '',
  ]);
  const events = platform.spreadsheet.tab('events')!;
  events.loadRows(2, data);
  events.maxRows += 1000; // the headroom ingest keeps when it grows the tab
  return { platform, meter };
}

interface Row {
  operation: string;
  rows: number;
  calls: number;
  reads: number;
  ms: number;
}

function measure(rows: number, operation: string, run: (meter: Bundle) => unknown, before?: (meter: Bundle) => void): Row {
  const { platform, meter } = prepared(rows);
  before?.(meter);
  platform.calls.reset();
  const start = performance.now();
  const out = run(meter) as { getContent?: () => string };
  const ms = performance.now() - start;
  const text = out?.getContent?.();
  if (text && text.startsWith('{') && !JSON.parse(text).ok) throw new Error(`${operation} failed: ${text}`);
  return { operation, rows, calls: platform.calls.total, reads: platform.calls.get('Range.getValues'), ms };
}

export const OPERATIONS: Array<[string, (meter: Bundle) => unknown, ((meter: Bundle) => void)?]> = [
  ['doPost 1 event', (m) => m.doPost(webEvent({ token: SECRET }, { cost_usd: 0.01, customer_id: 'c1' }))],
  [
    'doPost 500 events',
    (m) => m.doPost(webEvent({ token: SECRET }, { events: Array.from({ length: 500 }, (_, i) => ({ cost_usd: 0.01, job_id: `b${i}` })) })),
  ],
  [
    'doPost 500 duplicates',
    (m) => {
      const body = { events: Array.from({ length: 500 }, (_, i) => ({ event_id: `dup-${i}`, cost_usd: 0.01 })) };
      m.doPost(webEvent({ token: SECRET }, body));
      return m.doPost(webEvent({ token: SECRET }, body));
    },
  ],
  ['doGet spend', (m) => m.doGet(webEvent({ token: SECRET, action: 'spend' }))],
  ['checkSpendCaps', (m) => m.checkSpendCaps()],
  ['exportArchive', (m) => m.exportArchive()],
  ['applyRetention', (m) => m.applyRetention(), (m) => m.exportArchive()],
  ['refreshDigest', (m) => m.refreshDigest()],
];

const results: Row[] = [];
for (const [name, run, before] of OPERATIONS) for (const rows of SIZES) results.push(measure(rows, name, run, before));

console.log('Meter bench: service calls and time per operation of the built bundle (in-memory fakes)\n');
console.log('calls = every service call; reads = Range.getValues calls; time in the fakes (the real service adds network time per call)\n');
console.log(`${'operation'.padEnd(24)}${SIZES.map((s) => `${(s / 1000).toString()}k rows`.padStart(32)).join('')}`);
for (const [name] of OPERATIONS) {
  const cells = SIZES.map((s) => {
    const r = results.find((x) => x.operation === name && x.rows === s)!;
    return `${r.calls} calls, ${r.reads} read, ${r.ms.toFixed(1)} ms`.padStart(32);
  });
  console.log(`${name.padEnd(24)}${cells.join('')}`);
}
const growing = OPERATIONS.filter(([name]) => new Set(results.filter((r) => r.operation === name).map((r) => r.calls)).size > 1);
console.log(
  growing.length === 0
    ? '\nCall counts are the same at every sheet size.'
    : `\nCall counts grow with the sheet for: ${growing.map(([n]) => n).join(', ')}`,
);
process.exitCode = growing.length === 0 ? 0 : 1;

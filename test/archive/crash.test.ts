// A run of npm run archive killed (kill -9, power loss) while it moves its files into the archive:
// the next run, or a report before it, sees every event once, never twice and never lost.
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { convert } from '../../archive/convert';
import { openDuck } from '../../archive/duck';
import { expireArchive } from '../../archive/expire';
import { runReport } from '../../archive/reports';
import { spawn } from '../children';
import { csvIn, report, root, scratchDir } from './archive-setup';

const scratch = scratchDir();
const files = (out: string) =>
  readdirSync(out, { recursive: true })
    .map(String)
    .filter((f) => f.endsWith('.parquet') && !f.startsWith('.archive-tmp-'))
    .sort();

/**
 * Runs `npm run archive` in a process of its own that is killed (SIGKILL) right after its `after`-th
 * day file is renamed into the archive: the archive is left on disk exactly as a kill leaves it.
 */
async function killedRun(input: string, out: string, partition: boolean, after: number): Promise<void> {
  const code = `
    const fs = require('node:fs');
    const { syncBuiltinESMExports } = require('node:module');
    const rename = fs.renameSync;
    let n = 0;
    fs.renameSync = (from, to) => {
      rename(from, to);
      if (String(to).endsWith('.parquet') && ++n === ${after}) process.kill(process.pid, 'SIGKILL');
    };
    syncBuiltinESMExports();
    process.argv = [process.argv[0], 'bin/archive.ts', 'convert', ${JSON.stringify(input)}, '--out', ${JSON.stringify(out)}${partition ? ", '--partition'" : ''}];
    import('./bin/archive.ts');`;
  const child = spawn(process.execPath, ['--import', 'tsx', '-e', code], { cwd: root, stdio: 'ignore' });
  const signal = await new Promise((resolve) => child.once('exit', (_code, s) => resolve(s)));
  expect(signal).toBe('SIGKILL');
}

const daily = async (out: string) => (await report('export-daily', out, '2026-11-22')).map((r) => [r.day, r.cost_usd]);

describe('a run killed while it publishes', () => {
  it('an event that moved to another day is counted once, by a report right after the kill and after the next nightly run', async () => {
    const out = join(scratch(), 'arch');
    await convert(
      csvIn(scratch(), [
        { event_id: 'a', timestamp: '2026-11-21T00:01:00Z', provider: 'openai', cost_usd: 1 },
        { event_id: 'b', timestamp: '2026-11-20T10:00:00Z', provider: 'openai', cost_usd: 2 },
      ]),
      { out },
    );
    // a exported again with the timestamp of the day before: day 20 is written first, day 21 (without a) second.
    await killedRun(
      csvIn(scratch(), [{ event_id: 'a', timestamp: '2026-11-20T23:59:00Z', provider: 'openai', cost_usd: 1 }]),
      out,
      false,
      1,
    );
    expect(await daily(out)).toEqual([['2026-11-20', 3]]);
    // The next night's input holds none of these events.
    await convert(csvIn(scratch(), [{ event_id: 'd', timestamp: '2026-11-22T08:00:00Z', provider: 'openai', cost_usd: 4 }]), { out });
    expect(await daily(out)).toEqual([
      ['2026-11-20', 3],
      ['2026-11-22', 4],
    ]);
    expect(files(out)).toEqual(['events_20261120.parquet', 'events_20261122.parquet']);
  }, 60_000);

  it('archive:expire finishes it too, before it removes anything', async () => {
    const out = join(scratch(), 'arch');
    const events = [
      { event_id: 'a', timestamp: '2026-11-21T09:00:00Z', provider: 'anthropic', cost_usd: 1 },
      { event_id: 'b', timestamp: '2026-11-21T10:00:00Z', provider: 'openai', cost_usd: 2 },
    ];
    await convert(csvIn(scratch(), events), { out, partition: true });
    await killedRun(csvIn(scratch(), events), out, false, 1);
    const result = expireArchive(out, 36_500, new Date('2026-11-22T00:00:00Z'));
    expect(result.left).toEqual([expect.stringMatching(/^finished the publish of a run that was killed/)]);
    expect(files(out)).toEqual(['events_20261121.parquet']);
    expect(await daily(out)).toEqual([['2026-11-21', 3]]);
  }, 60_000);

  for (const after of [1, 2]) {
    it(`a day changing layout (flat to --partition), killed after ${after} of its 2 files: counted once, in the new layout`, async () => {
      const out = join(scratch(), 'arch');
      const events = [
        { event_id: 'a', timestamp: '2026-11-21T09:00:00Z', provider: 'anthropic', cost_usd: 1 },
        { event_id: 'b', timestamp: '2026-11-21T10:00:00Z', provider: 'openai', cost_usd: 2 },
      ];
      await convert(csvIn(scratch(), events), { out });
      await killedRun(csvIn(scratch(), events), out, true, after);
      expect(await daily(out)).toEqual([['2026-11-21', 3]]);
      await convert(csvIn(scratch(), [{ event_id: 'd', timestamp: '2026-11-22T08:00:00Z', provider: 'openai', cost_usd: 4 }]), {
        out,
        partition: true,
      });
      expect(await daily(out)).toEqual([
        ['2026-11-21', 3],
        ['2026-11-22', 4],
      ]);
      expect(files(out)).toEqual([
        'provider=anthropic/day=20261121/events_20261121.parquet',
        'provider=openai/day=20261121/events_20261121.parquet',
        'provider=openai/day=20261122/events_20261122.parquet',
      ]);
    }, 60_000);
  }
});

describe('a report beside a run', () => {
  it('a run that moves its files in between the listing of the day files and their reading: the report lists them again, and counts each event once', async () => {
    const out = join(scratch(), 'arch');
    const events = [
      { event_id: 'a', timestamp: '2026-11-21T09:00:00Z', provider: 'anthropic', cost_usd: 1 },
      { event_id: 'b', timestamp: '2026-11-21T10:00:00Z', provider: 'openai', cost_usd: 2 },
    ];
    await convert(csvIn(scratch(), events), { out });
    const duck = await openDuck();
    try {
      let reads = 0;
      const rows = await runReport('export-daily', out, '2026-11-21', async (sql) => {
        // The run with --partition writes the day in the new layout and removes the flat file just listed.
        if (reads++ === 0) await convert(csvIn(scratch(), events), { out, partition: true });
        return duck.all(sql);
      });
      expect(rows.map((r) => [r.day, r.cost_usd])).toEqual([['2026-11-21', 3]]);
    } finally {
      duck.close();
    }
  }, 60_000);
});

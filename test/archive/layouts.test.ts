// A day is one set of rows whatever layout wrote it: a run with the other layout (--partition added or
// forgotten one night) merges with the day's stored files instead of adding its rows beside them.
import { createHash } from 'node:crypto';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { convert } from '../../archive/convert';
import { csvIn, report, rowsIn, scratchDir } from './archive-setup';

const scratch = scratchDir();
const files = (out: string) =>
  readdirSync(out, { recursive: true })
    .map(String)
    .filter((f) => f.endsWith('.parquet'))
    .sort();

describe('switching layouts', () => {
  for (const [first, second] of [
    [false, true],
    [true, false],
  ]) {
    it(`the same input archived ${first ? 'partitioned' : 'flat'} then ${second ? 'partitioned' : 'flat'}: each event once, in the new layout`, async () => {
      const out = join(scratch(), 'arch');
      const events = [
        { event_id: 'a', timestamp: '2026-11-21T09:00:00Z', provider: 'openai', cost_usd: 0.05 },
        { event_id: 'b', timestamp: '2026-11-21T10:00:00Z', provider: 'anthropic', cost_usd: 3.1 },
      ];
      await convert(csvIn(scratch(), events), { out, partition: first });
      await convert(csvIn(scratch(), [...events, { event_id: 'c', timestamp: '2026-11-21T11:00:00Z', provider: 'openai', cost_usd: 1 }]), {
        out,
        partition: second,
      });
      expect((await rowsIn(out)).map((r) => r.event_id)).toEqual(['a', 'b', 'c']);
      expect((await report('export-daily', out)).map((r) => r.cost_usd)).toEqual([4.15]);
      expect(files(out)).toEqual(
        second
          ? ['provider=anthropic/day=20261121/events_20261121.parquet', 'provider=openai/day=20261121/events_20261121.parquet']
          : ['events_20261121.parquet'],
      );
    });
  }
});

describe('--partition with a provider too long for a folder name', () => {
  it("a provider whose escaped name passes the file system's 255 bytes is archived under a short folder, kept whole in the files, once per run", async () => {
    const out = join(scratch(), 'arch');
    const long = 'x'.repeat(300);
    const tokyo = '東京リージョン'.repeat(5); // 35 characters, 315 bytes escaped
    // A provider named as the long one's folder (a caller can send any text): its own events stay too.
    const lookalike = `${long.slice(0, 12)}~${createHash('md5').update(long).digest('hex').slice(0, 16)}`;
    const events = [
      { event_id: 'a', timestamp: '2026-11-21T09:00:00Z', provider: long, cost_usd: 1 },
      { event_id: 'b', timestamp: '2026-11-21T10:00:00Z', provider: tokyo, cost_usd: 2 },
      { event_id: 'c', timestamp: '2026-11-21T11:00:00Z', provider: 'openai', cost_usd: 4 },
      { event_id: 'd', timestamp: '2026-11-21T12:00:00Z', provider: lookalike, cost_usd: 8 },
    ];
    await convert(csvIn(scratch(), events), { out, partition: true });
    await convert(csvIn(scratch(), events), { out, partition: true }); // the same night again: nothing twice
    expect((await rowsIn(out)).map((r) => r.event_id)).toEqual(['a', 'b', 'c', 'd']);
    const daily = await report('daily', out);
    expect(new Map(daily.map((r) => [r.provider, r.cost_usd]))).toEqual(
      new Map([
        [long, 1],
        [tokyo, 2],
        ['openai', 4],
        [lookalike, 8],
      ]),
    );
    for (const f of files(out)) for (const part of f.split('/')) expect(Buffer.byteLength(part)).toBeLessThan(255);
    expect(files(out)).toContain('provider=openai/day=20261121/events_20261121.parquet');
  });

  it('a provider whose folder fits keeps the name it had before: up to 242 bytes escaped, past ASCII too', async () => {
    const out = join(scratch(), 'arch');
    // 242 bytes escaped: provider_dir=<p> is 255, the longest name a file system takes.
    const fits = ['y'.repeat(242), 'é'.repeat(40), `${'z'.repeat(200)} ${'z'.repeat(39)}`];
    const events = [...fits, 'w'.repeat(243)].map((provider, i) => ({
      event_id: `e${i}`,
      timestamp: '2026-11-21T09:00:00Z',
      provider,
      cost_usd: i + 1,
    }));
    await convert(csvIn(scratch(), events), { out, partition: true });
    for (const p of fits) expect(files(out)).toContain(`provider=${encodeURIComponent(p)}/day=20261121/events_20261121.parquet`);
    expect(files(out).filter((f) => f.startsWith(`provider=${'w'.repeat(12)}~`))).toHaveLength(1);
    expect((await rowsIn(out)).map((r) => r.event_id)).toEqual(['e0', 'e1', 'e2', 'e3']);
  });
});

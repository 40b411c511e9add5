// A day is one set of rows whatever layout wrote it: a run with the other layout (--partition added or
// forgotten one night) merges with the day's stored files instead of adding its rows beside them.
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

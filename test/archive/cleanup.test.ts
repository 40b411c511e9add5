// The archive removes only what it wrote: `archive:expire` and `archive --partition` leave every
// folder they did not make (an operator's empty folders, folders shaped like partitions but
// untouched), and remove a partition folder only once they emptied it themselves.
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { convert } from '../../archive/convert';
import { expireArchive } from '../../archive/expire';
import { CSV_HEADER, eventToCsvLine, normalizeEvent, type EventInput } from '../../schema/event-record';

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'archive-cleanup-'));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

function csv(events: EventInput[], name: string): string {
  const lines = events.map((e) => eventToCsvLine(normalizeEvent(e, { now: () => new Date(), uuid: () => 'x' })));
  const file = join(dir, name);
  writeFileSync(file, [CSV_HEADER, ...lines].join('\n') + '\n');
  return file;
}

/** Folders an operator (or another tool) keeps in the archive folder, empty. */
const FOREIGN = ['exports', 'provider=manual', 'provider=openai/day=notes', join('provider=openai', 'scratch')];

describe('the archive removes only the folders it emptied', () => {
  it('archive:expire: the expired day folder and its emptied provider folder go; every other empty folder stays', () => {
    const out = join(dir, 'arch');
    for (const f of FOREIGN) mkdirSync(join(out, f), { recursive: true });
    mkdirSync(join(out, 'provider=p', 'day=20260101'), { recursive: true });
    writeFileSync(join(out, 'provider=p', 'day=20260101', 'events_20260101.parquet'), 'x');
    mkdirSync(join(out, 'backup'), { recursive: true });
    writeFileSync(join(out, 'backup', 'events_20260101.parquet'), 'a copy the operator keeps');

    const result = expireArchive(out, 180, new Date('2026-11-22T05:00:00Z'));

    expect(result.removed.map((f) => f.slice(out.length + 1))).toEqual([join('provider=p', 'day=20260101', 'events_20260101.parquet')]);
    expect(existsSync(join(out, 'provider=p'))).toBe(false);
    for (const f of FOREIGN) expect(existsSync(join(out, f)), f).toBe(true);
    expect(existsSync(join(out, 'backup', 'events_20260101.parquet'))).toBe(true);
  });

  it('archive --partition: rewriting a day keeps every folder it did not empty', async () => {
    const out = join(dir, 'arch');
    for (const f of FOREIGN) mkdirSync(join(out, f), { recursive: true });
    await convert(csv([{ event_id: 'a', timestamp: '2026-11-20T09:00:00Z', provider: 'openai', cost_usd: 1 }], 'one.csv'), {
      out,
      partition: true,
    });
    // The same event under another provider: its old day file is replaced, its folders emptied.
    await convert(csv([{ event_id: 'a', timestamp: '2026-11-20T09:00:00Z', provider: 'anthropic', cost_usd: 1 }], 'two.csv'), {
      out,
      partition: true,
      replace: true,
    });
    expect(existsSync(join(out, 'provider=openai', 'day=20261120'))).toBe(false);
    for (const f of FOREIGN) expect(existsSync(join(out, f)), f).toBe(true);
    expect(readdirSync(join(out, 'provider=anthropic', 'day=20261120'))).toEqual(['events_20261120.parquet']);
  });
});

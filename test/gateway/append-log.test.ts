// The file appends behind the local events CSV and the meter spool (append-log.ts), on a disk that
// fills in the middle of a write and is freed again: a real process whose file size limit stands in
// for the full disk (the kernel writes part of the lines, then refuses the rest), raised again.
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { appendThroughFullDisk, hasPrlimit } from '../full-disk';

/** Ten lines of about 300 bytes, as many rows of events: more than the 1 KiB the disk takes at first. */
const LINES = Array.from({ length: 10 }, (_, i) => `evt-${i},${'x'.repeat(290)}`);

describe('appending to a file on a disk that fills', () => {
  // The retry wrote its lines straight after the part of a line the failed write had left, so the
  // first of them ran into it: one line of two events, which the archive refuses (an event lost).
  it.skipIf(!hasPrlimit)(
    'every line is written whole once the disk takes writes again; the cut part stays a line of its own',
    async () => {
      const file = join(mkdtempSync(join(tmpdir(), 'append-full-')), 'events.csv');
      await appendThroughFullDisk(file, 'event_id,text', LINES);
      const [header, ...rest] = readFileSync(file, 'utf8').split('\n');
      expect(header).toBe('event_id,text');
      expect(rest.pop()).toBe(''); // the file ends with a line break
      const cut = rest.filter((line) => !LINES.includes(line));
      expect(rest.filter((line) => LINES.includes(line))).toEqual(LINES); // every line whole, in order
      expect(cut).toHaveLength(1);
      expect(LINES.some((line) => line.startsWith(cut[0]))).toBe(true);
    },
    30_000,
  );
});

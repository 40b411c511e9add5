// The file appends behind the local events CSV and the meter spool (append-log.ts), on a disk that
// fills in the middle of a write and is freed again: a real process whose file size limit stands in
// for the full disk (the kernel writes part of the lines, then refuses the rest), raised again.
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { spawn } from '../children';

const root = join(import.meta.dirname, '..', '..');
const hasPrlimit = spawnSync('prlimit', ['--version']).status === 0;

/** Ten lines of about 300 bytes, as many rows of events: more than the 1 KiB the disk takes at first. */
const LINES = Array.from({ length: 10 }, (_, i) => `evt-${i},${'x'.repeat(290)}`);

describe('appending to a file on a disk that fills', () => {
  // The retry wrote its lines straight after the part of a line the failed write had left, so the
  // first of them ran into it: one line of two events, which the archive refuses (an event lost).
  it.skipIf(!hasPrlimit)(
    'every line is written whole once the disk takes writes again; the cut part stays a line of its own',
    async () => {
      const file = join(mkdtempSync(join(tmpdir(), 'append-full-')), 'events.csv');
      const source = JSON.stringify(join(root, 'gateway/src/append-log.ts'));
      const code = `import(${source}).then(async ({ AppendLog }) => {
      const log = new AppendLog(${JSON.stringify(file)}, { header: 'event_id,text', onError: (m) => console.error(m) });
      for (const line of ${JSON.stringify(LINES)}) void log.append(line);
      for (;;) { try { await log.written(); break; } catch { await new Promise((r) => setTimeout(r, 50)); } }
      console.log('written');
    });`;
      // A soft file size limit of 1 KiB, its signal ignored: writes past it fail (EFBIG), as on a full disk.
      const child = spawn('bash', ['-c', `trap '' XFSZ; ulimit -S -f 1; exec "${process.execPath}" --import tsx -e "$0"`, code], {
        cwd: root,
      });
      let err = '';
      let out = '';
      child.stderr!.on('data', (d) => (err += d));
      child.stdout!.on('data', (d) => (out += d));
      await expect.poll(() => err, { timeout: 10_000 }).toMatch(/line\(s\) kept in memory/);
      execFileSync('prlimit', ['--pid', String(child.pid), '--fsize=unlimited:unlimited']); // the disk has room again
      await expect.poll(() => out, { timeout: 10_000 }).toContain('written');
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

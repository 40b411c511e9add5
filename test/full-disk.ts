/**
 * The gateway's own appender (append-log.ts) writing on a disk that fills: a child process whose
 * soft file size limit (1 KiB, its signal ignored) makes writes past it fail (EFBIG), as on a full
 * disk. The kernel takes part of the lines, then refuses the rest; once the appender has said so,
 * the limit is lifted (the disk has room again) and the child waits until every line is written.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { expect } from 'vitest';
import { spawn } from './children';

const root = join(import.meta.dirname, '..');

/** prlimit (util-linux), which lifts the child's limit, is on this machine. */
export const hasPrlimit = spawnSync('prlimit', ['--version']).status === 0;

/** Appends `lines` to `file` (created with `header`) through a disk that fills, then has room again. */
export async function appendThroughFullDisk(file: string, header: string, lines: string[]): Promise<void> {
  const source = JSON.stringify(join(root, 'gateway/src/append-log.ts'));
  const code = `import(${source}).then(async ({ AppendLog }) => {
    const log = new AppendLog(${JSON.stringify(file)}, { header: ${JSON.stringify(header)}, onError: (m) => console.error(m) });
    for (const line of ${JSON.stringify(lines)}) void log.append(line);
    for (;;) { try { await log.written(); break; } catch { await new Promise((r) => setTimeout(r, 50)); } }
    console.log('written');
  });`;
  const child = spawn('bash', ['-c', `trap '' XFSZ; ulimit -S -f 1; exec "${process.execPath}" --import tsx -e "$0"`, code], {
    cwd: root,
  });
  let err = '';
  let out = '';
  child.stderr!.on('data', (d) => (err += d));
  child.stdout!.on('data', (d) => (out += d));
  await expect.poll(() => err, { timeout: 10_000 }).toMatch(/line\(s\) kept in memory/);
  execFileSync('prlimit', ['--pid', String(child.pid), '--fsize=unlimited:unlimited']);
  await expect.poll(() => out, { timeout: 10_000 }).toContain('written');
}

// One npm run archive per archive folder: a second run while one writes would replace its merged day.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, utimesSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { convert } from '../../archive/convert';
import { spawn } from '../children';
import { csvIn, root, rowsIn, scratchDir } from './archive-setup';

const scratch = scratchDir();
const day = (id: string) => ({ event_id: id, timestamp: '2026-11-21T09:00:00Z', cost_usd: 1 });

describe('one run per archive folder', () => {
  it('two runs at once into a stored day: no event of a run that said it archived is lost', async () => {
    const out = join(scratch(), 'arch');
    await convert(csvIn(scratch(), [day('stored')]), { out });
    const runs = await Promise.allSettled([
      convert(csvIn(scratch(), [day('first')]), { out }),
      convert(csvIn(scratch(), [day('second')]), { out }),
    ]);
    const archived = ['first', 'second'].filter((_, i) => runs[i].status === 'fulfilled');
    const ids = (await rowsIn(out)).map((r) => r.event_id);
    expect(ids).toEqual(['stored', ...archived].sort());
    const refused = runs.filter((r) => r.status === 'rejected');
    expect(refused).toHaveLength(1);
    expect(String((refused[0] as PromiseRejectedResult).reason)).toMatch(
      /another npm run archive or archive:expire \(pid \d+ on .*\) is writing this archive/,
    );
    expect(existsSync(join(out, '.archive-lock'))).toBe(false);
  });

  it('a run of another live process holds the folder; the lock of a process that is gone (kill -9) is taken over', async () => {
    const out = join(scratch(), 'arch');
    mkdirSync(out);
    const other = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)'], { stdio: 'ignore' });
    try {
      writeFileSync(join(out, '.archive-lock'), `${other.pid}\n${hostname()}\n${Date.now()}\n`);
      await expect(convert(csvIn(scratch(), [day('a')]), { out })).rejects.toThrow(`pid ${other.pid} on ${hostname()}`);
      expect(await rowsIn(out).catch(() => [])).toEqual([]);
    } finally {
      other.kill('SIGKILL');
    }
    await new Promise((done) => (other.exitCode === null && other.signalCode === null ? other.once('exit', done) : done(null)));
    const result = await convert(csvIn(scratch(), [day('a')]), { out });
    expect(result.rows).toBe(1);
    expect((await rowsIn(out)).map((r) => r.event_id)).toEqual(['a']);
    expect(existsSync(join(out, '.archive-lock'))).toBe(false);
  });

  // On a full disk the lock file was made but its content refused: the empty lock it left held
  // the folder for a day ("pid 0 on , started …"), every run refused until it was removed by hand.
  it('a run on a full disk fails as it takes the lock and leaves none: the next run, with room again, archives', async () => {
    const out = join(scratch(), 'arch');
    mkdirSync(out);
    const input = csvIn(scratch(), [day('a')]);
    // A file size limit of 0, its signal ignored, stands in for the full disk: files are made, no byte is taken.
    const child = spawn(
      'bash',
      ['-c', `trap '' XFSZ; ulimit -S -f 0; exec "${process.execPath}" --import tsx bin/archive.ts convert "$0" --out "$1"`, input, out],
      { cwd: root },
    );
    let err = '';
    child.stderr!.on('data', (d) => (err += d));
    const status = await new Promise((done) => child.once('exit', done));
    expect(status).toBe(1);
    expect(err).toMatch(/EFBIG|ENOSPC/);
    expect(existsSync(join(out, '.archive-lock'))).toBe(false);
    expect((await convert(input, { out })).rows).toBe(1);
    expect((await rowsIn(out)).map((r) => r.event_id)).toEqual(['a']);
  });

  it('a lock cut short as it was written (empty, garbled) is dated by its file: refused within a day, taken over after', async () => {
    const out = join(scratch(), 'arch');
    mkdirSync(out);
    const lock = join(out, '.archive-lock');
    writeFileSync(lock, '');
    await expect(convert(csvIn(scratch(), [day('a')]), { out })).rejects.toThrow(`remove ${lock}`);
    const twoDaysAgo = new Date(Date.now() - 2 * 86_400_000);
    for (const cut of ['', '123', '123\nother-host\n1e99']) {
      writeFileSync(lock, cut);
      utimesSync(lock, twoDaysAgo, twoDaysAgo);
      expect((await convert(csvIn(scratch(), [day('a')]), { out })).rows, JSON.stringify(cut)).toBe(1);
      expect(existsSync(lock)).toBe(false);
    }
  });

  it('runs that find the same takeover file left by a killed run (over 10 s old) clear it: none fails with ENOENT', async () => {
    const out = join(scratch(), 'arch');
    mkdirSync(out);
    // Each run finds a dead run's lock and its takeover file, as a run killed while taking over left
    // them, and takes the folder or is refused; many rounds, so two clear the same file at once.
    const code = `
      import { utimesSync, writeFileSync } from 'node:fs';
      import { lockArchive } from './archive/lock.ts';
      const out = ${JSON.stringify(out)};
      const old = new Date(Date.now() - 60_000);
      const dead = ${JSON.stringify(`2147483646\n${hostname()}\n1\n`)};
      const leave = (file, text) => {
        try { writeFileSync(file, text, { flag: 'wx' }); utimesSync(file, old, old); } catch {}
      };
      for (let round = 0; round < 4000; round++) {
        leave(out + '/.archive-lock', dead);
        leave(out + '/.archive-lock.takeover', dead);
        let release = () => {};
        try {
          release = lockArchive(out, Date.now(), (message) => Object.assign(new Error(message), { code: 'REFUSED' }));
        } catch (error) {
          if (error.code !== 'REFUSED') { console.log('round ' + round + ': ' + error.message); process.exit(1); }
        }
        release();
      }
      console.log('done');`;
    const run = () => {
      const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', code], {
        cwd: root,
        stdio: ['ignore', 'pipe', 'inherit'],
      });
      let said = '';
      child.stdout!.on('data', (chunk) => (said += chunk));
      return new Promise<string>((done) => child.once('exit', () => done(said.trim())));
    };
    // before: "round 17: ENOENT: no such file or directory, unlink '…/.archive-lock.takeover'"
    expect(await Promise.all([run(), run()])).toEqual(['done', 'done']);
  });

  it("archive:expire holds the folder too: while another run holds it nothing is removed (exit 1, naming it); a dead run's lock is taken over", async () => {
    const out = join(scratch(), 'arch');
    mkdirSync(out);
    const old = join(out, 'events_20200101.parquet');
    writeFileSync(old, 'x');
    const lock = join(out, '.archive-lock');
    const expire = () =>
      spawnSync(join(root, 'node_modules', '.bin', 'tsx'), ['bin/archive.ts', 'expire', '--archive', out], { cwd: root, encoding: 'utf8' });
    const other = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)'], { stdio: 'ignore' });
    try {
      writeFileSync(lock, `${other.pid}\n${hostname()}\n${Date.now()}\n`);
      const refused = expire();
      expect(refused.status).toBe(1);
      expect(refused.stderr).toContain(`pid ${other.pid} on ${hostname()}`);
      expect(existsSync(old)).toBe(true);
    } finally {
      other.kill('SIGKILL');
    }
    await new Promise((done) => (other.exitCode === null && other.signalCode === null ? other.once('exit', done) : done(null)));
    const taken = expire();
    expect(taken.status, taken.stderr).toBe(0);
    expect(existsSync(old)).toBe(false);
    expect(existsSync(lock)).toBe(false);
  });
});

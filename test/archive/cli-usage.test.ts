// The archive CLI's usage errors: exit status 2 and a message naming the option and what was expected.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { convert } from '../../archive/convert';
import { CALLS_CSV_HEADER } from '../../schema/call-record';
import { CSV_HEADER } from '../../schema/event-record';
import { csvIn, root, scratchDir } from './archive-setup';

const scratch = scratchDir();
const tsx = join(root, 'node_modules', '.bin', 'tsx');
const run = (...args: string[]) => spawnSync(tsx, ['bin/archive.ts', ...args], { cwd: root, encoding: 'utf8' });
const runWith = (env: NodeJS.ProcessEnv, ...args: string[]) =>
  spawnSync(tsx, ['bin/archive.ts', ...args], { cwd: root, encoding: 'utf8', env: { ...process.env, ...env } });

describe('archive CLI usage errors', () => {
  it('archive:expire --days that is not a whole number >= 1 is a usage error naming what came', () => {
    const archive = join(scratch(), 'arch');
    mkdirSync(archive);
    for (const days of ['abc', '10x', '', '1.5', '0']) {
      const r = run('expire', '--archive', archive, '--days', days);
      expect(r.status, days).toBe(2);
      expect(r.stderr).toContain(`--days: expected a whole number of days from 1 to 36500, got "${days}"`);
    }
  });

  it('archive:expire --days beyond 100 years (10000000000 overflowed the date, 1000000 named year 7) is a usage error naming the range; nothing is removed', () => {
    const archive = join(scratch(), 'arch');
    mkdirSync(archive);
    const old = join(archive, 'events_20200101.parquet');
    writeFileSync(old, 'x');
    for (const days of ['10000000000', '36501']) {
      const r = run('expire', '--archive', archive, '--days', days);
      expect([r.status, r.stdout], days).toEqual([2, '']);
      expect(r.stderr.trim()).toBe(`--days: expected a whole number of days from 1 to 36500, got "${days}"`);
    }
    const env = runWith({ ARCHIVE_RETENTION_DAYS: '10000000000' }, 'expire', '--archive', archive);
    expect(env.status).toBe(2);
    expect(env.stderr.trim()).toBe('ARCHIVE_RETENTION_DAYS: expected a whole number of days from 1 to 36500, got "10000000000"');
    expect(existsSync(old)).toBe(true);
    const longest = run('expire', '--archive', archive, '--days', '36500', '--dry-run');
    expect([longest.status, longest.stdout]).toEqual([0, '']);
  }, 60_000);

  // An empty CALLS_CSV_FILE counts as unset, as the gateway reads it: it was "--calls : no such file".
  it('report voice with CALLS_CSV_FILE set empty reads the default .data/calls.csv', () => {
    const dir = scratch();
    const r = spawnSync(tsx, [join(root, 'bin/archive.ts'), 'report', 'voice'], {
      cwd: dir,
      encoding: 'utf8',
      env: { ...process.env, CALLS_CSV_FILE: '' },
    });
    expect(r.status).toBe(2);
    expect(r.stderr).toMatch(/^--calls \.data\/calls\.csv: no such file/);
  });

  it('report --as-of and --since must be real calendar days (2026-02-30 is not), said before DuckDB runs', () => {
    const archive = join(scratch(), 'arch');
    run('convert', csvIn(scratch(), [{ event_id: 'a', timestamp: '2026-11-21T09:00:00Z' }]), '--out', archive);
    for (const asOf of ['2026-02-30', '2026-13-01', '2026-11-21x']) {
      const r = run('report', 'customers', '--archive', archive, '--as-of', asOf);
      expect(r.status, asOf).toBe(2);
      expect(r.stderr).toContain(`--as-of: expected a day as YYYY-MM-DD, got "${asOf}"`);
      expect(r.stderr).not.toContain('Conversion Error');
    }
    const r = run('report', 'voice', '--calls', join(root, 'package.json'), '--since', '2026-02-30');
    expect(r.status).toBe(2);
    expect(r.stderr).toContain('--since: expected a day as YYYY-MM-DD, got "2026-02-30"');
  });

  // The columns were given by position: any CSV was read as calls ("a,b" and one row: 1 call, exit 0),
  // and a folder or the events CSV ended in DuckDB's conversion error and its "Possible solutions".
  it('report voice on a file that is not a calls CSV, or a folder, names it and the header expected, exit 1, no rows', () => {
    const dir = scratch();
    const other = join(dir, 'other.csv');
    writeFileSync(other, 'a,b\n1,2\n');
    const header = `expected the call header "${CALLS_CSV_HEADER}", got`;
    for (const [calls, said] of [
      [other, `--calls ${other}: line 1: ${header} "a,b"`],
      [csvIn(dir, [{ event_id: 'a' }]), `line 1: ${header} "event_id,`],
      [dir, `--calls ${dir}: a folder, expected the calls CSV`],
    ]) {
      const r = run('report', 'voice', '--calls', calls);
      expect([r.status, r.stdout], calls).toEqual([1, '']);
      expect(r.stderr).toContain(said);
      expect(r.stderr).not.toContain('Conversion Error');
    }
  });

  // Its first line was quoted as a header: the file's binary bytes (NULs, escapes) went to the terminal.
  it('a Parquet day file given for the calls CSV or as the archive input is named as one, its bytes not printed, exit 1', async () => {
    const dir = scratch();
    const [parquet] = (await convert(csvIn(dir, [{ event_id: 'a', timestamp: '2026-11-20T10:00:00Z' }]), { out: join(dir, 'arch') })).files;
    const voice = run('report', 'voice', '--calls', parquet);
    expect([voice.status, voice.stdout, voice.stderr]).toEqual([
      1,
      '',
      `--calls ${parquet}: a Parquet file, not a CSV: expected the calls CSV, with the call header "${CALLS_CSV_HEADER}"\n`,
    ]);
    const archive = run('convert', parquet, '--out', join(dir, 'other'));
    expect([archive.status, archive.stdout, archive.stderr]).toEqual([
      1,
      '',
      `${parquet}: a Parquet file, not a CSV: expected an event CSV, with the event header "${CSV_HEADER}"\n`,
    ]);
  });

  // The archive folder was made before the input was looked at: a typo left an empty one, and a folder was "no such file".
  it('archive of a missing input or a folder names it, exit 1, and makes no archive folder', () => {
    const dir = scratch();
    const out = join(dir, 'archive');
    for (const [input, said] of [
      [join(dir, 'nope.csv'), 'no such file'],
      [dir, 'not a file (a folder?), expected an event CSV'],
    ]) {
      const r = run('convert', input, '--out', out);
      expect([r.status, r.stdout, r.stderr], input).toEqual([1, '', `${input}: ${said}\n`]);
      expect(existsSync(out)).toBe(false);
    }
  });

  it('two report names are a usage error (the second was ignored)', () => {
    const r = run('report', 'daily', 'customers', '--archive', scratch());
    expect(r.status).toBe(2);
    expect(r.stderr).toContain('report: expected one report name, got "daily customers"');
  });

  it('an unknown option is a usage error for every command', () => {
    for (const args of [
      ['expire', '--bogus'],
      ['report', 'daily', '--bogus'],
      ['convert', 'x.csv', '--bogus'],
    ]) {
      const r = run(...args);
      expect(r.status, args.join(' ')).toBe(2);
      expect(r.stderr).toContain("'--bogus'");
    }
  });

  // `report daily --since 2026-11-01` printed every day, and `report voice --archive DIR` read
  // .data/calls.csv: an option of the other kind of report was taken and went unread.
  it('an option of the other kind of report is a usage error naming it and the reports that take it; nothing is run', () => {
    const calls = join(scratch(), 'calls.csv');
    writeFileSync(calls, `${CALLS_CSV_HEADER}\n`);
    for (const [args, message] of [
      [
        ['report', 'daily', '--since', '2026-11-01', '--archive', scratch()],
        '--since: only the voice report takes it, not daily (which takes --archive, --format)',
      ],
      [
        ['report', 'burn', '--calls', calls, '--archive', scratch()],
        '--calls: only the voice report takes it, not burn (which takes --archive, --format)',
      ],
      [
        ['report', 'voice', '--calls', calls, '--archive', scratch()],
        '--archive: the voice report does not take it (it takes --calls, --since, --format)',
      ],
      [
        ['report', 'voice', '--calls', calls, '--as-of=2026-11-01'],
        '--as-of: the voice report does not take it (it takes --calls, --since, --format)',
      ],
      // Read by customers alone: `export-daily --as-of 2026-10-31` printed the days after it as well.
      [
        ['report', 'export-daily', '--as-of', '2026-10-31', '--archive', scratch()],
        '--as-of: only the customers report takes it (the as-of day and the 6 before), not export-daily, which reads every day of the archive (it takes --archive, --format)',
      ],
      [
        ['report', 'customers', '--since', '2026-10-31', '--archive', scratch()],
        '--since: only the voice report takes it, not customers (which takes --archive, --as-of, --format)',
      ],
    ] as const) {
      const r = run(...args);
      expect([r.status, r.stdout], args.join(' ')).toEqual([2, '']);
      expect(r.stderr, args.join(' ')).toContain(message);
    }
  });

  // The last of an option given twice won: `--days 180 … --days 18` removed the days of ten times the window meant.
  it('an option given twice is a usage error naming it, for every command; nothing is removed', () => {
    const archive = join(scratch(), 'arch');
    mkdirSync(archive);
    const old = join(archive, 'events_20200101.parquet');
    writeFileSync(old, 'x');
    for (const [option, args] of [
      ['--days', ['expire', '--archive', archive, '--days', '36500', '--days=1']],
      ['--format', ['report', 'daily', '--format', 'csv', '--format', 'json', '--archive', archive]],
      ['--out', ['convert', 'x.csv', '--out', archive, '--out', archive]],
    ] as const) {
      const r = run(...args);
      expect([r.status, r.stdout], args.join(' ')).toEqual([2, '']);
      expect(r.stderr.split('\n')[0], args.join(' ')).toBe(`${option}: given twice; give it once`);
    }
    expect(existsSync(old)).toBe(true);
  });

  it('a missing archive folder is one line naming it, exit 1, for archive:expire as for report', () => {
    const missing = join(scratch(), 'nope');
    for (const args of [
      ['expire', '--archive', missing],
      ['report', 'daily', '--archive', missing],
    ]) {
      const r = run(...args);
      expect(r.status, args[0]).toBe(1);
      expect(r.stderr.trim()).toBe(`--archive ${missing}: no such folder`);
    }
  });

  // An empty folder option (`--out "$ARCHIVE_DIR"`, the variable unset) was the working directory:
  // archive wrote its day files there, and archive:expire removed the day files it found there.
  it('an empty --out or --archive is a usage error, and nothing in the working directory is written or removed', () => {
    const dir = scratch();
    const input = csvIn(dir, [{ event_id: 'a', timestamp: '2026-11-21T09:00:00Z' }]);
    writeFileSync(join(dir, 'events_20200101.parquet'), 'x');
    const before = readdirSync(dir).sort();
    for (const [args, said] of [
      [['convert', input, '--out', ''], '--out: expected a folder, got ""'],
      [['expire', '--archive', '', '--days', '1'], '--archive: expected a folder, got ""'],
      [['report', 'daily', '--archive', ''], '--archive: expected a folder, got ""'],
    ] as const) {
      const r = spawnSync(tsx, [join(root, 'bin', 'archive.ts'), ...args], { cwd: dir, encoding: 'utf8' });
      expect([r.status, r.stdout, r.stderr.trim()], args[0]).toEqual([2, '', said]);
      expect(readdirSync(dir).sort(), args[0]).toEqual(before);
    }
  }, 30_000);

  // report failed with "ENOTDIR: not a directory, scandir …", archive with "EEXIST: file already exists, mkdir …".
  it('a file given as the archive folder (a day file) is one line naming it, exit 1, and the file stays as it was', () => {
    const file = join(scratch(), 'events_20261121.parquet');
    writeFileSync(file, 'x');
    for (const [args, said] of [
      [['report', 'daily', '--archive', file], `--archive ${file}: no such folder`],
      [
        ['convert', csvIn(scratch(), [{ event_id: 'a' }]), '--out', file],
        `--out ${file}: not a folder (a file?), expected the archive folder`,
      ],
    ] as const) {
      const r = run(...args);
      expect([r.status, r.stdout, r.stderr.trim()], args[0]).toEqual([1, '', said]);
      expect(readFileSync(file, 'utf8')).toBe('x');
    }
  });
});

// Every command of package.json answers `--help` and `-h` as command-line tools do: its usage on
// stdout, exit 0, and nothing else (no store asked, no file written, no server started), wherever
// the flag comes. `npm run ops -- --help` was `unknown command "--help"`, exit 2; `npm run keys`
// and `concierge:rates` refused it the same way, `archive` and `concierge:drill` as an unknown
// option, and `npm run lisbon -- --help` ran the whole drill, as every `bench:*` ran its bench
// (`bench:gateway` some ten minutes of it before its streams part saw the flag).
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { beforeEach, describe, expect, it } from 'vitest';
import { csvIn } from '../archive/archive-setup';
import { TEST_REDIS_URL } from '../redis-db';
import { redisUnderPrefix } from '../redis-prefix';

const root = join(import.meta.dirname, '..', '..');
const tsx = join(root, 'node_modules', '.bin', 'tsx');
const scripts = (JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts;
/** Not this repository's commands: the tools' own steps (build, lint, tests, deploy). */
const NOT_COMMANDS = /^(build(:.+)?|prestart|typecheck|lint|format|test|push)$/;
/** Each command as its script runs it, after the build it may start with: [name, program, its arguments]. */
const commands = Object.entries(scripts)
  .filter(([name]) => !NOT_COMMANDS.test(name))
  .map(([name, line]) => {
    const [program, ...words] = line
      .split('&&')
      .at(-1)!
      .trim()
      .replace(/^exec /, '')
      .split(/\s+/);
    return [name, program === 'tsx' ? tsx : program === 'node' ? process.execPath : program, words] as const;
  });
/** A store that is not there: a command that asked it would fail or wait. */
const away = 'redis://127.0.0.1:1/0';
const db = redisUnderPrefix('cli-help');

let dir = '';
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'cli-help-'));
});

/** The environment every run gets: files in this test's folder, the store and Twilio away. */
const environment = (): NodeJS.ProcessEnv => ({
  PATH: process.env.PATH,
  TMPDIR: tmpdir(),
  PORT: '0',
  LOG_LEVEL: 'silent',
  QUEUE_STORE_URL: away,
  CLIENT_KEYS_FILE: join(dir, 'client-keys.json'),
  TELEPHONY_RATES_FILE: join(dir, 'rates.json'),
  TWILIO_ACCOUNT_SID: 'ACsid',
  TWILIO_AUTH_TOKEN: 'token',
  TWILIO_PRICING_URL: 'http://127.0.0.1:1',
});

/** One command run to its end; bounded, so that one that started a server fails (status null) rather than hangs. */
function run(name: string, args: string[], env: NodeJS.ProcessEnv = {}) {
  const [, program, words] = commands.find(([n]) => n === name)!;
  return spawnSync(program, [...words, ...args], { cwd: root, env: { ...environment(), ...env }, encoding: 'utf8', timeout: 15_000 });
}

/** What each command does when not asked for help, with the help flag last: help still wins. */
const ACTING: Record<string, string[]> = {
  ops: ['pause'],
  keys: ['create', 'acme', '--rpm', '60'],
  'routes:diff': ['routes.local.json', 'routes.prod.json'],
  'concierge:lint': ['concierge.json'],
  'concierge:rates': ['US', 'GB'],
  'concierge:drill': ['--config', 'concierge.json'],
  report: ['daily', '--archive', 'archive'],
};

describe('--help and -h', () => {
  it('every command of package.json is among those checked', () => {
    expect(commands.map(([name]) => name).sort()).toEqual(
      [
        'archive',
        'archive:expire',
        'bench:archive',
        'bench:gateway',
        'bench:meter',
        'bench:voice',
        'concierge:drill',
        'concierge:lint',
        'concierge:rates',
        'keys',
        'lisbon',
        'ops',
        'report',
        'routes:diff',
        'start',
        'worker',
      ].sort(),
    );
  });

  for (const [name] of commands) {
    const command = name === 'start' ? 'npm start' : `npm run ${name}`;
    it(`${command}: its usage on stdout, exit 0, the same for -h and after other arguments; nothing written`, () => {
      const help = run(name, ['--help']);
      expect([help.status, help.stderr], 'exit status and stderr').toEqual([0, '']);
      expect(help.stdout).toMatch(new RegExp(`^usage: ${command.replace(/[+.*?^${}()|[\]\\]/g, '\\$&')}( |$)`, 'm'));
      for (const args of [['-h'], [...(ACTING[name] ?? []), '--help']]) {
        const again = run(name, args);
        expect([again.status, again.stdout, again.stderr], args.join(' ')).toEqual([0, help.stdout, '']);
      }
      // The usage printed for help is the one an unknown option is refused with, on stderr.
      const refused = run(name, ['--no-such-option']);
      expect([refused.status, refused.stdout], 'an unknown option').toEqual([2, '']);
      expect(refused.stderr).toContain(help.stdout.split('\n')[0]);
      expect(readdirSync(dir), 'files written').toEqual([]);
    }, 60_000);
  }

  it('npm run keys -- create acme --help makes no key, in Redis or in the key file', async () => {
    const redisEnv = { QUEUE_STORE_URL: TEST_REDIS_URL, REDIS_PREFIX: db.prefix };
    expect(run('keys', ['create', 'acme', '--help'], redisEnv).status).toBe(0);
    expect(await db.redis.keys(`${db.prefix}:*`)).toEqual([]);
    expect(run('keys', ['create', 'acme', '-h'], { QUEUE_STORE_URL: '' }).status).toBe(0);
    expect(existsSync(join(dir, 'client-keys.json'))).toBe(false);
  }, 30_000);

  it('npm run ops -- pause --help leaves the pause flag as it was', async () => {
    const before = await db.redis.get('pause_ai_tasks');
    const help = run('ops', ['pause', '--help'], { QUEUE_STORE_URL: TEST_REDIS_URL, REDIS_PREFIX: db.prefix });
    expect([help.status, help.stderr]).toEqual([0, '']);
    expect(await db.redis.get('pause_ai_tasks')).toBe(before);
    expect(await db.redis.keys(`${db.prefix}:*`)).toEqual([]);
  });

  it('npm run archive -- <csv> --help converts nothing; archive:expire --help removes nothing', () => {
    const inputs = mkdtempSync(join(tmpdir(), 'cli-help-inputs-'));
    const csv = csvIn(inputs, [{ event_id: 'a', timestamp: '2026-11-21T09:00:00Z' }]);
    const out = join(inputs, 'archive');
    expect(run('archive', [csv, '--out', out, '--help']).status).toBe(0);
    expect(existsSync(out)).toBe(false);
    mkdirSync(out);
    const old = join(out, 'events_20200101.parquet');
    writeFileSync(old, 'x');
    expect(run('archive:expire', ['--archive', out, '--days', '1', '--help']).status).toBe(0);
    expect(existsSync(old)).toBe(true);
  }, 30_000);
});

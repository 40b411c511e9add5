// npm run routes:diff as an operator runs it: a missing or broken map is one line naming it, not a stack trace.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';

const root = join(import.meta.dirname, '..', '..');
const tsx = join(root, 'node_modules', '.bin', 'tsx');
const run = (...args: string[]) => spawnSync(tsx, ['bin/routes-diff.ts', ...args], { cwd: root, encoding: 'utf8' });

let dir = '';
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'routes-diff-'));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

describe('npm run routes:diff', () => {
  it('prints the difference of two maps, exit 0', () => {
    const r = run('routes.local.json', 'routes.prod.json');
    expect(r.status).toBe(0);
    expect(r.stdout).toContain('~ hot[0].model: "gpt-4o-mini" → "gpt-4o"');
  });

  it('a map that is missing or not JSON: one line naming the file, exit 1', () => {
    const broken = join(dir, 'broken.json');
    writeFileSync(broken, '{"hot": [');
    for (const [file, problem] of [
      [join(dir, 'missing.json'), 'no such file'],
      [broken, 'not JSON'],
    ]) {
      const r = run(file, 'routes.prod.json');
      expect(r.status, file).toBe(1);
      expect(r.stderr.trim().split('\n')).toHaveLength(1);
      expect(r.stderr).toContain(`${file}: ${problem}`);
      expect(r.stderr).not.toContain('    at ');
    }
  });

  // It takes no options, and read one as a map's file name: "--help: no such file", exit 1.
  it('--help prints the usage, exit 0; an option is a usage error naming it, exit 2, no map read', () => {
    const usage = 'usage: npm run routes:diff -- [a.json] [b.json] (default routes.local.json routes.prod.json)';
    expect(run('--help')).toMatchObject({ status: 0, stdout: `${usage}\n`, stderr: '' });
    for (const args of [['--bogus'], ['routes.local.json', '--prod']]) {
      const r = run(...args);
      expect([r.status, r.stdout], args.join(' ')).toEqual([2, '']);
      expect(r.stderr).toBe(`${usage}, got the option "${args.at(-1)}"\n`);
    }
  });

  it('a map saved with a byte-order mark is read as without one', () => {
    const a = join(dir, 'a.json');
    writeFileSync(a, '\uFEFF{"hot": [], "cheaper_model": "gpt-4o-mini"}');
    const b = join(dir, 'b.json');
    writeFileSync(b, '{"hot": [], "cheaper_model": "gpt-4o"}');
    const r = run(a, b);
    expect([r.status, r.stderr]).toEqual([0, '']);
    expect(r.stdout).toContain('~ cheaper_model: "gpt-4o-mini" → "gpt-4o"\n');
  });

  // The gateway refuses such a map; a diff that showed only the last copy would review a map that never runs.
  it('a map with a key written twice: one line naming the key, exit 1', () => {
    const a = join(dir, 'a.json');
    writeFileSync(a, '{"hot": [{"id": "first"}], "cheaper_model": "gpt-4o", "hot": []}');
    const r = run(a, 'routes.prod.json');
    expect(r.status).toBe(1);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toContain(`${a}: "hot" is written twice`);
  });

  it('more than two maps is a usage error, exit 2', () => {
    const r = run('routes.local.json', 'routes.prod.json', 'routes.local.json');
    expect(r.status).toBe(2);
    expect(r.stderr).toContain('usage: npm run routes:diff -- [a.json] [b.json]');
  });

  it('keys named like object methods (constructor, toString) are compared as any other key', () => {
    const a = join(dir, 'a.json');
    const b = join(dir, 'b.json');
    writeFileSync(a, '{"models": {}}');
    writeFileSync(b, '{"models": {"constructor": 1}}');
    const r = run(a, b);
    expect(r.stdout).toContain('+ models.constructor: 1');
  });
});

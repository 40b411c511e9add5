// `npm start` and `npm run worker` as built (gateway/dist): settings come from the environment only,
// so an argument is refused before anything starts, and --help says so. Both ignored any argument and
// started: `npm start -- --help` was a gateway on 8080, with a worker, until stopped.
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

const root = join(import.meta.dirname, '..', '..');
/** Bounded so that a process that started after all ends the test (null status) rather than hangs it. */
const run = (file: string, args: string[]) =>
  spawnSync(process.execPath, [join(root, 'gateway/dist', file), ...args], {
    cwd: root,
    env: { PATH: process.env.PATH, PORT: '0', LOG_LEVEL: 'silent' },
    encoding: 'utf8',
    timeout: 8_000,
  });

describe('npm start and npm run worker take no arguments', () => {
  for (const [file, command] of [
    ['main.js', 'npm start'],
    ['worker.js', 'npm run worker'],
  ]) {
    it(`${command} -- --port 9000 is refused, exit 2, naming what came; --help prints the usage, exit 0`, () => {
      const typo = run(file, ['--port', '9000']);
      expect([typo.status, typo.stdout]).toEqual([2, '']);
      expect(typo.stderr).toContain(`${command}: expected no arguments, got "--port 9000"\nusage: ${command} (no arguments`);
      const help = run(file, ['--help']);
      expect([help.status, help.stderr]).toEqual([0, '']);
      expect(help.stdout).toMatch(new RegExp(`^usage: ${command} \\(no arguments: its settings are environment values`));
      expect(help.stdout).toContain('docs/gateway.md#environment-values');
    });
  }
});

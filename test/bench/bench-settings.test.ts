// A bench's settings come from the environment: one that is no value the bench takes (a typo of
// BENCH_ONLY or BENCH_METER, a count that is no whole number) is refused at once, naming it (exit
// 2), rather than running nothing and exiting 0, running another part than asked, or crashing
// after the first part with a stack trace.
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

const root = join(import.meta.dirname, '..', '..');
const tsx = join(root, 'node_modules', '.bin', 'tsx');
const bench = (file: string, env: Record<string, string>) =>
  spawnSync(tsx, [`test/bench/${file}`], { cwd: root, encoding: 'utf8', env: { ...process.env, ...env }, timeout: 15_000 });

describe('bench settings from the environment', () => {
  it('bench:gateway refuses a BENCH_ONLY that names no part, and a BENCH_METER that names no sink', () => {
    const only = bench('gateway.ts', { BENCH_ONLY: 'durble' });
    expect(only.stderr).toContain('BENCH_ONLY: expected one of hot, steps, instructions, keys, durable, fleet, streams, got "durble"');
    expect(only.status).toBe(2);
    const meter = bench('gateway.ts', { BENCH_ONLY: 'steps', BENCH_METER: 'webapp' });
    expect(meter.stderr).toContain('BENCH_METER: expected one of csv, web-app, got "webapp"');
    expect(meter.stdout).not.toContain('own steps');
    expect(meter.status).toBe(2);
  }, 60_000);

  it("bench:gateway refuses a count that is no whole number before its first part, the streams bench's too", () => {
    for (const [name, value] of [
      ['BENCH_AB_ROUNDS', 'six'],
      ['BENCH_INSTR_WARMUP', '3e3'],
      ['STREAMS', '1k'],
    ]) {
      const r = bench('gateway.ts', { BENCH_ONLY: 'steps', [name]: value });
      expect(r.stderr).toContain(`${name}: expected a whole number from 1, got "${value}"`);
      expect(r.stdout).not.toContain('own steps');
      expect(r.status).toBe(2);
    }
  }, 60_000);

  it('bench:archive refuses a BENCH_ROWS that is no whole number, and takes one set empty as unset', () => {
    const r = bench('archive.ts', { BENCH_ROWS: '200k' });
    expect(r.stderr.trim()).toBe('BENCH_ROWS: expected a whole number from 1, got "200k"');
    expect(r.status).toBe(2);
    const help = spawnSync(tsx, ['test/bench/archive.ts', '--help'], {
      cwd: root,
      encoding: 'utf8',
      env: { ...process.env, BENCH_ROWS: '' },
    });
    expect(help.status).toBe(0);
  }, 60_000);

  it('bench:voice refuses BENCH_SECONDS, BENCH_CALLS or BENCH_BRIDGE_SECONDS that is no whole number, before anything runs', () => {
    for (const name of ['BENCH_SECONDS', 'BENCH_CALLS', 'BENCH_BRIDGE_SECONDS']) {
      const r = bench('voice.ts', { [name]: '0' });
      expect(r.stderr).toContain(`${name}: expected a whole number from 1, got "0"`);
      expect(r.stdout).toBe('');
      expect(r.status).toBe(2);
    }
  }, 60_000);
});

// `npm run concierge:drill` end to end, as an operator runs it: passes on a filled configuration
// (against Redis, leaving no key behind), and fails naming the step on a configuration that still
// holds a placeholder, and on one whose per-call cap is too high to ever fire.
import { spawn } from '../children';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import type { Concierge } from '../../gateway/src/voice/config';
import { filled } from '../voice/filled';
import { priceStep } from './config-steps';
import { TEST_REDIS_URL } from '../redis-db';

const root = join(import.meta.dirname, '..', '..');
const dir = mkdtempSync(join(tmpdir(), 'concierge-drill-'));
const rates = join(dir, 'rates.json');
const rate = (perMinute: number) => ({
  price_unit: 'USD',
  inbound: { local: perMinute },
  outbound: [],
  fetched_at: '2026-11-23T00:00:00Z',
});
writeFileSync(rates, JSON.stringify({ PT: rate(0.0085), GB: rate(0.01) }));
const REDIS = TEST_REDIS_URL;

/** Runs the real command on a copy of the filled configuration with `change` applied. */
async function drill(name: string, change: (c: Record<string, any>) => void, env: NodeJS.ProcessEnv = {}) {
  const config: Concierge = filled();
  change(config);
  const file = join(dir, `${name}.json`);
  writeFileSync(file, JSON.stringify(config, null, 2));
  return runDrill(['--config', file], env);
}

/** Runs the real command with these arguments (asynchronously: vitest's worker keeps talking). */
async function runDrill(args: string[], env: NodeJS.ProcessEnv) {
  const child = spawn('npm', ['run', '-s', 'concierge:drill', '--', ...args], {
    detached: true, // npm or tsx starts node beneath it: killed with it if the test ends first (children.ts)
    cwd: root,
    env: { ...process.env, TELEPHONY_RATES_FILE: rates, QUEUE_STORE_URL: '', ...env },
    timeout: 150_000,
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d) => (stdout += d));
  child.stderr.on('data', (d) => (stderr += d));
  const status = await new Promise<number | null>((resolve) => child.on('close', resolve));
  const row = (n: number) => new RegExp(`^(PASS|FAIL|TODO) +${n}\\. .*\\n +measured: (.*)$`, 'm').exec(stdout);
  return { stdout, stderr, status, row: (n: number) => ({ status: row(n)?.[1], measured: row(n)?.[2] ?? '' }) };
}

describe('npm run concierge:drill', () => {
  it('passes every step on a filled configuration, with the transcripts for step 9; no Redis key is left', async () => {
    const run = await drill('filled', () => undefined, { QUEUE_STORE_URL: REDIS });
    for (const n of [1, 2, 3, 4, 5, 6, 7, 8]) expect({ n, ...run.row(n) }).toMatchObject({ n, status: 'PASS' });
    expect(run.row(2).measured).toMatch(
      /text_in_per_million 0\.6, text_out_per_million 2\.4 USD; list price of gpt-realtime-mini: audio 10 \/ 20, text 0\.6 \/ 2\.4$/,
    );
    expect(run.row(4).measured).toMatch(/per_call_usd_cap 0\.35: disconnected after \d+ answer\(s\) at 0\.\d+ USD/);
    expect(run.row(4).measured).toMatch(/max_turns 8: escalated at answer 8/);
    expect(run.row(6).measured).toMatch(/calendar events: 1\b/);
    expect(run.row(5).measured).toMatch(/the line said 2 time\(s\) in all.*ended_reason opted_out.*contact \+351910000005: opted_out true/);
    expect(run.row(8).measured).toMatch(
      /voicemail\/CAdrill08night\.mp3 \(the recording\); task 'Callback: Voicemail' due .* \(24\.0 h later\)/,
    );
    expect([run.row(9).status, run.row(10).status]).toEqual(['TODO', 'TODO']);
    expect(run.stdout).toContain(`assistant  ${filled().consent.opening_line}`);
    expect(run.stdout).toMatch(/8 passed, 0 failed; steps 9-10 are yours/);
    expect(run.status).toBe(0);
    const redis = new Redis(REDIS);
    const prefix = /store: Redis \(prefix ([^)]+)\)/.exec(run.stdout)?.[1];
    expect(prefix).toMatch(/^concierge-drill-\d+$/);
    expect(await redis.keys(`${prefix}:*`)).toEqual([]);
    redis.disconnect();
  }, 160_000);

  it('fails naming step 1 on a configuration that still holds a placeholder; the other steps still run', async () => {
    const run = await drill('placeholder', (c) => (c.functions[0].webhook = '<BOOKING_WEBHOOK_URL>'));
    expect(run.row(1)).toEqual({
      status: 'FAIL',
      measured: '1 problem(s): $.functions[0].webhook: placeholder <BOOKING_WEBHOOK_URL> must be replaced',
    });
    expect(run.row(4).status).toBe('PASS');
    expect(run.stdout).toMatch(/1 failed \(1\)/);
    expect(run.status).toBe(1);
  }, 160_000);

  it('step 2 checks the text prices against the price list when they are set, and says when they are not', () => {
    const c = filled() as Record<string, any>;
    c.spend_guard.text_out_per_million = 16;
    expect(priceStep(c)).toMatchObject({
      status: 'FAIL',
      measured: 'text set to 0.6 / 16 USD, but the price list has gpt-realtime-mini at 0.6 / 2.4',
    });
    delete c.spend_guard.text_in_per_million;
    delete c.spend_guard.text_out_per_million;
    expect(priceStep(c)).toMatchObject({
      status: 'PASS',
      measured: expect.stringMatching(/; no text prices: the text tokens go unpriced \(the meter marks those responses UNPRICED\)$/),
    });
  });

  it('fails naming step 4 when the per-call cap is too high to ever fire within a call', async () => {
    const run = await drill('high-cap', (c) => (c.spend_guard.per_call_usd_cap = 1000));
    expect(run.row(4).status).toBe('FAIL');
    expect(run.row(4).measured).toMatch(
      /per_call_usd_cap 1000: NOT disconnected; .* ended turn_cap: the turn cap ended the call first: a cap this high can never fire/,
    );
    expect(run.row(4).measured).toMatch(/max_turns 8: escalated at answer 8/);
    for (const n of [1, 2, 3, 6, 7]) expect(run.row(n).status).toBe('PASS');
    expect(run.stdout).toMatch(/1 failed \(4\)/);
    expect(run.status).toBe(1);
  }, 160_000);

  it('refuses an option given twice, naming it, exit 2, before any step runs', async () => {
    const a = join(dir, 'twice-a.json');
    const b = join(dir, 'twice-b.json');
    writeFileSync(a, JSON.stringify(filled()));
    writeFileSync(b, JSON.stringify(filled()));
    for (const [args, named] of [
      [['--config', a, '--config', b], '--config'],
      [['--countries=PT', '--config', a, '--countries', 'GB'], '--countries'],
    ] as const) {
      const run = await runDrill([...args], {});
      expect(run.status, args.join(' ')).toBe(2);
      expect(run.stdout).not.toContain('Concierge drill:');
      expect(run.stderr).toContain(`${named}: given twice; give it once\nusage: npm run concierge:drill`);
    }
  }, 60_000);

  it('takes CONCIERGE_FILE and TELEPHONY_RATES_FILE set empty (NAME= in an env file) as unset, as the gateway does', async () => {
    const run = await runDrill(['--countries', 'PT'], { CONCIERGE_FILE: '', TELEPHONY_RATES_FILE: '' });
    expect(run.stdout).toMatch(/^Concierge drill: concierge\.json against/m);
    expect(run.row(1).measured).toContain('$.meta.model: placeholder <REALTIME_MODEL> must be replaced');
    expect(run.row(3).measured).toMatch(/^\.data\/telephony-rates\.json: PT /);
    expect(run.status).toBe(1);
  }, 60_000);
});

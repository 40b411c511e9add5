// Breakers across instances, measured: `npx tsx test/bench/fleet-breakers.ts [trials]` (needs Redis,
// QUEUE_STORE_URL or redis://127.0.0.1:6379/9). Each trial starts three whole gateways on one Redis
// with a dead Hot route, sends one request at a time to each, and reports how long after the first
// instance opened its breaker the others opened theirs, and how many calls the dead route got.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { FakeProvider } from '../gateway/fake-provider';
import { chat, listenStack } from '../gateway/harness';
import { median } from './median';

// Set empty (NAME= in an env file) is unset, as the gateway reads it: ioredis took "" for db 0.
const REDIS_URL = process.env.QUEUE_STORE_URL || 'redis://127.0.0.1:6379/9';
const trials = Number(process.argv[2] ?? 10);
const prefix = `bench-fleet-breakers-${process.pid}`;

async function trial(n: number, dir: string) {
  const [hot, warm] = await Promise.all([new FakeProvider().start(), new FakeProvider().start()]);
  hot.always({ kind: 'status', status: 500 });
  const routes = join(dir, `routes-${n}.json`);
  writeFileSync(
    routes,
    JSON.stringify({
      hot: [{ id: `dead-${n}`, provider: 'openai', model: 'gpt-4o-mini', baseUrl: hot.url }],
      warm: [{ provider: 'anthropic', model: 'claude-3-5-haiku-latest', baseUrl: warm.url }],
      cold: { mode: 'graceful_degrade', queue: 'ai-tasks', notify: [] },
    }),
  );
  const env = (i: number) => ({
    ROUTES_FILE: routes,
    QUEUE_STORE_URL: REDIS_URL,
    REDIS_PREFIX: prefix,
    METER_CSV_FILE: join(dir, `e-${n}-${i}.csv`),
    SCOPES_FILE: join(dir, 'none.yaml'),
  });
  const three = await Promise.all([1, 2, 3].map((i) => listenStack(env(i))));
  const openedAt: number[] = [];
  for (const g of three) g.stack.path.routes[0].breaker.onChange((s) => s === 'open' && openedAt.push(performance.now()));
  const allOpen = () => openedAt.length === 3;
  await Promise.all(
    three.map(async (g) => {
      for (let k = 0; k < 10 && !allOpen(); k++) await chat(g.url);
    }),
  );
  const result = { lagMs: Math.max(...openedAt) - Math.min(...openedAt), calls: hot.received.length };
  await Promise.all(three.map((g) => g.stop()));
  await Promise.all([hot.stop(), warm.stop()]);
  return result;
}

const dir = mkdtempSync(join(tmpdir(), 'bench-fleet-'));
const redis = new Redis(REDIS_URL);
try {
  const results = [];
  for (let n = 0; n < trials; n++) results.push(await trial(n, dir));
  const lags = results.map((r) => r.lagMs).sort((a, b) => a - b);
  const calls = results.map((r) => r.calls);
  console.log(`${trials} trials, 3 instances, one request at a time each, a dead Hot route`);
  console.log(`last instance open after the first: median ${median(lags).toFixed(1)} ms, max ${lags.at(-1)!.toFixed(1)} ms`);
  console.log(`calls the dead route got: ${calls.join(', ')} (goal: at most 5 + 2 in flight)`);
} finally {
  const keys = await redis.keys(`${prefix}*`);
  if (keys.length) await redis.del(...keys);
  redis.disconnect();
  rmSync(dir, { recursive: true, force: true });
}

// `npm run lisbon` end to end against the real Redis: every step passes and it exits 0, and a
// Redis the fleet shares keeps its own pause flag as it was (the drill pauses a flag of its own).
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { expect, it } from 'vitest';
import { TEST_REDIS_URL } from '../redis-db';

it("the Lisbon drill passes its five steps, leaving the fleet's pause flag alone", async () => {
  const root = join(import.meta.dirname, '..', '..');
  const redis = new Redis(TEST_REDIS_URL);
  await redis.set('pause_ai_tasks', '1'); // the fleet paused by its budget before the drill
  const run = spawnSync(join(root, 'node_modules', '.bin', 'tsx'), ['test/lisbon/drill.ts'], {
    cwd: root,
    encoding: 'utf8',
    env: { ...process.env, QUEUE_STORE_URL: TEST_REDIS_URL },
    timeout: 120_000,
  });
  const fleetPause = await redis.get('pause_ai_tasks');
  await redis.del('pause_ai_tasks');
  redis.disconnect();
  expect(run.stdout).toContain('5 passed, 0 failed');
  expect(run.status).toBe(0);
  expect(fleetPause).toBe('1');
}, 130_000);

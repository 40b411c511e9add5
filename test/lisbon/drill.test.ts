// `npm run lisbon` end to end against the real Redis: every step passes and it exits 0.
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { expect, it } from 'vitest';
import { TEST_REDIS_URL } from '../redis-db';

it('the Lisbon drill passes its five steps', () => {
  const root = join(import.meta.dirname, '..', '..');
  const run = spawnSync(join(root, 'node_modules', '.bin', 'tsx'), ['test/lisbon/drill.ts'], {
    cwd: root,
    encoding: 'utf8',
    env: { ...process.env, QUEUE_STORE_URL: TEST_REDIS_URL },
    timeout: 120_000,
  });
  expect(run.stdout).toContain('5 passed, 0 failed');
  expect(run.status).toBe(0);
}, 130_000);

import { spawnSync } from 'node:child_process';
// The Redis database of this test run: test/redis-run.ts (vitest's global setup) claims one no other
// run uses, so keys with fixed names (`pause_ai_tasks`) cannot meet another run's,
// and empties it afterwards. Outside vitest (a file run by hand), database 9.
export const TEST_REDIS_DB = Number(process.env.TEST_REDIS_DB ?? 9);
export const TEST_REDIS_URL = `redis://127.0.0.1:6379/${TEST_REDIS_DB}`;

/**
 * Whether this machine has a redis-server binary, for the tests that run a Redis of their own (to
 * stop, restart or fill it). CI installs one when no Redis answers; one that answers as a service
 * may come without it, and those tests are then skipped.
 */
export const hasRedisServer = spawnSync('redis-server', ['--version']).status === 0;

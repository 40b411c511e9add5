// The Redis database of this test run: test/redis-run.ts (vitest's global setup) claims one no other
// run uses, so keys with fixed names (the contract's `pause_ai_tasks`) cannot meet another run's,
// and empties it afterwards. Outside vitest (a file run by hand), database 9.
export const TEST_REDIS_DB = Number(process.env.TEST_REDIS_DB ?? 9);
export const TEST_REDIS_URL = `redis://127.0.0.1:6379/${TEST_REDIS_DB}`;

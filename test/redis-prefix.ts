// A contract suite's Redis: one connection to the test run's database for the file, and every key
// under the file's own prefix removed after each test.
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll } from 'vitest';
import { TEST_REDIS_URL } from './redis-db';

export function redisUnderPrefix(name: string): { readonly prefix: string; readonly redis: Redis } {
  const prefix = `test-${name}-${process.pid}`;
  let redis: Redis;
  beforeAll(() => {
    redis = new Redis(TEST_REDIS_URL);
  });
  afterEach(async () => {
    const keys = await redis.keys(`${prefix}:*`);
    if (keys.length) await redis.del(...keys);
  });
  afterAll(() => redis.disconnect());
  return {
    prefix,
    get redis() {
      return redis;
    },
  };
}

// Redis away for long: the commands a request sends and waits for only briefly (a limit check, an
// idempotency claim, a client key's lookup, a response's owner) were held by ioredis until Redis came
// back, one or more per request however long the outage: 2,000 requests through the gateway left
// 4,015 held, an hour at 1,000 requests a second millions. Held past MAX_HELD, they are not sent.
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';
import { ClientAuth } from '../../gateway/src/client-auth';
import { RedisKeyStore } from '../../gateway/src/client-keys-redis';
import { RedisLimiter } from '../../gateway/src/rate-limit';
import { MAX_HELD } from '../../gateway/src/redis-held';
import { RedisReplayStore } from '../../gateway/src/replay-store-redis';
import { RedisResponseOwners } from '../../gateway/src/response-owners';
import { hasRedisServer, TEST_REDIS_DB } from '../redis-db';
import { RedisProxy } from '../redis-proxy';
import { freePort, OwnRedis } from '../own-redis';

/** Every request beyond the bound, each with a value of its own (tenant, key, id). */
const REQUESTS = MAX_HELD + 5_000;

const connections: Redis[] = [];
afterEach(() => {
  for (const c of connections.splice(0)) c.disconnect();
});

/** A connection as the gateway makes it (stores.ts: commands wait for Redis), to `port`. */
function connect(port: number): Redis {
  const redis = new Redis({ host: '127.0.0.1', port, maxRetriesPerRequest: null, retryStrategy: () => 50 });
  redis.on('error', () => undefined); // refused: nothing listens
  connections.push(redis);
  return redis;
}

/** The commands ioredis holds for the connection: not sent yet, or sent and not answered. */
const held = (redis: Redis) => {
  const q = redis as unknown as { offlineQueue: { length: number }; commandQueue: { length: number } };
  return q.offlineQueue.length + q.commandQueue.length;
};

/** A connection to a port nothing listens on: Redis away from the start. */
const away = async () => connect(await freePort());

describe('Redis away: what a request sends is not held without bound', () => {
  it('rate-limit checks of tenants each of its own', async () => {
    const redis = await away();
    const limiter = new RedisLimiter(redis, 'held', { tenant_requests_per_minute: 10, provider_tokens_per_minute: { openai: 1000 } });
    for (let i = 0; i < REQUESTS; i++) {
      void limiter.hitRequest(`tenant-${i}`).catch(() => undefined);
      void limiter.providerWait('openai').catch(() => undefined);
    }
    expect(held(redis)).toBeLessThanOrEqual(MAX_HELD);
  });

  it('idempotency claims of keys each of its own', async () => {
    const redis = await away();
    const store = new RedisReplayStore(redis, 'held');
    for (let i = 0; i < REQUESTS; i++) void store.claim(`key-${i}`, 'fp', 30_000).catch(() => undefined);
    expect(held(redis)).toBeLessThanOrEqual(MAX_HELD);
  });

  it('lookups of made-up client keys, each of its own', async () => {
    const redis = await away();
    const auth = new ClientAuth(new RedisKeyStore(redis, 'held'), { warn: () => undefined, lookupTimeoutMs: 60_000 });
    for (let i = 0; i < REQUESTS; i++) void Promise.resolve(auth.check(`Bearer gk_${randomBytes(24).toString('base64url')}`));
    expect(held(redis)).toBeLessThanOrEqual(MAX_HELD);
  });

  it('owner checks and records of responses each of its own', async () => {
    const redis = await away();
    const owners = new RedisResponseOwners(redis, 'held');
    for (let i = 0; i < REQUESTS; i++) {
      void owners.owners([`resp_${i}`]).catch(() => undefined);
      void owners.claim({ tenant: 'acme', provider: 'openai' }, [`resp_new_${i}`]).catch(() => undefined);
    }
    expect(held(redis)).toBeLessThanOrEqual(MAX_HELD);
  });
});

describe.skipIf(!hasRedisServer)('Redis back after such an outage', () => {
  it('tokens spent while it took no more commands count against the budget once it is back; limits are checked again', async () => {
    const own = await new OwnRedis().start();
    try {
      const redis = connect(own.port);
      await redis.ping();
      const limiter = new RedisLimiter(redis, 'held', { tenant_requests_per_minute: 1, provider_tokens_per_minute: { openai: 1000 } });
      await own.stop();
      await expect.poll(() => redis.status).not.toBe('ready');
      for (let i = 0; i < REQUESTS; i++) void limiter.hitRequest(`tenant-${i}`).catch(() => undefined);
      expect(held(redis)).toBe(MAX_HELD);
      limiter.spendTokens('openai', 600); // kept, not sent
      await expect(limiter.hitRequest('acme')).rejects.toThrow(/not sent/);
      await own.start();
      await expect.poll(() => redis.status === 'ready' && held(redis) === 0, { timeout: 10_000 }).toBe(true);
      limiter.spendTokens('openai', 600);
      expect(await limiter.providerWait('openai')).toBeGreaterThan(0); // 1,200 of 1,000 counted
      expect(await limiter.hitRequest('acme')).toBeNull();
      expect(await limiter.hitRequest('acme')).toMatchObject({ limit: 'tenant' });
    } finally {
      await own.end();
    }
  });
});

describe('a slow Redis that answers', () => {
  it(
    'a connection with 10,000 commands in flight still sends a key lookup, an owner read and a limit check',
    { timeout: 30_000 },
    async () => {
      const slow = await new RedisProxy(0).start();
      try {
        const redis = new Redis(slow.url(TEST_REDIS_DB), { maxRetriesPerRequest: null });
        connections.push(redis);
        await redis.ping();
        slow.delayMs = 800; // answers each command, late: an overloaded or distant Redis
        // Other requests' commands in flight (2,500 requests a second, four commands each, over a second).
        const load = Array.from({ length: MAX_HELD }, (_, i) => redis.get(`held-slow:load:${i}`).catch(() => 'lost'));
        expect(held(redis)).toBe(MAX_HELD);
        const limiter = new RedisLimiter(redis, `held-slow-${process.pid}`, { tenant_requests_per_minute: 10 }, Date.now, 10_000);
        // Before: each refused NotSent at once, though Redis answers them all within a second or two.
        await expect(new RedisKeyStore(redis, 'held-slow').find(['0'.repeat(64)])).resolves.toEqual([null]);
        await expect(new RedisResponseOwners(redis, 'held-slow').owners(['resp_slow'])).resolves.toEqual([null]);
        await expect(limiter.hitRequest('acme')).resolves.toBeNull();
        expect(await Promise.all(load)).not.toContain('lost');
      } finally {
        await slow.stop();
      }
    },
  );
});

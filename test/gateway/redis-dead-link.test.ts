// The gateway's link to Redis dies without a word: no reset, no close (Redis's host lost, a
// failover behind the same address, a firewall dropping the connection's state). A proxy in front
// of the test run's Redis plays the network: it keeps the gateway's connections open but carries
// nothing more on them, while a new connection reaches Redis as before.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { TEST_REDIS_DB, TEST_REDIS_URL } from '../redis-db';
import { RedisProxy } from '../redis-proxy';
import { FakeProvider } from './fake-provider';
import { chat } from './harness';
import { startInstance, until } from './instances';

const prefix = `test-dead-link-${process.pid}`;
const BODY = { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hello' }] };
let proxy: RedisProxy;
let hot: FakeProvider;
let env: Record<string, string>;
beforeEach(async () => {
  proxy = await new RedisProxy().start();
  hot = await new FakeProvider().start();
  const dir = mkdtempSync(join(tmpdir(), 'dead-link-'));
  writeFileSync(
    join(dir, 'routes.json'),
    JSON.stringify({
      hot: [{ provider: 'openai', model: 'gpt-4o-mini', baseUrl: hot.url }],
      warm: [],
      cold: { mode: 'graceful_degrade', queue: 'ai-tasks', notify: [] },
    }),
  );
  env = {
    ROUTES_FILE: join(dir, 'routes.json'),
    QUEUE_STORE_URL: proxy.url(TEST_REDIS_DB),
    REDIS_PREFIX: prefix,
    METER_CSV_FILE: join(dir, 'events.csv'),
    SCOPES_FILE: join(dir, 'none.yaml'),
  };
});
afterEach(async () => {
  await hot.stop();
  await proxy.stop();
  const redis = new Redis(TEST_REDIS_URL);
  const keys = await redis.keys(`${prefix}:*`);
  if (keys.length) await redis.del(...keys);
  redis.disconnect();
});

/** What /health says of the one route's breaker. */
async function breakerOnHealth(url: string): Promise<string> {
  const res = await fetch(`${url}/health`, { headers: { authorization: 'Bearer admin-t' } });
  return ((await res.json()) as { routes: Array<{ breaker: string }> }).routes[0].breaker;
}

/** What /health says of the Cold queue: its counts, or "unreachable" when Redis did not answer in time. */
async function queueOnHealth(url: string): Promise<unknown> {
  const res = await fetch(`${url}/health`, { headers: { authorization: 'Bearer admin-t' } });
  return ((await res.json()) as { queue: unknown }).queue;
}

describe('a link to Redis that dies silently', () => {
  it('is given up and made again: the Cold queue takes work once more and the worker runs it', { timeout: 90_000 }, async () => {
    const gw = await startInstance(tmpdir(), { ...env, WORKER: 'on', ADMIN_TOKEN: 'admin-t' });
    try {
      await until('the worker', () => gw.output().includes('worker: running'));
      expect((await chat(gw.url, BODY)).status).toBe(200);
      proxy.cut();
      await until('the queue seen unreachable', async () => (await queueOnHealth(gw.url)) === 'unreachable');
      // Before: unreachable (and Cold requests 503, no job run) until the kernel gave the link up, about 15 minutes.
      await until('the queue reached again', async () => (await queueOnHealth(gw.url)) !== 'unreachable', 30_000);
      hot.always({ kind: 'status', status: 500 });
      const queued = await chat(gw.url, BODY, { 'x-time-to-answer-ms': '2000' });
      expect(queued.status).toBe(202);
      hot.always({ kind: 'ok' });
      const { jobId } = JSON.parse(queued.text) as { jobId: string };
      const done = await until(
        'the job to complete',
        async () => {
          const r = await fetch(`${gw.url}/v1/jobs/${jobId}`);
          return r.status === 200 && ((await r.json()) as { state: string }).state === 'completed';
        },
        20_000,
      );
      expect(done).toBe(true);
      expect(gw.output()).not.toContain('"msg":"worker: Socket timeout'); // the outage is said once, by the shared connection
    } finally {
      await gw.stop();
    }
  });

  it(
    "an instance's subscription to the fleet's breakers is made again too: it hears a route another instance opened",
    { timeout: 90_000 },
    async () => {
      const a = await startInstance(tmpdir(), { ...env, ADMIN_TOKEN: 'admin-t' });
      const b = await startInstance(tmpdir(), { ...env, QUEUE_STORE_URL: `redis://127.0.0.1:6379/${TEST_REDIS_DB}` });
      try {
        expect((await chat(a.url, BODY)).status).toBe(200);
        proxy.cut();
        hot.always({ kind: 'status', status: 500 });
        await until('the route open on the other instance', async () => {
          await chat(b.url, BODY, { 'x-time-to-answer-ms': '2000' });
          return b.output().includes('"breaker":"open"');
        });
        // Before: its subscription (a connection that only listens) never found its link dead; the
        // route stayed closed here, its calls still sent to the provider the fleet had given up on.
        await until('the route open here too', async () => (await breakerOnHealth(a.url)) !== 'closed', 40_000);
      } finally {
        await Promise.all([a.stop(), b.stop()]);
      }
    },
  );
});

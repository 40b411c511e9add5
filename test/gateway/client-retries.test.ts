// The gateway's errors as the official `openai` client meets them with its default retries (two
// more tries of a 408, 409, 429 or 5xx, waiting as `retry-after` says, unless `x-should-retry:
// false`): a retry the gateway asks for must be able to help, and one that would only run the
// whole failover again against failing providers must not happen. Counted at the providers.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import OpenAI from 'openai';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { FakeProvider } from './fake-provider';
import { captureLogger, chat, listenStack } from './harness';
import { TEST_REDIS_URL, hasRedisServer } from '../redis-db';
import { OwnRedis } from '../own-redis';

const prefix = `test-client-retries-${process.pid}`;
const BODY = { model: 'gpt-4o-mini', messages: [{ role: 'user' as const, content: 'hello' }] };
let redis: Redis;
let hot: FakeProvider;
let dir = '';
const stops: Array<() => Promise<void>> = [];

beforeAll(() => {
  redis = new Redis(TEST_REDIS_URL);
});
afterAll(() => redis.disconnect());
beforeEach(async () => {
  hot = await new FakeProvider().start();
  dir = mkdtempSync(join(tmpdir(), 'client-retries-'));
});
afterEach(async () => {
  for (const stop of stops.splice(0)) await stop();
  await hot.stop();
  const keys = await redis.keys(`${prefix}:*`);
  if (keys.length) await redis.del(...keys);
});

/** A gateway stack of one Hot route (`hot`), on `queueStore`, with `map` added to its routing map. */
async function up(queueStore: string, map: Record<string, unknown> = {}) {
  const routes = join(dir, `routes-${stops.length}.json`);
  writeFileSync(
    routes,
    JSON.stringify({
      hot: [{ provider: 'openai', model: 'gpt-4o-mini', baseUrl: hot.url }],
      warm: [],
      cold: { mode: 'graceful_degrade', queue: 'ai-tasks', notify: [] },
      ...map,
    }),
  );
  const env = {
    ROUTES_FILE: routes,
    QUEUE_STORE_URL: queueStore,
    REDIS_PREFIX: prefix,
    METER_CSV_FILE: join(dir, `events-${stops.length}.csv`),
    SCOPES_FILE: join(dir, 'none.yaml'),
  };
  const h = await listenStack(env, { http: true, worker: false }, captureLogger([]));
  stops.push(h.stop);
  return h;
}

/** The official client with its default retries (maxRetries 2). */
const sdk = (url: string) => new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused' });

/** What the client finally threw: status, code and the headers of the last answer. */
async function thrown(p: Promise<unknown>) {
  try {
    await p;
  } catch (error) {
    if (error instanceof OpenAI.APIError) return { status: error.status, code: error.code, headers: error.headers };
    throw error;
  }
  throw new Error('the request was answered');
}

describe('the openai client retrying the gateway errors', () => {
  // Before: the 503 said nothing of retrying, and the client ran the whole failover twice more
  // (0.5 s and 1 s later) against the provider that had just failed three times: five calls, not
  // three, for a queue only a person can switch on.
  it('503 cold_queue_disabled after every route failed: the client does not run the failover again', async () => {
    hot.always({ kind: 'status', status: 500 });
    const gw = await up(TEST_REDIS_URL, { flags: { enable_warm_fallback: true, enable_cold_queue: false, killed_models: [] } });
    const refused = await thrown(sdk(gw.url).chat.completions.create(BODY));
    expect([refused.status, refused.code]).toEqual([503, 'cold_queue_disabled']);
    expect(hot.received).toHaveLength(3); // the gateway's own three attempts on the route, and no more
    expect(refused.headers?.get('x-should-retry')).toBe('false');
  });

  // Before: `retry-after: 1` whatever had happened, and the client ran the failover twice more, a
  // second apart, against the provider that had just failed three times (five calls; its breaker
  // opened during the second run); each run then waited its whole time-to-answer for the queue.
  it.skipIf(!hasRedisServer)(
    '503 cold_queue_unavailable after the routes failed: the client does not run the failover again; with no provider called, a retry in 1 s',
    { timeout: 30_000 },
    async () => {
      const own = await new OwnRedis().start();
      stops.push(() => own.end());
      hot.always({ kind: 'status', status: 500 });
      const gw = await up(own.url);
      await own.stop(); // the queue unreachable
      const headers = { 'x-time-to-answer-ms': '1500' };
      const refused = await thrown(sdk(gw.url).chat.completions.create(BODY, { headers }));
      expect([refused.status, refused.code]).toEqual([503, 'cold_queue_unavailable']);
      expect(hot.received).toHaveLength(3); // the gateway's own three attempts, and no more
      expect(refused.headers?.get('x-should-retry')).toBe('false');
      // Two more failures open the route's breaker (five in a row): then no provider is called, and a
      // retry a second later calls none either, and is queued if Redis is back by then.
      expect((await chat(gw.url, BODY, headers)).headers.get('x-should-retry')).toBe('false');
      expect(hot.received).toHaveLength(5);
      const skipped = await chat(gw.url, BODY, headers);
      expect([skipped.status, skipped.json().error.code]).toEqual([503, 'cold_queue_unavailable']);
      expect(hot.received).toHaveLength(5);
      expect([skipped.headers.get('retry-after'), skipped.headers.get('x-should-retry')]).toEqual(['1', null]);
    },
  );
});

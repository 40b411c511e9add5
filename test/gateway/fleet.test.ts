// Groundwork for many instances on one Redis: every route has its own id, and a new instance reads
// the shared flags before it takes traffic.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import { parseRoutesMap } from '../../gateway/src/routes-map';
import { FakeProvider } from './fake-provider';
import { chat, listenStack } from './harness';
import { TEST_REDIS_URL } from '../redis-db';

const REDIS_URL = TEST_REDIS_URL;
const prefix = `test-fleet-${process.pid}`;
const redis = new Redis(REDIS_URL);
let hot: FakeProvider, spare: FakeProvider;
beforeEach(async () => {
  [hot, spare] = await Promise.all([new FakeProvider().start(), new FakeProvider().start()]);
});
afterEach(async () => {
  await Promise.all([hot.stop(), spare.stop()]);
  const keys = await redis.keys(`${prefix}:*`);
  if (keys.length) await redis.del(...keys);
});
afterAll(() => redis.disconnect());

describe('route identity', () => {
  it('routes of one provider and model get distinct ids; an id used twice is refused with its path', () => {
    const cold = { mode: 'graceful_degrade', queue: 'ai-tasks', notify: [] };
    const same = { provider: 'openai', model: 'gpt-4o', baseUrl: 'http://a/v1' };
    const ok = parseRoutesMap(JSON.stringify({ hot: [same, same], warm: [{ ...same, id: 'eu-backup' }], cold }), 'r.json', {});
    expect(ok.hot.map((r) => r.id)).toEqual([undefined, undefined]);
    const twice = JSON.stringify({ hot: [same, { ...same, id: 'hot-1' }], warm: [], cold });
    expect(() => parseRoutesMap(twice, 'r.json', {})).toThrow('r.json: hot[1].id: "hot-1" is already the id of another route');
  });
});

describe('flags at start-up', () => {
  it('a new instance honours a kill-switch already set in Redis on its very first request', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'fleet-'));
    const routes = join(dir, 'routes.json');
    writeFileSync(
      routes,
      JSON.stringify({
        hot: [
          { provider: 'openai', model: 'killed-model', baseUrl: hot.url },
          { provider: 'openai', model: 'gpt-4o-mini', baseUrl: spare.url },
        ],
        warm: [],
        cold: { mode: 'graceful_degrade', queue: 'ai-tasks', notify: [] },
      }),
    );
    await redis.hset(`${prefix}:flags`, { killed_models: JSON.stringify(['killed-model']) });
    const env = {
      ROUTES_FILE: routes,
      QUEUE_STORE_URL: REDIS_URL,
      REDIS_PREFIX: prefix,
      METER_CSV_FILE: join(dir, 'e.csv'),
      SCOPES_FILE: join(dir, 'none.yaml'),
    };
    const app = await listenStack(env);
    try {
      const res = await chat(app.url);
      expect(res.headers.get('x-route-model')).toBe('gpt-4o-mini');
      expect(hot.received).toHaveLength(0);
    } finally {
      await app.stop();
    }
  });
});

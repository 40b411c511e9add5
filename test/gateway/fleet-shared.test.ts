// Several gateway instances on one real Redis act as one: spend caps count the fleet's spend (and
// survive a restart), a notification window makes one message for the fleet, and a newly started
// process honours the shared kill-switch on its very first request.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { FakeProvider } from './fake-provider';
import { chat, listenStack } from './harness';
import { startInstance, until } from './instances';
import { TEST_REDIS_URL } from '../redis-db';

const REDIS_URL = TEST_REDIS_URL;
const prefix = `test-fleet-shared-${process.pid}`;
const root = join(import.meta.dirname, '..', '..');
/** What the provider reports each call cost: the caps below are counted in these. */
const CALL_USD = 0.01;

let redis: Redis;
let hot: FakeProvider;
let dir = '';
const running: Array<{ stop: () => Promise<void> }> = [];

beforeAll(() => {
  redis = new Redis(REDIS_URL);
});
afterAll(() => redis.disconnect());
beforeEach(async () => {
  hot = await new FakeProvider().start();
  hot.always({ kind: 'ok', usage: { prompt_tokens: 12, completion_tokens: 5, cost: CALL_USD } as never });
  dir = mkdtempSync(join(tmpdir(), 'fleet-shared-'));
});
afterEach(async () => {
  for (const r of running.splice(0)) await r.stop();
  await hot.stop();
  const keys = await redis.keys(`${prefix}:*`);
  if (keys.length) await redis.del(...keys);
});

function routesFile(notify: string[] = [], hotModel = 'gpt-4o-mini', extra: object = {}): string {
  const file = join(dir, `routes-${Math.random().toString(36).slice(2)}.json`);
  writeFileSync(
    file,
    JSON.stringify({
      hot: [{ provider: 'openai', model: hotModel, baseUrl: hot.url }],
      warm: [],
      cold: { mode: 'graceful_degrade', queue: 'ai-tasks', notify },
      ...extra,
    }),
  );
  return file;
}

/** One gateway instance (its own stores, spend watch and notifier) on the shared Redis. */
async function instance(env: Record<string, string>) {
  const n = running.length;
  const app = await listenStack({
    ROUTES_FILE: routesFile(),
    QUEUE_STORE_URL: REDIS_URL,
    REDIS_PREFIX: prefix,
    METER_CSV_FILE: join(dir, `events-${n}.csv`),
    METER_SPOOL_DIR: join(dir, `spool-${n}`),
    SCOPES_FILE: join(dir, 'none.yaml'),
    ...env,
  });
  running.push(app);
  return app;
}

/** Requests that may wait (`x-must-have-answer: false`): routed (200) under the caps, queued (202) over them. */
const patient = (url: string) => chat(url, undefined, { 'x-must-have-answer': 'false' });

/** Sends `n` requests, alternating between the instances, one at a time; how many were routed. */
async function routedOf(urls: string[], n: number): Promise<number> {
  let routed = 0;
  for (let i = 0; i < n; i++) {
    const res = await patient(urls[i % urls.length]);
    expect([200, 202]).toContain(res.status);
    if (res.status === 200) routed++;
  }
  return routed;
}

describe('spend caps across instances', () => {
  it('without a meter: 2 instances, the daily cap at 4.5 calls, route 5 calls (±1 in flight), not 5 each', async () => {
    const env = { DAILY_CAP_USD: String(4.5 * CALL_USD) };
    const [a, b] = [await instance(env), await instance(env)];
    const routed = await routedOf([a.url, b.url], 20);
    expect(routed).toBeGreaterThanOrEqual(5);
    expect(routed).toBeLessThanOrEqual(6);
    expect(hot.received).toHaveLength(routed);
  });

  it("with a meter: its figure plus the fleet's spend since it was read, 5 calls (±1) over 2 instances", async () => {
    const meter = await fakeMeter({ today_cost_usd: 0.001, last_7d_cost_usd: 0.001, daily_cap_usd: 4.5 * CALL_USD + 0.001 });
    try {
      const env = { METER_URL: meter.url, METER_TOKEN: 't' };
      const [a, b] = [await instance(env), await instance(env)];
      const routed = await routedOf([a.url, b.url], 20);
      expect(routed).toBeGreaterThanOrEqual(5);
      expect(routed).toBeLessThanOrEqual(6);
    } finally {
      meter.server.close();
    }
  });

  it("a restart without a meter keeps the day's spend: the new instance's first request is over the cap", async () => {
    const env = { DAILY_CAP_USD: String(2.5 * CALL_USD) };
    const first = await instance(env);
    expect(await routedOf([first.url], 4)).toBe(3);
    await running.pop()!.stop();
    const restarted = await instance(env);
    expect((await patient(restarted.url)).status).toBe(202);
    expect(hot.received).toHaveLength(3);
  });
});

describe('notices across instances', () => {
  it('3 instances queueing Cold jobs within one window: one message at once, then one follow-up with the other two', async () => {
    const hook = await slackHook();
    try {
      hot.always({ kind: 'status', status: 401 }); // no route answers: each request is queued (Cold)
      const env = { ROUTES_FILE: routesFile([hook.url]), NOTIFY_WINDOW_MS: '2000' };
      const apps = [await instance(env), await instance(env), await instance(env)];
      const jobs: string[] = [];
      for (const [i, app] of apps.entries()) {
        const res = await chat(app.url, undefined, { 'idempotency-key': `cold-${i}` });
        expect(res.status).toBe(202);
        jobs.push(res.json().jobId);
      }
      // Per process, three first messages would come at once; for the fleet, the next one is the follow-up.
      await until('two messages', () => hook.posts.length >= 2);
      expect(hook.posts[0].text).toContain(`Jobs (1): ${jobs[0]}`);
      expect(hook.posts[1].text).toMatch(/^AI requests queued \(Cold tier\) \(2 more since the first notice\)\nJobs \(2\): /);
      for (const id of jobs.slice(1)) expect(hook.posts[1].text).toContain(id);
      for (const r of running.splice(0)) await r.stop();
      expect(hook.posts).toHaveLength(2);
    } finally {
      hook.server.close();
    }
  });
});

describe('flags at start-up', () => {
  it('a newly started gateway process honours a kill-switch already in Redis on its very first request', async () => {
    const spare = await new FakeProvider().start();
    try {
      const routes = join(dir, 'killed.json');
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
      const gateway = await startInstance(root, {
        ROUTES_FILE: routes,
        QUEUE_STORE_URL: REDIS_URL,
        REDIS_PREFIX: prefix,
        METER_CSV_FILE: join(dir, 'spawned.csv'),
        METER_SPOOL_DIR: join(dir, 'spawned-spool'),
        SCOPES_FILE: join(dir, 'none.yaml'),
      });
      running.push(gateway);
      const res = await chat(gateway.url);
      expect(res.status).toBe(200);
      expect(res.headers.get('x-route-model')).toBe('gpt-4o-mini');
      expect(hot.received).toHaveLength(0);
    } finally {
      await spare.stop();
    }
  });
});

/** The meter's `?action=spend` on loopback with fixed figures; events posted to it are taken. */
async function fakeMeter(figures: { today_cost_usd: number; last_7d_cost_usd: number; daily_cap_usd: number }) {
  const server = createServer((req, res) => {
    req.resume();
    const url = new URL(req.url!, 'http://x');
    const body =
      req.method === 'GET' && url.searchParams.get('action') === 'spend'
        ? { ok: true, ...figures, burn_7d_cap_usd: 200, cap_exceeded: false }
        : { ok: true, appended: 0, duplicates: 0 };
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(body));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/exec` };
}

/** A Slack incoming webhook on loopback: it keeps every JSON body posted to it. */
async function slackHook(): Promise<{ server: Server; url: string; posts: Array<{ text: string }> }> {
  const posts: Array<{ text: string }> = [];
  const server = createServer(async (req, res) => {
    let body = '';
    for await (const c of req) body += c;
    posts.push(JSON.parse(body));
    res.writeHead(200).end('ok');
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/services/T/B/x`, posts };
}

// The gateway's Redis goes away and comes back: a Redis of the test's own (a private redis-server on
// a free port, append-only file on, removed afterwards) that the test stops and starts again.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer as createHttpServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { hasRedisServer } from '../redis-db';
import { OwnRedis } from '../own-redis';
import { RedisStreamSink, type StreamSinkOptions } from '../../gateway/src/meter-stream';
import { eventJson, WebAppSink } from '../../gateway/src/meter-web-app';
import { normalizeEvent } from '../../schema/event-record';
import { RedisNoticeWindows } from '../../gateway/src/notice-windows';
import { Notifier } from '../../gateway/src/notify';
import { FakeMeterWebApp } from './fake-meter';
import { FakeProvider } from './fake-provider';
import { captureLogger, chat, listenStack } from './harness';
import { filled } from '../voice/filled';
import { until } from './keys-harness';
import { startInstance } from './instances';
import OpenAI from 'openai';
import { keysCli } from '../../gateway/src/keys-cli';
import { RedisPause } from '../../gateway/src/budget';
import type { BullColdQueue } from '../../gateway/src/cold-queue-redis';
import { startWorker, type ColdWorker } from '../../gateway/src/worker';
import { RedisFlags } from '../../gateway/src/flags';
import { RedisKeyStore } from '../../gateway/src/client-keys-redis';
import { createKey } from '../../gateway/src/client-keys';
import { ClientAuth } from '../../gateway/src/client-auth';

const BODY = { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hello' }] };

let redis: OwnRedis;
let hot: FakeProvider;
let env: NodeJS.ProcessEnv;
beforeEach(async () => {
  if (!hasRedisServer) return;
  redis = await new OwnRedis(['--appendonly', 'yes', '--appendfsync', 'everysec']).start();
  hot = await new FakeProvider().start();
  const dir = mkdtempSync(join(tmpdir(), 'redis-restart-'));
  writeFileSync(
    join(dir, 'routes.json'),
    JSON.stringify({
      hot: [{ provider: 'openai', model: 'gpt-4o-mini', baseUrl: hot.url }],
      warm: [],
      cold: { mode: 'graceful_degrade', queue: 'ai-tasks', notify: [] },
      limits: { tenant_requests_per_minute: 1000 }, // counted in Redis: the check must not wait for it
    }),
  );
  env = {
    ROUTES_FILE: join(dir, 'routes.json'),
    QUEUE_STORE_URL: redis.url,
    METER_CSV_FILE: join(dir, 'events.csv'),
    SCOPES_FILE: join(dir, 'none.yaml'),
  };
});
afterEach(async () => {
  if (!hasRedisServer) return;
  await hot.stop();
  await redis.end();
});

describe.skipIf(!hasRedisServer)('Redis goes away and comes back', () => {
  it('while it is away, live answers go on (limits fail open) and are metered; work that needs the queue gets 503 within its time-to-answer', async () => {
    const gw = await listenStack(env, { http: true, worker: false });
    try {
      expect((await chat(gw.url)).status).toBe(200);
      await redis.stop();
      const live = await chat(gw.url, undefined, { 'x-time-to-answer-ms': '3000', 'x-customer-id': 'acme' });
      expect(live.status).toBe(200);
      hot.always({ kind: 'status', status: 500 });
      const queued = await chat(gw.url, undefined, { 'x-time-to-answer-ms': '2000' });
      expect(queued.status).toBe(503); // before: no answer at all until Redis came back
      expect(queued.ms).toBeLessThanOrEqual(2000 + 100);
      expect(JSON.parse(queued.text).error.code).toBe('cold_queue_unavailable');
      // Its route was called and failed: a retry would run the failover again (client-retries.test.ts).
      expect(queued.headers.get('x-should-retry')).toBe('false');
      await gw.stack.meter.flush();
      const { readFileSync } = await import('node:fs');
      const [header, ...rows] = readFileSync(env.METER_CSV_FILE!, 'utf8').trim().split('\n');
      const code = header.split(',').indexOf('error_code');
      const codes = rows.map((r) => r.split(',')[code]);
      expect(codes.filter((c) => c === '')).toHaveLength(2); // both answers, the one during the outage too
      expect(codes.filter((c) => c === '500').length).toBeGreaterThan(0); // and every failed provider call
      await redis.start();
      const after = await until(async () => {
        const r = await chat(gw.url, undefined, { 'x-time-to-answer-ms': '2000' });
        return r.status === 202 && r;
      });
      expect(JSON.parse(after.text).status).toBe('queued');
    } finally {
      await gw.stop();
    }
  });

  it('a request holding an Idempotency-Key when Redis goes away is still answered, within its time', async () => {
    const gw = await listenStack(env, { http: true, worker: false });
    try {
      hot.next({ kind: 'ok', delayMs: 500 });
      const answer = chat(gw.url, undefined, { 'idempotency-key': 'order-1' });
      await until(async () => hot.received.length === 1); // the key is claimed, the provider call runs
      await redis.stop(); // and not back in this test: before, no answer until Redis was back
      const got = await answer;
      expect(got.status).toBe(200);
    } finally {
      await gw.stop();
    }
  });

  it('a key sent while Redis is away is not left held once it is back: a repeat runs, not 409 for the lease', async () => {
    const gw = await listenStack(env, { http: true, worker: false });
    try {
      await redis.stop();
      const during = await chat(gw.url, undefined, { 'idempotency-key': 'order-2' });
      expect(during.status).toBe(200); // without replay, after its claim waited 1 s
      await redis.start();
      await until(async () => (await gw.stack.redis!.ping().catch(() => '')) === 'PONG');
      const again = await chat(gw.url, undefined, { 'idempotency-key': 'order-2' });
      expect(again.status).toBe(200); // before: 409 idempotency_key_in_flight for 30 s, nothing running
      expect(hot.received).toHaveLength(2);
    } finally {
      await gw.stop();
    }
  });

  it('with Redis away, a request with an Idempotency-Key still answers within its time-to-answer', async () => {
    const gw = await listenStack(env, { http: true, worker: false });
    try {
      await redis.stop();
      const answered = await chat(gw.url, undefined, { 'idempotency-key': 'order-3', 'x-time-to-answer-ms': '800' });
      hot.always({ kind: 'status', status: 500 });
      const refused = await chat(gw.url, undefined, { 'idempotency-key': 'order-4', 'x-time-to-answer-ms': '800' });
      expect([answered.status, refused.status]).toEqual([200, 503]);
      // Before: the claim waited its 1 s before the time-to-answer started (1.3 s and 1.7 s).
      expect(answered.ms).toBeLessThanOrEqual(800 + 100);
      expect(refused.ms).toBeLessThanOrEqual(800 + 100);
    } finally {
      await gw.stop();
    }
  });

  it('a gateway process started while Redis is away serves at once, and takes up the shared state once Redis is back', async () => {
    await redis.stop();
    const strings = Object.fromEntries(Object.entries(env).map(([k, v]) => [k, String(v)]));
    // before: it waited for Redis before listening, so an instance restarted during an outage never served
    const gw = await startInstance(tmpdir(), { ...strings, ADMIN_TOKEN: 'admin-t' });
    try {
      expect(gw.output()).toContain('flags and budget pause not read at start');
      expect((await chat(gw.url)).status).toBe(200);
      await redis.start();
      const probe = new Redis(redis.url);
      await probe.hset('gateway:flags', 'killed_models', JSON.stringify(['gpt-4o-mini']));
      probe.disconnect();
      const flags = async () =>
        (
          (await (await fetch(`${gw.url}/admin/flags`, { headers: { authorization: 'Bearer admin-t' } })).json()) as {
            killed_models: string[];
          }
        ).killed_models;
      await until(async () => (await flags()).includes('gpt-4o-mini')); // the fleet's kill-switch, read once Redis answers
      expect((await chat(gw.url)).status).toBe(202); // its only model killed: queued, the Cold queue reached
    } finally {
      await gw.stop();
    }
  });

  it('an outage is logged once by a gateway with its worker, not once per reconnection attempt', async () => {
    const gw = await startInstance(tmpdir(), {
      ...Object.fromEntries(Object.entries(env).map(([k, v]) => [k, String(v)])),
      WORKER: 'on',
      ADMIN_TOKEN: 'admin-t',
    });
    try {
      await until(async () => gw.output().includes('worker: running'));
      await redis.stop();
      // Seen as an outage (a Redis back before the first reconnection attempt is none), then two
      // /health reads: a second or more of outage, several reconnection attempts.
      await until(async () => gw.output().includes('Redis unreachable ('));
      for (let i = 0; i < 2; i++) await fetch(`${gw.url}/health`, { headers: { authorization: 'Bearer admin-t' } });
      await redis.start();
      await until(async () => gw.output().includes('Redis reachable again'));
      const lines = gw
        .output()
        .split('\n')
        .filter((l) => /ECONNREFUSED|ECONNRESET|Connection is closed/.test(l));
      expect(lines.filter((l) => l.includes('"msg":"worker: '))).toHaveLength(0); // before: one per attempt, several a second
      expect(gw.output().match(/Redis unreachable \(/g)).toHaveLength(1);
    } finally {
      await gw.stop();
    }
  });

  it('a job queued before a restart is still there after it, and completes once a provider answers', async () => {
    const gw = await listenStack(env, { http: true, worker: true, cold: { backoffMs: 50, recheckMs: 100 }, breaker: { openMs: 200 } });
    try {
      hot.always({ kind: 'status', status: 500 });
      const queued = await chat(gw.url, undefined, { 'x-time-to-answer-ms': '2000' });
      expect(queued.status).toBe(202);
      const { jobId } = JSON.parse(queued.text) as { jobId: string };
      await redis.stop();
      await redis.start();
      hot.always({ kind: 'ok' });
      const done = await until(async () => {
        const r = await fetch(`${gw.url}/v1/jobs/${jobId}`);
        const job = r.status === 200 ? ((await r.json()) as { state: string; result?: unknown }) : null;
        return job?.state === 'completed' && job;
      }, 20_000);
      expect(done.result).toBeTruthy();
    } finally {
      await gw.stop();
    }
  });

  it("a job whose lock lapses while Redis stalls is not run twice by the fleet: one provider call, one meter event, the first run's answer", async () => {
    const workers = [0, 1].map(() => listenStack(env, { http: true, worker: true, cold: { lockMs: 1000 } }));
    const [a, b] = await Promise.all(workers);
    const pauser = new Redis(redis.url);
    try {
      hot.always({ kind: 'ok', content: 'second run' });
      hot.next({ kind: 'ok', delayMs: 6000, content: 'first run' }); // still running when the lock is taken back
      const { jobId } = await a.stack.queue.enqueue({
        body: { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'once' }] },
        idempotencyKey: 'job-once',
        userId: 'u1',
        jobId: 'client-once',
        customerId: 'acme',
        jobType: 'summary',
        reason: 'all_failed',
        reviewRequired: false,
        enqueuedAt: new Date().toISOString(),
      });
      await until(async () => hot.received.length === 1); // the first run's call is out
      await pauser.call('CLIENT', 'PAUSE', '3000', 'ALL'); // longer than the job's 1 s lock: it lapses
      const done = await until(async () => {
        const job = await a.stack.queue.get(jobId).catch(() => null);
        return job?.state === 'completed' && job;
      }, 30_000);
      expect(hot.received).toHaveLength(1); // before: 2, the second run called the provider again
      expect(done.result).toMatchObject({ body: { choices: [{ message: { content: 'first run' } }] } });
      await Promise.all([a.stack.meter.flush(), b.stack.meter.flush()]);
      const rows = readFileSync(env.METER_CSV_FILE!, 'utf8').trim().split('\n').slice(1);
      expect(rows).toHaveLength(1); // one call, one event
    } finally {
      pauser.disconnect();
      await Promise.all([a.stop(), b.stop()]);
    }
  });

  it('a job picked up while Redis does not answer the pause read is run by the value last read, not held until Redis answers', async () => {
    const gw = await listenStack(env, { http: true, worker: false });
    const pauseRedis = await new OwnRedis().start(); // the pause read alone stalls; the queue answers
    const reader = new Redis(pauseRedis.url, { maxRetriesPerRequest: null }); // as the gateway's connection
    const [pauser, probe] = [new Redis(pauseRedis.url), new Redis(pauseRedis.url)];
    const pause = new RedisPause(reader);
    let worker: ColdWorker | null = null;
    try {
      await Promise.all([reader.ping(), probe.ping()]);
      await pauser.call('CLIENT', 'PAUSE', '10000', 'ALL'); // connected, but nothing answered
      let answering = false;
      void probe.ping().then(
        () => (answering = true),
        () => undefined, // closed at the end
      );
      const { stack } = gw;
      const deps = { failover: stack.path.failover, pause, flags: stack.flags, notifier: stack.notifier, skipWhilePaused: () => false };
      worker = startWorker(stack.queue as BullColdQueue, { ...deps, log: { info: () => {}, warn: () => {} } });
      const { jobId } = await stack.queue.enqueue({
        body: { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'paused?' }] },
        idempotencyKey: 'job-pause-read',
        userId: 'u1',
        jobId: 'client-pause-read',
        customerId: 'acme',
        jobType: 'summary',
        reason: 'all_failed',
        reviewRequired: false,
        enqueuedAt: new Date().toISOString(),
      });
      await until(async () => (await stack.queue.get(jobId))?.state === 'completed', 20_000);
      expect(hot.received).toHaveLength(1);
      expect(answering).toBe(false); // run while the pause read still waited; before: only once Redis answered (10 s)
    } finally {
      await worker?.close();
      pause.close();
      for (const client of [reader, pauser, probe]) client.disconnect();
      await pauseRedis.end();
      await gw.stop();
    }
  }, 30_000);

  it('a Redis that stalls does not hold a whole answer past its time-to-answer: its meter event goes to the spool, stored once', async () => {
    const meter = await new FakeMeterWebApp().start();
    const spool = { METER_URL: meter.url, METER_TOKEN: 'tok', METER_SPOOL_DIR: mkdtempSync(join(tmpdir(), 'stall-spool-')) };
    const gw = await listenStack({ ...env, ...spool }, { http: true, worker: false });
    const pauser = new Redis(redis.url);
    try {
      expect((await chat(gw.url)).status).toBe(200);
      await pauser.call('CLIENT', 'PAUSE', '5000', 'ALL'); // connected, but nothing answered: a stalled Redis
      const answered = await chat(gw.url, undefined, { 'x-time-to-answer-ms': '800' });
      expect(answered.status).toBe(200);
      expect(answered.ms).toBeLessThanOrEqual(800 + 100); // before: its XADD was waited for 1 s
      await pauser.call('CLIENT', 'UNPAUSE');
      // Delivered from the spool, and from the stream once the late XADD landed: stored once.
      await until(async () => meter.stored.length === 2 && (await gw.stack.redis!.xlen('gateway:meter:events')) === 0);
      expect(new Set(meter.stored).size).toBe(2);
    } finally {
      pauser.disconnect();
      await gw.stop();
      await meter.stop();
    }
  });

  it('a client polling its queued job while Redis is away or stalled gets 503 cold_queue_unavailable in time, not 500 or no answer', async () => {
    const gw = await listenStack(env, { http: true, worker: false });
    try {
      hot.always({ kind: 'status', status: 500 });
      const queued = await chat(gw.url, undefined, { 'x-time-to-answer-ms': '2000' });
      const { jobId } = JSON.parse(queued.text) as { jobId: string };
      const poll = async () => {
        const r = await fetch(`${gw.url}/v1/jobs/${jobId}`);
        const body = (await r.json()) as { error?: { code: string } };
        return { status: r.status, code: body.error?.code, retryAfter: r.headers.get('retry-after') };
      };
      // Connected, but nothing answered until thawed: before, no answer until Redis answered again.
      redis.freeze();
      const stalled = await poll();
      expect(stalled).toMatchObject({ status: 503, code: 'cold_queue_unavailable', retryAfter: '1' });
      redis.thaw();
      await redis.stop();
      expect(await poll()).toMatchObject({ status: 503, code: 'cold_queue_unavailable', retryAfter: '1' }); // before: 500 internal error
      await redis.start();
      const back = await until(async () => {
        const r = await poll();
        return r.status === 200 && r;
      });
      expect(back.status).toBe(200);
    } finally {
      await gw.stop();
    }
  });

  it('requests that would be queued while Redis is away write a few error lines, not one each', async () => {
    const lines: string[] = [];
    const gw = await listenStack(env, { http: true, worker: false }, captureLogger(lines));
    try {
      await redis.stop();
      hot.always({ kind: 'status', status: 500 });
      for (let i = 0; i < 30; i++) {
        const r = await chat(gw.url, undefined, { 'x-time-to-answer-ms': '2000' });
        expect(JSON.parse(r.text).error.code).toBe('cold_queue_unavailable');
      }
    } finally {
      await gw.stop();
    }
    const unreachable = lines.filter((l) => l.includes('cold queue unreachable'));
    expect(unreachable.length).toBeGreaterThanOrEqual(1);
    expect(unreachable.length).toBeLessThanOrEqual(2);
  });

  it('clients polling their jobs while Redis is away write a few warnings, not one per poll', async () => {
    const lines: string[] = [];
    const gw = await listenStack(env, { http: true, worker: false }, captureLogger(lines));
    try {
      await redis.stop();
      for (let i = 0; i < 40; i++) {
        const r = await fetch(`${gw.url}/v1/jobs/llm-${String(i).padStart(40, '0')}`);
        expect(r.status).toBe(503);
        await r.arrayBuffer();
      }
    } finally {
      await gw.stop();
    }
    const notRead = lines.filter((l) => / not read: /.test(l));
    expect(notRead.length).toBeGreaterThanOrEqual(1);
    expect(notRead.length).toBeLessThanOrEqual(2);
  });

  it('a job added after its request was told 503 (Redis stalled past the time-to-answer) is still notified, once', async () => {
    const routes = join(mkdtempSync(join(tmpdir(), 'late-job-')), 'routes.json');
    const map = JSON.parse(readFileSync(env.ROUTES_FILE!, 'utf8')) as { cold: { notify: string[] } };
    map.cold.notify = ['oncall@example.com']; // without SMTP_URL an e-mail is logged, and counted as sent
    writeFileSync(routes, JSON.stringify(map));
    const gw = await listenStack({ ...env, ROUTES_FILE: routes }, { http: true, worker: false });
    const pauser = new Redis(redis.url);
    try {
      hot.always({ kind: 'status', status: 500 });
      await pauser.call('CLIENT', 'PAUSE', '1500', 'ALL'); // connected, but nothing answered until the job's request gave up
      const refused = await chat(gw.url, undefined, { 'x-time-to-answer-ms': '600' });
      expect([refused.status, JSON.parse(refused.text).error.code]).toEqual([503, 'cold_queue_unavailable']);
      // The add went through once Redis answered: the client's retry finds the job.
      const retried = await chat(gw.url, undefined, { 'x-time-to-answer-ms': '2000' });
      expect(retried.status).toBe(202);
      const { jobId } = JSON.parse(retried.text) as { jobId: string };
      const queuedNotices = () => gw.stack.notifier.sent.filter((s) => s.subject.startsWith('AI requests queued'));
      await until(async () => queuedNotices().some((s) => s.text.includes(jobId))); // before: nobody was told of it
      await gw.stack.notifier.flush();
      expect(queuedNotices()).toHaveLength(1);
    } finally {
      pauser.disconnect();
      await gw.stop();
    }
  });

  it('GET /health answers while Redis is stalled, the queue shown unreachable (it waited for Redis)', async () => {
    const gw = await listenStack({ ...env, ADMIN_TOKEN: 'admin-t' }, { http: true, worker: false });
    try {
      // Connected, but nothing answered until thawed: before, no answer until Redis answered.
      redis.freeze();
      const res = await fetch(`${gw.url}/health`, { headers: { authorization: 'Bearer admin-t' } });
      const health = (await res.json()) as { ok: boolean; queue: unknown };
      expect([res.status, health.ok, health.queue]).toEqual([200, true, 'unreachable']);
    } finally {
      redis.thaw();
      await gw.stop();
    }
  });

  it('a keyed request whose Redis stalls while it runs is answered within its time-to-answer, and its answer is kept once Redis answers', async () => {
    const gw = await listenStack(env, { http: true, worker: false });
    const pauser = new Redis(redis.url);
    try {
      hot.next({ kind: 'ok', delayMs: 300 });
      const answer = chat(gw.url, undefined, { 'idempotency-key': 'order-5', 'x-time-to-answer-ms': '800' });
      await until(async () => hot.received.length === 1); // the key is claimed, the provider call runs
      await pauser.call('CLIENT', 'PAUSE', '1500', 'ALL'); // connected, but nothing answered
      const got = await answer;
      expect(got.status).toBe(200);
      expect(got.ms).toBeLessThanOrEqual(800 + 100); // before: keeping the answer was waited for 1 s past the provider's
      // The keep reached Redis once it answered: a repeat then is replayed, not run again.
      await until(async () => (await gw.stack.redis!.ping().catch(() => '')) === 'PONG');
      const again = await chat(gw.url, undefined, { 'idempotency-key': 'order-5', 'x-time-to-answer-ms': '800' });
      expect([again.status, again.headers.get('idempotent-replayed'), again.text]).toEqual([200, 'true', got.text]);
      expect(hot.received).toHaveLength(1);
    } finally {
      pauser.disconnect();
      await gw.stop();
    }
  });

  it('a budget webhook while Redis is away pauses this instance at once, answers 503 in time, and the pause reaches Redis once it is back', async () => {
    const gw = await listenStack({ ...env, ADMIN_TOKEN: 'admin-t' }, { http: true, worker: false });
    const budget = (path: string, body?: unknown) =>
      fetch(`${gw.url}/budget/${path}`, {
        method: 'POST',
        headers: { authorization: 'Bearer admin-t', 'content-type': 'application/json' },
        body: JSON.stringify(body ?? {}),
        signal: AbortSignal.timeout(5000), // before: no answer until Redis was back
      });
    try {
      await redis.stop();
      const res = await budget('webhook', { provider: 'openai', percentUsed: 90 });
      expect(res.status).toBe(503);
      expect(res.headers.get('retry-after')).toBe('1');
      expect(((await res.json()) as { error: string }).error).toMatch(/pause_ai_tasks/);
      expect(gw.stack.pause.paused()).toBe(true); // live traffic avoids the capped provider here at once
      await redis.start();
      const probe = new Redis(redis.url);
      try {
        await until(async () => (await probe.get('pause_ai_tasks')) === '1'); // the fleet's flag, once Redis took it
      } finally {
        probe.disconnect();
      }
      expect((await budget('resume')).status).toBe(204);
      expect(gw.stack.pause.paused()).toBe(false);
    } finally {
      await gw.stop();
    }
  });

  it('a Redis restarted without its data while paused does not lift the pause: the gateway puts it back, and a resume still lifts it', async () => {
    const logs: string[] = [];
    const gw = await listenStack({ ...env, ADMIN_TOKEN: 'admin-t' }, { http: true, worker: false }, captureLogger(logs));
    const budget = (path: string, body?: unknown) =>
      fetch(`${gw.url}/budget/${path}`, {
        method: 'POST',
        headers: { authorization: 'Bearer admin-t', 'content-type': 'application/json' },
        body: JSON.stringify(body ?? {}),
      });
    const probe = new Redis(redis.url, { retryStrategy: () => 20 });
    probe.on('error', () => undefined); // refused while Redis is stopped
    try {
      expect((await budget('webhook', { provider: 'openai', percentUsed: 90 })).status).toBe(204);
      await redis.stop();
      rmSync(join(redis.dir, 'appendonlydir'), { recursive: true, force: true }); // restarted without its data
      await redis.start();
      // Before: the first read after the restart found no flag, and the capped provider was called again.
      await until(async () => (await probe.get('pause_ai_tasks')) === '1');
      expect(await gw.stack.pause.refresh()).toBe(true);
      expect(logs.join('\n')).toContain('budget pause: pause_ai_tasks was lost by Redis while paused');
      expect((await budget('resume')).status).toBe(204);
      expect(await gw.stack.pause.refresh()).toBe(false);
      expect(await probe.get('pause_ai_tasks')).toBeNull();
    } finally {
      probe.disconnect();
      await gw.stop();
    }
  });

  it('a flag change while Redis is away is in force on this instance at once, answers 503 with Retry-After in time, and reaches the fleet once Redis is back', async () => {
    const [a, b] = await Promise.all([0, 1].map(() => listenStack({ ...env, ADMIN_TOKEN: 'admin-t' }, { http: true, worker: false })));
    const flags = (gw: { url: string }, change?: unknown) =>
      fetch(`${gw.url}/admin/flags`, {
        method: change ? 'PUT' : 'GET',
        headers: { authorization: 'Bearer admin-t', 'content-type': 'application/json' },
        body: change ? JSON.stringify(change) : undefined,
        signal: AbortSignal.timeout(5000), // before: no answer until Redis was back
      });
    try {
      await redis.stop();
      const res = await flags(a, { killed_models: ['gpt-4o-mini'] });
      expect(res.status).toBe(503);
      expect(res.headers.get('retry-after')).toBe('1');
      expect(((await res.json()) as { error: string }).error).toMatch(/flags: changed on this instance/);
      expect(a.stack.flags.get().killed_models).toEqual(['gpt-4o-mini']); // the kill-switch holds here at once
      await redis.start();
      await until(async () => b.stack.flags.get().killed_models.includes('gpt-4o-mini')); // the fleet's, once Redis took it
      expect((await flags(a, { killed_models: [] })).status).toBe(200);
    } finally {
      await Promise.all([a.stop(), b.stop()]);
    }
  });

  it('a budget pause or a flag change that Redis refuses (out of memory) is answered 503 saying so, and not left in force on one instance', async () => {
    const gw = await listenStack({ ...env, ADMIN_TOKEN: 'admin-t' }, { http: true, worker: false });
    const admin = { authorization: 'Bearer admin-t', 'content-type': 'application/json' };
    const probe = new Redis(redis.url);
    try {
      await probe.config('SET', 'maxmemory', '1'); // every write refused: OOM
      const paused = await fetch(`${gw.url}/budget/webhook`, {
        method: 'POST',
        headers: admin,
        body: '{"provider":"openai","percentUsed":90}',
      });
      expect(paused.status).toBe(503);
      // before: "set on this instance, but the store did not answer within 2 s …", and the pause gone 100 ms later
      expect(((await paused.json()) as { error: string }).error).toMatch(/^pause_ai_tasks: not set: the store refused it \(/);
      expect(gw.stack.pause.paused()).toBe(false);
      const flags = await fetch(`${gw.url}/admin/flags`, { method: 'PUT', headers: admin, body: '{"enable_cold_queue":false}' });
      expect(flags.status).toBe(503);
      expect(((await flags.json()) as { error: string }).error).toMatch(/^flags: not changed: the store refused them \(OOM/);
      expect(gw.stack.flags.get().enable_cold_queue).toBe(true);
    } finally {
      await probe.config('SET', 'maxmemory', '0');
      probe.disconnect();
      await gw.stop();
    }
  });

  it('a budget resume on a Redis out of memory lifts the pause everywhere, as deleting the key does (a paused queue that filled Redis can drain)', async () => {
    const [a, b] = await Promise.all([0, 1].map(() => listenStack({ ...env, ADMIN_TOKEN: 'admin-t' }, { http: true, worker: false })));
    const budget = (path: string, body?: unknown) =>
      fetch(`${a.url}/budget/${path}`, {
        method: 'POST',
        headers: { authorization: 'Bearer admin-t', 'content-type': 'application/json' },
        body: JSON.stringify(body ?? {}),
      });
    const probe = new Redis(redis.url);
    try {
      expect((await budget('webhook', { provider: 'openai', percentUsed: 90 })).status).toBe(204);
      await until(async () => b.stack.pause.paused());
      await probe.config('SET', 'maxmemory', '1'); // every write refused: OOM (a DEL is still taken)
      // Before: 503 "pause_ai_tasks: not set: the store refused it (OOM …)", and paused until Redis had room.
      expect((await budget('resume')).status).toBe(204);
      await until(async () => !(await b.stack.pause.refresh()));
      expect(a.stack.pause.paused()).toBe(false);
      expect(await probe.get('pause_ai_tasks')).toBeNull();
      await probe.config('SET', 'maxmemory', '0');
      // Still a resume once Redis has room: nobody puts it back.
      for (const gw of [a, b]) expect(await gw.stack.pause.refresh()).toBe(false);
      expect(await probe.get('pause_ai_tasks')).toBeNull();
    } finally {
      await probe.config('SET', 'maxmemory', '0');
      probe.disconnect();
      await Promise.all([a.stop(), b.stop()]);
    }
  });

  it('spend caps keep reading the meter while Redis is away: its figure over the cap queues patient requests (the read waited for Redis)', async () => {
    const meter = createHttpServer((req, res) => {
      req.resume();
      const spend = new URL(req.url!, 'http://x').searchParams.get('action') === 'spend';
      const body = spend
        ? { ok: true, today_cost_usd: 80, last_7d_cost_usd: 80, daily_cap_usd: 50, burn_7d_cap_usd: 200, cap_exceeded: true }
        : { ok: true, appended: 0, duplicates: 0 };
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(body));
    });
    await new Promise<void>((r) => meter.listen(0, '127.0.0.1', r));
    const meterEnv = {
      METER_URL: `http://127.0.0.1:${(meter.address() as AddressInfo).port}/exec`,
      METER_SPOOL_DIR: mkdtempSync(join(tmpdir(), 'spend-spool-')),
    };
    const gw = await listenStack({ ...env, ...meterEnv }, { http: true, worker: false });
    try {
      await redis.stop(); // before the meter was first asked for its figure
      const patient = { 'x-must-have-answer': 'false', 'x-time-to-answer-ms': '3000' };
      // Routed on what is at hand while the first read goes on, then queued once the meter's figure is in.
      const over = await until(async () => {
        const r = await chat(gw.url, undefined, patient);
        return r.status === 503 && JSON.parse(r.text).error.code === 'cold_queue_unavailable' && r; // queued, but the queue is in Redis
      });
      expect(over.status).toBe(503);
    } finally {
      await gw.stop();
      meter.close();
    }
  });

  it("a request continuing a stored response while Redis stalls gets 503 response_owner_unavailable in time, never another tenant's answer", async () => {
    const keyed = { ...env, GATEWAY_AUTH: 'keys' };
    const output: string[] = [];
    expect(
      await keysCli(
        ['create', 'acme'],
        keyed,
        (l) => output.push(l),
        (l) => output.push(l),
      ),
    ).toBe(0);
    const key = output.at(-1)!;
    // The response is answered by one instance and continued on another: the instance that answered
    // keeps its owner and needs no Redis for it, the other must read it.
    const [answering, gw] = [
      await listenStack(keyed, { http: true, worker: false }),
      await listenStack(keyed, { http: true, worker: false }),
    ];
    const sdk = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: key, maxRetries: 0 });
    try {
      const first = await new OpenAI({ baseURL: `${answering.url}/v1`, apiKey: key, maxRetries: 0 }).responses.create({
        model: 'gpt-4o-mini',
        input: 'remember',
      });
      await sdk.responses.create({ model: 'gpt-4o-mini', input: 'hello' }); // the key is cached now
      // Connected, but nothing answered until thawed: an answer at all is one not waiting for Redis.
      redis.freeze();
      const stalled = await sdk.responses
        .create({ model: 'gpt-4o-mini', input: 'and?', previous_response_id: first.id }, { headers: { 'x-time-to-answer-ms': '500' } })
        .catch((e: unknown) => e);
      expect(stalled).toMatchObject({ status: 503, code: 'response_owner_unavailable' });
    } finally {
      redis.thaw();
      await Promise.all([gw.stop(), answering.stop()]);
    }
  });

  it('with Redis away, a Responses answer is not held for its owner record, nor a continuation for its owner check, up to the time-to-answer', async () => {
    const keyed = { ...env, GATEWAY_AUTH: 'keys' };
    const output: string[] = [];
    const print = (l: string) => output.push(l);
    expect(await keysCli(['create', 'acme'], keyed, print, print)).toBe(0);
    // Answered by one instance, continued on another, which must read its owner (the answering one keeps it).
    const [answering, gw] = [
      await listenStack(keyed, { http: true, worker: false }),
      await listenStack(keyed, { http: true, worker: false }),
    ];
    const sdk = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: output.at(-1)!, maxRetries: 0 });
    // Longer than this test may run: before, each was held for the whole time-to-answer.
    const patient = { headers: { 'x-time-to-answer-ms': '60000' } };
    try {
      const first = await new OpenAI({ baseURL: `${answering.url}/v1`, apiKey: output.at(-1)!, maxRetries: 0 }).responses.create({
        model: 'gpt-4o-mini',
        input: 'remember',
      });
      await sdk.responses.create({ model: 'gpt-4o-mini', input: 'hello' }); // the key is cached now
      await answering.stop();
      await redis.stop();
      expect((await sdk.responses.create({ model: 'gpt-4o-mini', input: 'hello' }, patient)).status).toBe('completed');
      const next = await sdk.responses
        .create({ model: 'gpt-4o-mini', input: 'and?', previous_response_id: first.id }, patient)
        .catch((e: unknown) => e);
      expect(next).toMatchObject({ status: 503, code: 'response_owner_unavailable' });
    } finally {
      await gw.stop();
    }
  });

  it('a key not seen before while Redis stalls gets 503 key_store_unavailable with Retry-After, on chat and on the other /v1 endpoints', async () => {
    const keyed = { ...env, GATEWAY_AUTH: 'keys' };
    const output: string[] = [];
    const print = (l: string) => output.push(l);
    expect(await keysCli(['create', 'acme'], keyed, print, print)).toBe(0);
    const key = output.at(-1)!;
    const gw = await listenStack(keyed, { http: true, worker: false });
    const pauser = new Redis(redis.url);
    const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
    try {
      await pauser.call('CLIENT', 'PAUSE', '4000', 'ALL'); // connected, but nothing answered
      const chatted = await fetch(`${gw.url}/v1/chat/completions`, { method: 'POST', headers, body: JSON.stringify(BODY) });
      const listed = await fetch(`${gw.url}/v1/models`, { headers });
      for (const res of [chatted, listed]) {
        expect(res.status).toBe(503);
        expect(((await res.json()) as { error: { code: string } }).error.code).toBe('key_store_unavailable');
        expect(res.headers.get('retry-after')).toBe('1'); // before: none, where every other store's 503 has it
      }
    } finally {
      await pauser.call('CLIENT', 'UNPAUSE');
      pauser.disconnect();
      await gw.stop();
    }
  });

  it('a keyed request whose limits all wait on a stalled Redis still gets its answer: they share one short wait, not 250 ms each', async () => {
    const routes = join(mkdtempSync(join(tmpdir(), 'limits-stall-')), 'routes.json');
    const map = JSON.parse(readFileSync(env.ROUTES_FILE!, 'utf8')) as Record<string, unknown>;
    writeFileSync(
      routes,
      JSON.stringify({ ...map, limits: { tenant_requests_per_minute: 1000, provider_tokens_per_minute: { openai: 1e6 } } }),
    );
    const keyed = { ...env, ROUTES_FILE: routes, GATEWAY_AUTH: 'keys' };
    const output: string[] = [];
    const print = (l: string) => output.push(l);
    expect(await keysCli(['create', 'acme', '--rpm', '600', '--tpm', '100000'], keyed, print, print)).toBe(0);
    const key = output.at(-1)!;
    const gw = await listenStack(keyed, { http: true, worker: false });
    const pauser = new Redis(redis.url);
    try {
      expect((await chat(gw.url, BODY, { authorization: `Bearer ${key}` })).status).toBe(200); // the key known
      await pauser.call('CLIENT', 'PAUSE', '4000', 'ALL'); // connected, but nothing answered
      const answered = await chat(gw.url, BODY, { authorization: `Bearer ${key}`, 'x-time-to-answer-ms': '700' });
      // Before: the key's tokens, the provider's budget and the request counts waited 250 ms each,
      // and the 50 ms left were too few for a call: 503 cold_queue_unavailable from a healthy provider.
      expect(answered.status).toBe(200);
    } finally {
      await pauser.call('CLIENT', 'UNPAUSE');
      pauser.disconnect();
      await gw.stop();
    }
  });

  it('a function call while the workflow store is stalled or away gets 503 workflow_store_unavailable within 2 s, nothing called; an answer got before a stall is returned, not asked for twice', async () => {
    let onCall: (n: number) => Promise<number> = async () => 200;
    const seen: string[] = [];
    const letters: string[] = [];
    const target = createHttpServer(async (req, res) => {
      let text = '';
      for await (const chunk of req) text += chunk;
      if (req.url === '/dlq') return res.writeHead(200).end(void letters.push(text));
      const status = await onCall(seen.push(req.url!));
      res.writeHead(status, { 'content-type': 'application/json' }).end('{"ok":true,"booking_id":"evt-1"}');
    });
    await new Promise<void>((r) => target.listen(0, '127.0.0.1', r));
    const dir = mkdtempSync(join(tmpdir(), 'wf-stall-'));
    const c = filled() as any;
    for (const f of c.functions) if (f.webhook) f.webhook = `http://127.0.0.1:${(target.address() as AddressInfo).port}/${f.name}`;
    c.workflow.dlq_url = `http://127.0.0.1:${(target.address() as AddressInfo).port}/dlq`;
    writeFileSync(join(dir, 'concierge.json'), JSON.stringify(c));
    const voiceEnv = { CONCIERGE_FILE: join(dir, 'concierge.json'), VOICE_TOKEN: 'v', CALLS_CSV_FILE: join(dir, 'calls.csv') };
    const logs: string[] = [];
    const gw = await listenStack({ ...env, ...voiceEnv }, { http: true, worker: false }, captureLogger(logs));
    const pauser = new Redis(redis.url);
    pauser.on('error', () => undefined); // refused while Redis is stopped
    const call = async (callId: string, ms = 5000) => {
      const started = performance.now();
      const r = await fetch(`${gw.url}/v1/workflow/function-called`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: 'Bearer v' },
        body: JSON.stringify({
          function: 'book_slot',
          call_id: callId,
          args: { name: 'Ana', phone: '+351900000001', service: 'cut', date: '2026-11-24', time: '10:00', location: 'Lisboa', notes: '' },
        }),
        signal: AbortSignal.timeout(ms), // before: no answer until Redis answered again
      });
      const retryAfter = r.headers.get('retry-after');
      return { status: r.status, body: (await r.json()) as Record<string, any>, retryAfter, ms: performance.now() - started };
    };
    try {
      await pauser.call('CLIENT', 'PAUSE', '8000', 'ALL'); // connected, but nothing answered: a stalled Redis
      const stalled = await call('call-stalled');
      // before: no Retry-After, while the gateway's other 503s for a store that is away carry one
      expect(stalled).toMatchObject({ status: 503, body: { ok: false, code: 'workflow_store_unavailable' }, retryAfter: '1' });
      expect(stalled.body.error).toMatch(/workflow store \(Redis\).*nothing was called/);
      expect(stalled.ms).toBeLessThan(2000 + 500);
      await pauser.call('CLIENT', 'UNPAUSE');
      await redis.stop();
      const away = await call('call-away');
      expect(away).toMatchObject({ status: 503, body: { code: 'workflow_store_unavailable' }, retryAfter: '1' });
      expect(away.ms).toBeLessThan(2000 + 500);
      expect(seen).toHaveLength(0); // nothing called: a retry is safe
      await redis.start();
      // The claim sent while Redis was away lands when it is back: freed again, so the retry runs at once.
      const retried = await until(async () => {
        const r = await call('call-away');
        return r.status === 200 && r;
      });
      expect(retried.body).toMatchObject({ ok: true, replayed: false, result: { booking_id: 'evt-1' } });
      expect(retried.ms).toBeLessThan(2000);
      // Redis stalls while the target runs: its answer is returned all the same, its record left to land late.
      const stall = new Redis(redis.url);
      onCall = () => stall.call('CLIENT', 'PAUSE', '4000', 'ALL').then(() => 200);
      const late = await call('call-late');
      expect(late).toMatchObject({ status: 200, body: { ok: true, replayed: false, result: { booking_id: 'evt-1' } } });
      expect(late.ms).toBeLessThan(3000);
      expect(logs.join('\n')).toMatch(/call-late.*replay record may be missing/);
      onCall = async () => 200;
      await stall.call('CLIENT', 'UNPAUSE');
      const replay = await until(async () => {
        const r = await call('call-late');
        return r.status === 200 && r;
      });
      expect(replay.body).toMatchObject({ ok: true, replayed: true, result: { booking_id: 'evt-1' } });
      expect(seen).toHaveLength(2); // call-away once, call-late once: none twice
      // Redis stalls as the target fails for good: the dead letter goes straight to the dead-letter URL.
      onCall = async (n) => (n === 5 ? stall.call('CLIENT', 'PAUSE', '10000', 'ALL').then(() => 500) : 500);
      const failed = await call('call-failed', 9000);
      expect(failed).toMatchObject({ status: 200, body: { ok: false, dead_lettered: true } });
      expect(failed.ms).toBeLessThan(1500 + 2 * 2000 + 1000); // 3 attempts, then the letter and the record in 2 s each
      expect(letters.map((l) => JSON.parse(l).call_id)).toEqual(['call-failed']);
      await stall.call('CLIENT', 'UNPAUSE');
      stall.disconnect();
    } finally {
      await pauser.call('CLIENT', 'UNPAUSE').catch(() => undefined);
      pauser.disconnect();
      await gw.stop();
      target.closeAllConnections();
      await new Promise((r) => target.close(r));
    }
  }, 45_000);
});

describe.skipIf(!hasRedisServer)('a stop while Redis stalls', () => {
  const quiet = { warn: () => {}, info: () => {}, error: () => {} };
  const event = (i: number) =>
    normalizeEvent({ event_id: `e${i}`, cost_usd: 0.01, provider: 'openai' }, { now: () => new Date(), uuid: () => 'x' });
  function streamSink(client: Redis, meter: FakeMeterWebApp, extra: Partial<StreamSinkOptions> = {}) {
    const spoolDir = mkdtempSync(join(tmpdir(), 'stall-close-'));
    const fallback = new WebAppSink({ url: meter.url, token: 'tok', spoolDir, flushIntervalMs: 60_000, log: quiet });
    const base = { url: meter.url, token: 'tok', redis: client, prefix: 'stall', toJson: eventJson, fallback, flushIntervalMs: 60_000 };
    return new RedisStreamSink({ ...base, log: quiet, ...extra });
  }

  it('the meter stream closes within its bound, not when Redis answers; its events stay in Redis and another gateway delivers them', async () => {
    const meter = await new FakeMeterWebApp().start();
    const first = new Redis(redis.url);
    const other = new Redis(redis.url);
    try {
      const sink = streamSink(first, meter, { closeTimeoutMs: 500 });
      await Promise.all([0, 1, 2].map((i) => sink.send(event(i))));
      // Connected, but nothing answered until thawed: before, closed only once Redis answered.
      redis.freeze();
      await sink.close();
      first.disconnect(); // as the stopping gateway does next
      redis.thaw();
      // Once Redis answers again:
      const second = streamSink(other, meter, { claimIdleMs: 1 });
      await until(async () => {
        await second.flush();
        return meter.stored.length === 3;
      });
      expect(meter.stored).toEqual(['e0', 'e1', 'e2']);
      await second.close();
    } finally {
      for (const client of [first, other]) client.disconnect();
      await meter.stop();
    }
  });

  it('reads made every few milliseconds do not pile up while Redis stalls: each poll waits for its last answer, so few are sent when Redis answers', async () => {
    const reader = new Redis(redis.url, { maxRetriesPerRequest: null }); // as the gateway's connection
    const [pauser, probe] = [new Redis(redis.url), new Redis(redis.url)];
    const pause = new RedisPause(reader, 10, 'polls:pause');
    const flags = new RedisFlags({ enable_warm_fallback: true, enable_cold_queue: true, killed_models: [] }, reader, 'polls:flags', 10);
    const store = new RedisKeyStore(reader, 'polls');
    const { key } = await createKey(store, { tenant: 'acme' });
    const auth = new ClientAuth(store, { warn: () => {}, refreshMs: 10, lookupTimeoutMs: 5 }).start();
    // Cached: read again by every refresh. Looked up within 5 ms, which a busy machine may miss: asked again until it is in.
    await until(async () => (await auth.check(`Bearer ${key}`)).ok);
    const windows = new RedisNoticeWindows(reader, 'polls');
    const notifier = new Notifier([], { windows, sweepMs: 10, log: { warn: () => {}, info: () => {} } });
    const calls = async () => {
      const stats = (await probe.info('commandstats')).matchAll(/^cmdstat_(\w+):calls=(\d+)/gm);
      return Object.fromEntries([...stats].map(([, name, n]) => [name, Number(n)]));
    };
    try {
      await pauser.call('CONFIG', 'RESETSTAT');
      await pauser.call('CLIENT', 'PAUSE', '2000', 'ALL'); // connected, but nothing answered for 2 s
      await probe.ping(); // answered once the stall is over
      pause.close();
      flags.close();
      await auth.close();
      await notifier.close();
      await reader.ping(); // after everything sent before it
      const sent = await calls();
      // One tick every 10 ms for 2 s: before, about 200 reads of each were sent when Redis answered
      // (the notices' sweep reads one key per notice kind, six: about 1,200 EXISTS). Now a few ticks'
      // worth: the one waiting through the stall and those after it, before the stop.
      const piled = ['get', 'mget', 'hgetall', 'hmget', 'hset', 'exists'].filter((c) => (sent[c] ?? 0) > 30).map((c) => `${c}: ${sent[c]}`);
      expect(piled).toEqual([]);
    } finally {
      pause.close();
      flags.close();
      for (const client of [reader, pauser, probe]) client.disconnect();
    }
  });

  it('a follow-up notice waiting for its window does not hold the stop; it stays held, and another gateway sends it', async () => {
    const client = new Redis(redis.url);
    const [pauser, otherClient] = [new Redis(redis.url), new Redis(redis.url)];
    const windows = new RedisNoticeWindows(client, 'stall');
    const log = { warn: () => {}, info: () => {} };
    const n = new Notifier(['ops@example.com'], { windowMs: 60_000, windows, log });
    let other: Notifier | null = null;
    try {
      n.notify({ kind: 'enqueued', jobIds: ['llm-1'] }); // opens the window, sent at once
      n.notify({ kind: 'enqueued', jobIds: ['llm-2'] }); // held for the follow-up
      await until(async () => (await pauser.llen('stall:notice:enqueued:held')) === 1);
      const id = await client.call('CLIENT', 'ID');
      // Connected, but nothing answered until thawed: the stop arriving at all is one not waiting for Redis.
      redis.freeze();
      await n.close();
      client.disconnect(); // as the stopping gateway does next
      redis.thaw();
      // The stop's take, given up on, still sits in Redis's socket: it runs before Redis sees the client gone.
      await until(
        async () =>
          !String(await pauser.call('CLIENT', 'LIST'))
            .split('\n')
            .some((l) => l.startsWith(`id=${id} `)),
      );
      expect(await pauser.llen('stall:notice:enqueued:held')).toBe(1); // before: 0, the take deleted it
      await pauser.del('stall:notice:enqueued'); // the fleet's window ends
      other = new Notifier(['ops@example.com'], {
        windowMs: 60_000,
        sweepMs: 50,
        windows: new RedisNoticeWindows(otherClient, 'stall'),
        log,
      });
      await until(async () => other!.sent.length > 0, 20_000);
      expect(other.sent.map((s) => s.subject)).toEqual(['AI requests queued (Cold tier) (1 more since the first notice)']);
      expect(other.sent[0].text).toContain('llm-2');
    } finally {
      await other?.close();
      for (const c of [pauser, client, otherClient]) c.disconnect();
    }
  });

  // Frozen (SIGSTOP), Redis keeps every connection open and answers nothing. The worker's close
  // waited on it (BullMQ's Worker.close: the cut job handed back, its connections closed), and the
  // process never exited.
  it('a gateway process whose worker runs a job exits 0 on SIGTERM within its grace while Redis stalls', async () => {
    const gw = await startInstance(tmpdir(), {
      ...Object.fromEntries(Object.entries(env).map(([k, v]) => [k, String(v)])),
      WORKER: 'on',
      SHUTDOWN_GRACE_MS: '1000',
    });
    try {
      hot.next({ kind: 'ok', delayMs: 1000 }); // slower than its time-to-answer: queued, then run by the worker
      hot.next({ kind: 'ok', delayMs: 60_000 }); // the worker's run: still under way when the grace ends
      const queued = await chat(gw.url, undefined, { 'x-time-to-answer-ms': '300' });
      expect(queued.status).toBe(202);
      await until(async () => hot.received.length === 2, 20_000);
      redis.freeze();
      const started = Date.now();
      gw.child.kill('SIGTERM');
      const code = await Promise.race([gw.exited, new Promise<string>((r) => setTimeout(() => r('still running'), 20_000))]);
      expect(code).toBe(0); // before: still running, until Redis answered again
      // Past its grace, the stop has what Kubernetes' 30 s leaves after the 25 s grace: 5 s. Before, 6 s
      // (the worker's 2 s, then the notifications' and the spend's 2 s each, one after the other).
      expect(Date.now() - started).toBeLessThan(1000 + 5000);
      expect(gw.output()).toContain('worker: not closed');
    } finally {
      redis.thaw();
      await gw.crash();
    }
  }, 60_000);

  // The job's call answered within the grace, but its answer was kept with its run's claim only once
  // its call's mark was confirmed gone, which a stalled Redis never confirmed before the process
  // exited: the job was run again, a second provider call and a second meter event.
  it('a job answered during a stop while Redis stalls is not run again by the worker that takes it back', async () => {
    const gw = await startInstance(tmpdir(), {
      ...Object.fromEntries(Object.entries(env).map(([k, v]) => [k, String(v)])),
      WORKER: 'on',
      SHUTDOWN_GRACE_MS: '3000',
    });
    const client = new Redis(redis.url);
    let other: Awaited<ReturnType<typeof listenStack>> | null = null;
    try {
      hot.always({ kind: 'ok', content: 'a second run' });
      hot.next({ kind: 'ok', delayMs: 1000 }); // slower than its time-to-answer: queued, then run by the worker
      hot.next({ kind: 'ok', delayMs: 1000, content: 'the first run' }); // answered within the grace
      const queued = await chat(gw.url, undefined, { 'x-time-to-answer-ms': '300' });
      expect(queued.status).toBe(202);
      const { jobId } = JSON.parse(queued.text) as { jobId: string };
      await until(async () => hot.received.length === 2, 20_000);
      redis.freeze();
      gw.child.kill('SIGTERM');
      expect(await gw.exited).toBe(0);
      redis.thaw();
      // Time passing: the run's BullMQ lock, its worker's stalled-job check and a claim without an answer (150 s) lapse.
      const [run] = await client.keys(`*:run:${jobId}`);
      const q = run.slice(0, -`:run:${jobId}`.length);
      for (const key of [`${q}:${jobId}:lock`, `${q}:stalled-check`]) await client.pexpire(key, 1);
      if ((await client.hget(run, 'result')) === null) await client.pexpire(run, 1);
      other = await listenStack(env, { http: true, worker: true, cold: { lockMs: 500 } });
      const done = await until(async () => {
        const r = await fetch(`${other!.url}/v1/jobs/${jobId}`);
        const job = r.status === 200 ? ((await r.json()) as { state: string; result?: { body: unknown } }) : null;
        return job?.state === 'completed' && job;
      }, 20_000);
      expect(done.result?.body).toMatchObject({ choices: [{ message: { content: 'the first run' } }] });
      expect(hot.received).toHaveLength(2); // before: a third call, the job's second, and its event
    } finally {
      redis.thaw();
      await other?.stop();
      client.disconnect();
      await gw.crash();
    }
  }, 60_000);

  it('the whole gateway, worker included, stops in a few seconds, not when Redis answers', async () => {
    const meter = await new FakeMeterWebApp().start();
    const spool = { METER_URL: meter.url, METER_TOKEN: 'tok', METER_SPOOL_DIR: mkdtempSync(join(tmpdir(), 'stall-stop-')) };
    const gw = await listenStack({ ...env, ...spool }, { http: true, worker: true });
    try {
      expect((await chat(gw.url)).status).toBe(200); // an event in the stream
      // Connected, but nothing answered until thawed: before, the stop waited until Redis answered.
      redis.freeze();
      await gw.stop();
    } finally {
      redis.thaw();
      await meter.stop();
    }
  });
});

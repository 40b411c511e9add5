// The Cold tier against the real Redis (its own database and key prefix, removed afterwards):
// queue, worker, pause, budget endpoints, notifications, jobs, dead letters, restarts.
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import OpenAI from 'openai';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, onTestFinished } from 'vitest';
import { Queue, Worker } from 'bullmq';
import { JOB_NAME, QUEUE_NAME } from '../../gateway/src/cold-queue';
import { ops } from '../../gateway/src/ops';
import { createStack, type Stack, type StackOptions } from '../../gateway/src/stack';
import { FakeProvider } from './fake-provider';
import { captureLogger, chat, listenStack, testJob } from './harness';
import { TEST_REDIS_DB, hasRedisServer } from '../redis-db';
import { OwnRedis } from '../own-redis';
import { startInstance } from './instances';

const DB = TEST_REDIS_DB;
const REDIS_URL = `redis://127.0.0.1:6379/${DB}`;
const ADMIN = 'cold-admin';
const prefix = `test-cold-${process.pid}`;
/** npm run ops's error lines: none is expected where this is passed. */
const fail = (line: string) => expect.fail(`npm run ops wrote an error: ${line}`);
let redis: Redis;
let hot: FakeProvider, warm: FakeProvider;
let hook: Server;
let hookUrl = '';
const posted: Array<{ text: string }> = [];
const stacks: Stack[] = [];
let env: NodeJS.ProcessEnv;

beforeAll(async () => {
  redis = new Redis(REDIS_URL);
  hook = createServer(async (req, res) => {
    let body = '';
    for await (const c of req) body += c;
    posted.push(JSON.parse(body));
    res.writeHead(200).end('ok');
  });
  await new Promise<void>((r) => hook.listen(0, '127.0.0.1', r));
  hookUrl = `http://127.0.0.1:${(hook.address() as AddressInfo).port}/hook`;
});
afterAll(async () => {
  hook.close();
  redis.disconnect();
});

async function cleanRedis() {
  const keys = await redis.keys(`${prefix}:*`);
  if (keys.length) await redis.del(...keys);
  await redis.del('pause_ai_tasks', 'pause_ai_tasks:mark', 'pause_ai_tasks:set');
}

beforeEach(async () => {
  await cleanRedis();
  posted.length = 0;
  [hot, warm] = await Promise.all([new FakeProvider().start(), new FakeProvider().start()]);
  const dir = mkdtempSync(join(tmpdir(), 'cold-'));
  const routes = join(dir, 'routes.json');
  writeFileSync(
    routes,
    JSON.stringify({
      hot: [{ provider: 'openai', model: 'gpt-4o-mini', baseUrl: hot.url }],
      warm: [{ provider: 'anthropic', model: 'claude-3-5-haiku-latest', baseUrl: warm.url }],
      cold: { mode: 'graceful_degrade', queue: 'ai-tasks', notify: [hookUrl, 'oncall@example.com'] },
    }),
  );
  env = {
    ROUTES_FILE: routes,
    QUEUE_STORE_URL: REDIS_URL,
    REDIS_PREFIX: prefix,
    ADMIN_TOKEN: ADMIN,
    METER_CSV_FILE: join(dir, 'e.csv'),
    NOTIFY_WINDOW_MS: '150',
    SCOPES_FILE: join(dir, 'none.yaml'),
  };
});
afterEach(async () => {
  for (const s of stacks.splice(0)) await s.close();
  await Promise.all([hot.stop(), warm.stop()]);
  await cleanRedis();
});

async function up(options: Omit<StackOptions, 'http'>) {
  const logs: string[] = [];
  const h = await listenStack(env, { http: true, ...options }, captureLogger(logs));
  // A test that closes the stack closes its server too (h.stop ends with the stack's own close).
  const closeStack = h.stack.close.bind(h.stack);
  h.stack.close = async () => {
    h.stack.close = closeStack;
    await h.stop();
  };
  stacks.push(h.stack);
  return { ...h, logs };
}

const admin = (url: string, path: string, body?: unknown, token = ADMIN) =>
  fetch(`${url}${path}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });

async function until<T>(check: () => Promise<T | undefined | null | false>, ms = 10_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await check();
    if (v) return v;
    if (Date.now() > end) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 50));
  }
}
/** Whether the provider's tokens counted this minute have reached `budget` (counted after the answer is sent). */
async function tokensOver(provider: string, budget: number): Promise<boolean> {
  const keys = await redis.keys(`${prefix}:tb:${provider}:*`);
  const counts = keys.length ? await redis.mget(...keys) : [];
  return counts.some((c) => Number(c) >= budget);
}
const job = async (url: string, id: string) => (await (await fetch(`${url}/v1/jobs/${id}`)).json()) as Record<string, any>;
/** The job once dead-lettered with its error readable (BullMQ may show the state a moment before the reason). */
const deadLettered = (url: string, id: string) =>
  until(async () => {
    const j = await job(url, id);
    return j.state === 'dead-lettered' && j.lastError ? j : null;
  });

describe('Cold tier', () => {
  it('every route failing: 202 queued within the time-to-answer, once per idempotency key, the first notice at once', async () => {
    env.NOTIFY_WINDOW_MS = '60000'; // the second enqueue falls in the first one's window
    const { url, stack } = await up({ worker: false });
    hot.always({ kind: 'status', status: 500 });
    warm.always({ kind: 'status', status: 500 });
    const first = await chat(url, undefined, { 'x-time-to-answer-ms': '3000', 'x-customer-id': 'acme', 'idempotency-key': 'req-1' });
    expect(first.status).toBe(202);
    expect(first.headers.get('x-route-tier')).toBe('cold');
    expect(first.ms).toBeLessThan(3000);
    const { jobId } = first.json();
    expect(first.json()).toEqual({ status: 'queued', jobId: expect.stringMatching(/^llm-[0-9a-f]{40}$/) });
    const again = await chat(url, undefined, { 'x-time-to-answer-ms': '3000', 'x-customer-id': 'acme', 'idempotency-key': 'req-1' });
    expect(again.json().jobId).toBe(jobId);
    await chat(url, undefined, { 'x-time-to-answer-ms': '3000', 'x-customer-id': 'beta', 'idempotency-key': 'req-2' });
    expect(await job(url, jobId)).toMatchObject({ id: jobId, state: 'waiting', attempts: 0, customerId: 'acme', reason: 'all_failed' });
    const counts = await redis.llen(`${prefix}:ai-tasks:wait`);
    expect(counts).toBe(2);
    await until(async () => posted.length === 1); // the first enqueue's notice, without waiting for the window
    expect(posted[0].text).toMatch(/^AI requests queued \(Cold tier\)\nJobs \(1\): llm-/);
    expect(posted[0].text).toContain(jobId);
    expect(posted[0].text).toMatch(/Tenants: acme\n/);
    await stack.notifier.flush(); // the window's end, without waiting for it
    expect(posted).toHaveLength(2); // the second enqueue: one follow-up
    expect(posted[1].text).toMatch(/AI requests queued \(Cold tier\) \(1 more since the first notice\)/);
    expect(posted[1].text).toMatch(/Tenants: beta/);
    expect((await fetch(`${url}/v1/jobs/llm-${'0'.repeat(40)}`)).status).toBe(404);
    expect((await fetch(`${url}/v1/jobs/nope`)).status).toBe(400); // not an id the gateway makes
  });

  it('a queued request runs whole: a chat without its stream options, embeddings without a stream field (providers refuse both)', async () => {
    const routes = JSON.parse(readFileSync(env.ROUTES_FILE!, 'utf8'));
    routes.hot.push({ provider: 'openai', model: 'text-embedding-3-small', baseUrl: hot.url, apis: ['embeddings'] });
    writeFileSync(env.ROUTES_FILE!, JSON.stringify(routes));
    const { url } = await up({ worker: true });
    // No room for a call: queued. So little time that a busy Redis may take longer to add the job:
    // the client is told 503 and sends it again, as a client does (the job's id is the same).
    const queue = async (path: string, body: object) => {
      for (let tries = 1; ; tries++) {
        const r = await fetch(`${url}${path}`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'x-time-to-answer-ms': '10' },
          body: JSON.stringify(body),
        });
        const text = await r.text();
        if (r.status !== 503 || tries === 5) return JSON.parse(text.replace(/^data: /, '')) as { jobId: string }; // a streamed one: its one event
      }
    };
    const streamed = { model: 'x', messages: [{ role: 'user', content: 'hi' }], stream: true, stream_options: { include_usage: true } };
    const ids = [
      (await queue('/v1/chat/completions', streamed)).jobId,
      (await queue('/v1/embeddings', { model: 'text-embedding-3-small', input: 'a' })).jobId,
    ];
    for (const id of ids) await until(async () => (await job(url, id)).state === 'completed');
    const sent = (path: string) => hot.received.find((r) => r.path.endsWith(path))!.body;
    expect(sent('/chat/completions')).toMatchObject({ stream: false });
    expect(sent('/chat/completions')).not.toHaveProperty('stream_options');
    expect(sent('/embeddings')).not.toHaveProperty('stream');
  });

  it('a streamed request that is queued gets the job as its one event, which the openai client raises (code queued) instead of ending an empty stream', async () => {
    const { url } = await up({ worker: false });
    hot.always({ kind: 'status', status: 500 });
    warm.always({ kind: 'status', status: 500 });
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const { data: stream, response } = await client.chat.completions
      .create(
        { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }], stream: true },
        { headers: { 'x-time-to-answer-ms': '3000' } },
      )
      .withResponse();
    expect([response.status, response.headers.get('x-route-tier')]).toEqual([202, 'cold']);
    const chunks: unknown[] = [];
    const raised = await (async () => {
      for await (const chunk of stream) chunks.push(chunk);
    })().catch((e: unknown) => e);
    expect(chunks).toEqual([]);
    expect(raised).toBeInstanceOf(OpenAI.APIError);
    expect((raised as InstanceType<typeof OpenAI.APIError>).code).toBe('queued');
    const jobId = /queued as job (llm-[0-9a-f]{40})/.exec((raised as Error).message)?.[1];
    expect(await job(url, jobId!)).toMatchObject({ id: jobId, state: 'waiting', reason: 'all_failed' });
  });

  it("a job is the request's own: another body, or another tenant with the same key, is another job, never someone else's answer", async () => {
    const { url } = await up({ worker: false });
    hot.always({ kind: 'status', status: 500 });
    warm.always({ kind: 'status', status: 500 });
    const messages = [{ role: 'user', content: 'the same question' }];
    const send = (body: object, headers: Record<string, string> = {}) =>
      chat(url, { messages, ...body }, { 'x-time-to-answer-ms': '3000', ...headers }).then((r) => r.json().jobId as string);
    const first = await send({ model: 'gpt-4o-mini', temperature: 0 });
    expect(await send({ model: 'gpt-4o-mini', temperature: 0 })).toBe(first); // the same request: its job
    const other = await send({ model: 'claude-3-5-haiku-latest', temperature: 1 }); // the default key hashes the messages only
    const acme = await send({ model: 'gpt-4o-mini' }, { 'x-customer-id': 'acme', 'idempotency-key': 'order-1' });
    const beta = await send({ model: 'gpt-4o-mini', temperature: 2 }, { 'x-customer-id': 'beta', 'idempotency-key': 'order-1' });
    expect(new Set([first, other, acme, beta]).size).toBe(4);
    expect(await redis.llen(`${prefix}:ai-tasks:wait`)).toBe(4); // each queued, each with its own body
  });

  it('the time-to-answer leaving no room for Hot and Warm still answers 202 in time', async () => {
    const { url } = await up({ worker: false });
    hot.always({ kind: 'hang' });
    warm.always({ kind: 'hang' });
    const res = await chat(url, undefined, { 'x-time-to-answer-ms': '300' });
    expect(res.status).toBe(202);
    expect(res.ms).toBeLessThan(300 + 100);
  });

  // The openai SDK says its own timeout (x-stainless-timeout, in seconds) with a request. The gateway
  // went by its own time-to-answer (30 s): a client with a 5 s timeout had given up (and sent its
  // retry) before the gateway queued its request and answered 202 to nobody.
  it("the openai client's own timeout shortens the time-to-answer: a client that waits 5 s gets its 202 before it gives up", async () => {
    const { url } = await up({ worker: false });
    hot.always({ kind: 'hang' });
    warm.always({ kind: 'hang' });
    // With its default retries: a fresh gateway's first job can outlast the 25 ms a spent time-to-answer leaves it (503, sent again).
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused' });
    // The Node SDK says a timeout given to the request (not the client's default).
    const { data, response } = await client.chat.completions
      .create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] }, { timeout: 5000 })
      .withResponse();
    expect(response.status).toBe(202);
    const { jobId } = data as unknown as { status: string; jobId: string };
    expect(data).toMatchObject({ status: 'queued' });
    expect(await job(url, jobId)).toMatchObject({ state: 'waiting', reason: 'time_to_answer' });
  });

  it('the worker runs queued jobs through the routing again; a restart of gateway and worker loses nothing', async () => {
    const first = await up({ worker: false });
    hot.always({ kind: 'status', status: 503 });
    warm.always({ kind: 'status', status: 503 });
    const { jobId } = (await chat(first.url, undefined, { 'x-time-to-answer-ms': '3000' })).json();
    await first.stack.close();
    stacks.splice(stacks.indexOf(first.stack), 1);

    hot.always({ kind: 'ok', content: 'late but here' });
    const second = await up({ worker: true });
    const done = await until(async () => {
      const j = await job(second.url, jobId);
      return j.state === 'completed' ? j : null;
    });
    expect(done.result).toMatchObject({
      status: 200,
      tier: 'hot',
      provider: 'openai',
      body: { choices: [{ message: { content: 'late but here' } }] },
    });
  });

  it("a worker stopped while a job's call runs cuts it at the grace: the call is metered, the job handed back without an attempt, and another worker completes it", async () => {
    const first = await up({ worker: false });
    hot.always({ kind: 'status', status: 503 });
    warm.always({ kind: 'status', status: 503 });
    const { jobId } = (await chat(first.url, undefined, { 'x-time-to-answer-ms': '3000' })).json();
    const before = hot.received.length;
    hot.always({ kind: 'ok', delayMs: 5000 }); // longer than the grace
    const worker = await up({ worker: true });
    await until(async () => hot.received.length > before); // the job's call runs
    const cut = hot.cancelled;
    await worker.stack.worker!.close(300);
    // Its grace over, the call is cut (the provider hung up on), not waited for: before, a SIGKILL cut it, unmetered.
    await until(async () => hot.cancelled > cut);
    expect(await job(first.url, jobId)).toMatchObject({ attempts: 0 });
    await worker.stack.close();
    stacks.splice(stacks.indexOf(worker.stack), 1);
    const rows = readFileSync(env.METER_CSV_FILE!, 'utf8').trim().split('\n');
    expect(rows.filter((r) => r.includes('CLIENT_CLOSED|ESTIMATED'))).toHaveLength(1); // the provider got it: billed
    expect(await redis.keys(`${prefix}:ai-tasks:calls:*`)).toEqual([]); // metered: not taken for a killed run's call

    hot.always({ kind: 'ok', content: 'after the handover' });
    const next = await up({ worker: true });
    const done = await until(async () => {
      const j = await job(next.url, jobId);
      return j.state === 'completed' ? j : null;
    });
    expect(done).toMatchObject({ attempts: 1, result: { body: { choices: [{ message: { content: 'after the handover' } }] } } });
    expect(readFileSync(env.METER_CSV_FILE!, 'utf8')).not.toContain('WORKER_LOST'); // the cut call is metered once
  });

  // A job queued because its live answer was too slow got the live cap (30 s) on its calls too: each
  // cut, billed, counted against the route, and the job never completed.
  it('a queued job completes when its provider takes longer than a live call may: one provider call, one meter event', async () => {
    const { url, stack } = await up({ worker: true, attemptMs: 300 }); // the live cap, shortened; the job's stays 120 s
    hot.always({ kind: 'ok', delayMs: 800, content: 'slow but whole' });
    warm.always({ kind: 'ok', delayMs: 800, content: 'slow but whole' });
    const { jobId } = await stack.queue.enqueue({ ...testJob('slow-job'), reason: 'time_to_answer' });
    const j = await until(async () => {
      const got = await job(url, jobId);
      return got.state === 'completed' || hot.received.length + warm.received.length > 1 ? got : null;
    });
    expect(hot.received.length + warm.received.length).toBe(1); // before: its calls cut at 300 ms, again and again
    expect(j).toMatchObject({ state: 'completed', result: { body: { choices: [{ message: { content: 'slow but whole' } }] } } });
    await stack.meter.flush();
    const [header, ...rows] = readFileSync(env.METER_CSV_FILE!, 'utf8').trim().split('\n');
    const code = header.split(',').indexOf('error_code');
    expect(rows.map((r) => r.split(',')[code])).toEqual(['']);
  });

  it("a queued job whose Hot provider hangs is answered by Warm in the same run: a call may take half the job's time, not all of it", async () => {
    const { url, stack } = await up({ worker: true, attemptMs: 100, cold: { jobTimeMs: 3000 } });
    hot.always({ kind: 'hang' });
    warm.always({ kind: 'ok', content: 'from warm' });
    const { jobId } = await stack.queue.enqueue({ ...testJob('hung-hot'), reason: 'time_to_answer' });
    const j = await until(async () => {
      const got = await job(url, jobId);
      return got.state === 'completed' || got.state === 'failed' || (got.attempts ?? 0) > 0 ? got : null;
    });
    // Before: the hung call took the job's whole 3 s, Warm was never called and the run was spent.
    expect(warm.received).toHaveLength(1);
    expect(j).toMatchObject({ state: 'completed', result: { body: { choices: [{ message: { content: 'from warm' } }] } } });
  });

  it('budget webhook at 85 %: queued work waits without spending attempts, live traffic avoids the capped provider, one notice', async () => {
    const { url, stack } = await up({ worker: true, cold: { recheckMs: 200 } });
    expect((await admin(url, '/budget/webhook', { provider: 'openai', percentUsed: 85 }, 'wrong')).status).toBe(401);
    expect((await admin(url, '/budget/webhook', { provider: 'openai' })).status).toBe(400);
    expect(
      ((await (await admin(url, '/budget/webhook', { provider: 'openai', percentUsed: '85' })).json()) as { error: string }).error,
    ).toMatch(/^percentUsed: /);
    expect((await admin(url, '/budget/webhook', { provider: 'openai', percentUsed: 79.9 })).status).toBe(204);
    expect((await admin(url, '/budget/webhook', { provider: 'anthropic', percentUsed: 99 })).status).toBe(204);
    expect(await redis.get('pause_ai_tasks')).toBeNull();

    const t0 = Date.now();
    for (let i = 0; i < 3; i++) expect((await admin(url, '/budget/webhook', { provider: 'openai', percentUsed: 85 })).status).toBe(204);
    expect(await redis.get('pause_ai_tasks')).toBe('1');
    await until(async () => stack.pause.paused());
    expect(Date.now() - t0).toBeLessThan(5000);

    // Live requests skip the capped provider's routes.
    const live = await chat(url);
    expect(live.headers.get('x-route-provider')).toBe('anthropic');
    expect(hot.received).toHaveLength(0);

    // A job picked up while paused is not run: it waits (delayed, saying why), no attempt spent.
    const queued = await stack.queue.enqueue(testJob('paused-job'));
    const waiting = await until(async () => {
      const j = await job(url, queued.jobId);
      // The worker notes why the job waits, then moves it to delayed: a look in between sees it active.
      return j.deferred && j.state !== 'active' ? j : null;
    });
    expect(waiting).toMatchObject({ state: 'delayed', attempts: 0, lastError: null, deferred: { reason: 'paused by budget guardrail' } });
    const rechecked = await until(async () => {
      const j = await job(url, queued.jobId); // looked at again (every 200 ms here), still paused
      return j.state === 'delayed' && j.deferred.until !== waiting.deferred.until ? j : null;
    });
    expect(rechecked).toMatchObject({ attempts: 0, deferred: { since: waiting.deferred.since } });

    await until(async () => posted.some((p) => /paused by the budget guardrail/.test(p.text)));
    await stack.notifier.flush(); // the window's end: a notice of the other two webhooks would be sent now
    expect(posted.filter((p) => /paused by the budget guardrail/.test(p.text))).toHaveLength(1);

    expect((await admin(url, '/budget/resume')).status).toBe(204);
    expect(await redis.get('pause_ai_tasks')).toBeNull();
    const done = await until(async () => {
      const j = await job(url, queued.jobId);
      return j.state === 'completed' ? j : null;
    }, 15_000);
    expect(done.attempts).toBe(1); // the one real try
  });

  it('a budget resume logs whether it lifted a pause: not "lifted" on a store that was not paused', async () => {
    const { url, logs } = await up({ worker: false });
    expect((await admin(url, '/budget/resume')).status).toBe(204); // logged before it answers
    expect(logs.join('\n')).not.toMatch(/budget pause lifted/);
    expect(logs.join('\n')).toMatch(/budget resume: not paused \(pause_ai_tasks was not set\), nothing lifted/);
    expect((await admin(url, '/budget/webhook', { provider: 'openai', percentUsed: 85 })).status).toBe(204);
    expect((await admin(url, '/budget/resume')).status).toBe(204);
    expect(logs.join('\n')).toMatch(/budget pause lifted/);
  });

  it("a pause longer than a job may wait dead-letters it, as the pause's notice and npm run ops -- pause say; moved back after the resume, it runs", async () => {
    // The 24 h a job may wait in all, 1 s here: the pause counts towards it as a wait for a route does.
    const { url, stack } = await up({ worker: true, cold: { maxDeferMs: 1000, recheckMs: 200 } });
    expect((await admin(url, '/budget/webhook', { provider: 'openai', percentUsed: 85 })).status).toBe(204);
    const queued = await stack.queue.enqueue(testJob('paused-too-long'));
    const dead = await deadLettered(url, queued.jobId);
    expect(dead.lastError).toBe('no route could take it for 1 s (paused by budget guardrail)');
    // The person on call was told the work waits until a resume: it had to be told it waits 24 h at most.
    const notice = await until(async () => posted.find((p) => /^AI work paused by the budget guardrail/.test(p.text)));
    expect(notice.text).toMatch(/still waiting 24 h after it began to wait is dead-lettered/);
    const opsEnv = { QUEUE_STORE_URL: REDIS_URL, REDIS_PREFIX: prefix };
    const said: string[] = [];
    expect(await ops(['pause'], opsEnv, (l) => said.push(l), fail)).toBe(0);
    expect(said[0]).toMatch(/^already paused: .*a job still waiting after 24 h is dead-lettered/);
    expect((await admin(url, '/budget/resume')).status).toBe(204);
    expect(await ops(['dlq', 'move', '--all'], opsEnv, () => {}, fail)).toBe(0);
    await until(async () => (await job(url, queued.jobId)).state === 'completed');
  });

  it('a Redis that loses its data while paused (restarted without it, or flushed) keeps the pause: requests avoid the capped provider, jobs wait; npm run ops -- resume lifts it', async () => {
    const a = await up({ worker: true, cold: { recheckMs: 200 } });
    const b = await up({ worker: false });
    expect((await admin(a.url, '/budget/webhook', { provider: 'openai', percentUsed: 85 })).status).toBe(204);
    await until(async () => b.stack.pause.paused());

    // Everything the fleet keeps in this run's database, gone, as a restart without persistence
    // leaves it (FLUSHDB itself would also drop the run's claim of the database).
    const kept = [...(await redis.keys(`${prefix}:*`)), ...(await redis.keys('pause_ai_tasks*'))];
    expect(kept).toContain('pause_ai_tasks');
    await redis.del(...kept);
    // Before: both instances read "not paused" within 100 ms, and spending resumed.
    await until(async () => (await redis.get('pause_ai_tasks')) === '1');
    expect([await a.stack.pause.refresh(), await b.stack.pause.refresh()]).toEqual([true, true]);
    expect([...a.logs, ...b.logs].join('\n')).toMatch(/pause_ai_tasks was lost by Redis while paused .*: put back/);
    const live = await chat(b.url);
    expect(live.headers.get('x-route-provider')).toBe('anthropic');
    expect(hot.received).toHaveLength(0);
    const queued = await a.stack.queue.enqueue(testJob('after-the-loss'));
    const waiting = await until(async () => {
      const j = await job(a.url, queued.jobId);
      return j.deferred && j.state !== 'active' ? j : null;
    });
    expect(waiting).toMatchObject({ state: 'delayed', attempts: 0, deferred: { reason: 'paused by budget guardrail' } });

    // The operator's resume, from a process that never saw the pause, still lifts it everywhere.
    const opsEnv = { QUEUE_STORE_URL: REDIS_URL, REDIS_PREFIX: prefix };
    expect(await ops(['resume'], opsEnv, () => {}, fail)).toBe(0);
    await until(async () => !a.stack.pause.paused() && !b.stack.pause.paused());
    const done = await until(async () => {
      const j = await job(a.url, queued.jobId);
      return j.state === 'completed' ? j : null;
    }, 15_000);
    expect(done.attempts).toBe(1);
    expect([await a.stack.pause.refresh(), await b.stack.pause.refresh()]).toEqual([false, false]);
    expect(await redis.get('pause_ai_tasks')).toBeNull();
    expect((await chat(b.url)).headers.get('x-route-provider')).toBe('openai');
  });

  it('a job queued during an outage longer than its attempts span completes once a provider returns; only real tries count', async () => {
    // Shortened: breakers open for 400 ms (30 s), a job's backoff 50 ms (1 s): 5 attempts span under 1 s.
    const { url } = await up({ worker: true, breaker: { openMs: 400 }, cold: { backoffMs: 50 } });
    hot.always({ kind: 'status', status: 500 });
    warm.always({ kind: 'status', status: 500 });
    const queued = await chat(url, undefined, { 'x-time-to-answer-ms': '3000' });
    expect(queued.status).toBe(202);
    const { jobId } = queued.json();
    const waiting = await until(async () => {
      const j = await job(url, jobId);
      return j.deferred && j.state === 'delayed' ? j : null;
    });
    expect(waiting.deferred.reason).toMatch(/^every route's breaker is open; next probe at /);
    // The outage goes on: the job's calls (the breakers' probes) come to more than its 5 attempts.
    const probed = hot.received.length;
    await until(async () => hot.received.length >= probed + 6, 12_000);
    expect((await job(url, jobId)).state).not.toBe('dead-lettered');
    const calls = hot.received.length + warm.received.length;
    hot.always({ kind: 'ok', content: 'back' });
    warm.always({ kind: 'ok', content: 'back' });
    const done = await until(async () => {
      const j = await job(url, jobId);
      return j.state === 'completed' ? j : null;
    });
    expect(done.result).toMatchObject({ status: 200, body: { choices: [{ message: { content: 'back' } }] } });
    expect(done.attempts).toBeLessThanOrEqual(3);
    expect(calls).toBeLessThan(40); // probes, not a retry storm
    expect(posted.some((p) => /dead-lettered/.test(p.text))).toBe(false);
  });

  it('a job that fails on routes answering other requests is dead-lettered after its attempts, and stops holding every breaker open', async () => {
    // Shortened: breakers open for 400 ms (30 s), a job's backoff 50 ms (1 s).
    const { url } = await up({ worker: true, breaker: { openMs: 400 }, cold: { backoffMs: 50 } });
    const poisoned = (body: Record<string, any>) => JSON.stringify(body.messages).includes('poison');
    for (const p of [hot, warm]) p.when(poisoned, { kind: 'status', status: 500 });
    const poison = { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'poison' }] };
    const queued = await chat(url, poison, { 'x-time-to-answer-ms': '3000' });
    expect(queued.status).toBe(202);
    const { jobId } = queued.json();
    // Live requests go on; those that find every breaker open are queued, until one gets through.
    await until(async () => (await chat(url, undefined, { 'x-time-to-answer-ms': '3000' })).status === 200);
    const dead = await until(async () => {
      const j = await job(url, jobId);
      return j.state === 'dead-lettered' ? j : null;
    });
    expect(dead.lastError).toMatch(/^no route answered \(.*HTTP 500\)/);
    await until(async () => posted.some((p) => /dead-lettered/.test(p.text) && p.text.includes(jobId)));
    const live = await chat(url, undefined, { 'x-time-to-answer-ms': '3000' });
    expect([live.status, live.headers.get('x-route-tier')]).toEqual([200, 'hot']);
  });

  // With the workers apart (`npm run worker`, WORKER=off on the gateways) the worker serves no live
  // request: its breakers never saw the route answer the gateways' traffic, so a job that always fails
  // counted every failure against the route, and five of them opened it for the whole fleet.
  it('a worker apart from the gateways: a job that fails on a route the gateways are answering with leaves its breaker closed everywhere', async () => {
    const breaker = { openMs: 30_000 };
    const gateway = await up({ worker: false, breaker });
    const worker = await createStack(env, captureLogger([]), { http: false, worker: true, breaker, cold: { backoffMs: 50 } });
    stacks.push(worker);
    const poisoned = (body: Record<string, any>) => JSON.stringify(body.messages).includes('poison');
    for (const p of [hot, warm]) p.when(poisoned, { kind: 'status', status: 500 });
    // Queued at once, no live call made: a time-to-answer no route can meet.
    const queued = await chat(
      gateway.url,
      { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'poison' }] },
      { 'x-time-to-answer-ms': '1' },
    );
    expect(queued.status).toBe(202);
    const { jobId } = queued.json();
    // The gateway's live traffic goes on while the worker runs the job, answered by the Hot route.
    let answered = '200 hot';
    let dead: Record<string, any> | null = null;
    while (!dead && answered === '200 hot') {
      const live = await chat(gateway.url);
      answered = `${live.status} ${live.headers.get('x-route-tier')}`;
      const j = await job(gateway.url, jobId);
      if (j.state === 'dead-lettered') dead = j;
    }
    expect(answered).toBe('200 hot');
    expect(dead!.attempts).toBe(5);
    const hotRoute = (s: Stack) => s.path.routes.find((r) => r.tier === 'hot')!.breaker.state();
    expect([hotRoute(gateway.stack), hotRoute(worker)]).toEqual(['closed', 'closed']);
  }, 60_000); // five attempts, each trying both routes three times

  // The worker's routing skipped breakers, killed models and the paused provider, but not the token
  // budgets: a queue draining into a provider spent the budget meant to keep it under its own limit.
  it('a queued job skips a provider over its token budget for the minute, as a live request does', async () => {
    const map = JSON.parse(readFileSync(env.ROUTES_FILE!, 'utf8'));
    writeFileSync(env.ROUTES_FILE!, JSON.stringify({ ...map, limits: { provider_tokens_per_minute: { openai: 10 } } }));
    const { url } = await up({ worker: true });
    expect((await chat(url)).headers.get('x-route-provider')).toBe('openai'); // its 17 tokens spend the budget
    await until(() => tokensOver('openai', 10));
    expect((await chat(url)).headers.get('x-route-provider')).toBe('anthropic');
    const calls = hot.received.length;
    const queued = await chat(
      url,
      { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'later' }] },
      { 'x-time-to-answer-ms': '1' },
    );
    expect(queued.status).toBe(202);
    const done = await until(async () => {
      const j = await job(url, queued.json().jobId);
      return j.state === 'completed' ? j : null;
    });
    expect(done.result.provider).toBe('anthropic');
    expect(hot.received.length).toBe(calls);
  });

  it('a queued job whose every provider is over its token budget waits for the next minute without spending an attempt', async () => {
    const map = JSON.parse(readFileSync(env.ROUTES_FILE!, 'utf8'));
    writeFileSync(env.ROUTES_FILE!, JSON.stringify({ ...map, limits: { provider_tokens_per_minute: { openai: 10, anthropic: 10 } } }));
    const { url } = await up({ worker: false });
    const queued = await chat(
      url,
      { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'later' }] },
      { 'x-time-to-answer-ms': '1' },
    );
    expect(queued.status).toBe(202);
    expect((await chat(url)).headers.get('x-route-provider')).toBe('openai');
    await until(() => tokensOver('openai', 10));
    expect((await chat(url)).headers.get('x-route-provider')).toBe('anthropic');
    await until(() => tokensOver('anthropic', 10));
    const calls = hot.received.length + warm.received.length;
    stacks.push(await createStack(env, captureLogger([]), { http: false, worker: true }));
    const waiting = await until(async () => {
      const j = await job(url, queued.json().jobId);
      return j.deferred ? j : null;
    });
    expect(waiting).toMatchObject({ state: 'delayed', attempts: 0 });
    expect(waiting.deferred.reason).toBe('every provider it may use is over its token budget for this minute');
    expect(Date.parse(waiting.deferred.until) - Date.now()).toBeLessThanOrEqual(60_000);
    expect(hot.received.length + warm.received.length).toBe(calls);
  });

  // A route that cannot serve the job (embeddings only, for a chat job) has a closed breaker: the job
  // was deferred to "now" without end, a loop that froze the in-process worker's gateway outright.
  // (A job queued before a reload left such a map: a chat request sent now is refused at once, below.)
  it('a job no route serves (a map of embeddings routes only, for a chat job) waits for a reload, not in a loop', async () => {
    const map = JSON.parse(readFileSync(env.ROUTES_FILE!, 'utf8'));
    const embeddings = { provider: 'openai', model: 'text-embedding-3-small', baseUrl: hot.url, apis: ['embeddings'] };
    writeFileSync(env.ROUTES_FILE!, JSON.stringify({ ...map, hot: [embeddings], warm: [] }));
    const { url, stack } = await up({ worker: false });
    const queued = await stack.queue.enqueue(testJob('no-route-job'));
    stacks.push(await createStack(env, captureLogger([]), { http: false, worker: true }));
    const waiting = await until(async () => {
      const j = await job(url, queued.jobId);
      return j.deferred ? j : null;
    });
    expect(waiting).toMatchObject({ state: 'delayed', attempts: 0 });
    expect(waiting.deferred.reason).toBe('no route of the routing map serves its API (chat) or model');
    expect(Date.parse(waiting.deferred.until) - Date.now()).toBeGreaterThan(20_000);
    expect(hot.received).toEqual([]);
  });

  // With no route serving chat (a map, or a reload, that left embeddings routes only), a chat request
  // was queued (202, "no route answered") to wait up to 24 h for a route, and neither the start nor
  // the reload said anything; embeddings of a model no route serves are refused at once.
  it('a chat request while no route serves chat is refused at once (404 model_not_found), and the start and a reload warn', async () => {
    const map = JSON.parse(readFileSync(env.ROUTES_FILE!, 'utf8'));
    const embeddings = { provider: 'openai', model: 'text-embedding-3-small', baseUrl: hot.url, apis: ['embeddings'] };
    writeFileSync(env.ROUTES_FILE!, JSON.stringify({ ...map, hot: [embeddings], warm: [] }));
    const { url, logs, stack } = await up({ worker: false });
    const warned = () => logs.filter((l) => l.includes('no route of the routing map serves chat completions')).length;
    expect(warned()).toBe(1);
    const refused = await chat(url);
    expect(refused.status).toBe(404);
    expect(refused.json()).toEqual({
      error: {
        message: 'model: no route serves chat completions of "any" (the routing map in force has no route with the chat api)',
        type: 'invalid_request_error',
        param: 'model',
        code: 'model_not_found',
      },
    });
    const responses = await fetch(`${url}/v1/responses`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'any', input: 'hi' }),
    });
    expect([responses.status, ((await responses.json()) as { error: { code: string } }).error.code]).toEqual([404, 'model_not_found']);
    expect((await stack.queue.counts()).waiting).toBe(0);
    // A reload that brings a chat route serves chat again; one that leaves none warns again.
    writeFileSync(env.ROUTES_FILE!, JSON.stringify(map));
    expect((await admin(url, '/admin/routes/reload')).status).toBe(200);
    expect((await chat(url)).status).toBe(200);
    writeFileSync(env.ROUTES_FILE!, JSON.stringify({ ...map, hot: [embeddings], warm: [] }));
    expect((await admin(url, '/admin/routes/reload')).status).toBe(200);
    expect(warned()).toBe(2);
    expect((await chat(url)).status).toBe(404);
    expect(hot.received).toHaveLength(1);
  });

  // A job whose failed probe reopened every route waited for the very next probe, ahead of the jobs
  // queued behind it: with no live request landing in the probe's moment, a request that always
  // fails took every probe, and the good jobs waited with it (the README's #fail-all, then Hello).
  it('a job whose own probe failed lets the jobs queued behind it take the next probe', async () => {
    delete env.QUEUE_STORE_URL; // the in-process queue of a bare `npm start`, which took due jobs oldest first
    // Open long enough (30 s) for the good request to find every route open.
    const { url } = await up({ worker: true, breaker: { openMs: 3000 }, cold: { backoffMs: 50 } });
    const poisoned = (body: Record<string, any>) => JSON.stringify(body.messages).includes('poison');
    for (const p of [hot, warm]) p.when(poisoned, { kind: 'status', status: 500 });
    const poison = { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'poison' }] };
    const queued = await chat(url, poison, { 'x-time-to-answer-ms': '3000' });
    expect(queued.status).toBe(202);
    const poisonId = queued.json().jobId;
    await until(async () => /breaker is open/.test((await job(url, poisonId)).deferred?.reason ?? ''));
    const good = await chat(url, undefined, { 'x-time-to-answer-ms': '3000' });
    expect([good.status, good.headers.get('x-route-tier')]).toEqual([202, 'cold']);
    const done = await until(async () => {
      const j = await job(url, good.json().jobId);
      return j.state === 'completed' ? j : null;
    });
    expect(done.result.status).toBe(200);
  });

  it('a job that waits for a route longer than the limit is dead-lettered, and a person told', async () => {
    const { url } = await up({ worker: true, breaker: { openMs: 300 }, cold: { backoffMs: 50, maxDeferMs: 1500 } });
    hot.always({ kind: 'status', status: 500 });
    warm.always({ kind: 'status', status: 500 });
    const { jobId } = (await chat(url, undefined, { 'x-time-to-answer-ms': '3000' })).json();
    const dead = await deadLettered(url, jobId);
    expect(dead.lastError).toMatch(/^no route could take it for 1\.5 s \(every route's breaker is open/);
    await until(async () => posted.some((p) => /Queued AI jobs dead-lettered/.test(p.text) && p.text.includes(jobId)));
  });

  it('a job the provider refuses as malformed is dead-lettered; ops lists it and moves it back', async () => {
    const { url, stack } = await up({ worker: true });
    // The provider's message echoes the caller's text: a line break and a terminal escape (clear screen).
    const echo = 'unknown field "q\n\u001b[2J\u009b31m"';
    hot.always({ kind: 'status', status: 422, body: { error: { message: echo, type: 'invalid_request_error', code: null, param: null } } });
    const queued = await stack.queue.enqueue(testJob('bad-job'));
    const dead = await deadLettered(url, queued.jobId);
    expect(dead.lastError).toMatch(/HTTP 422/);
    const lines: string[] = [];
    const opsEnv = { QUEUE_STORE_URL: REDIS_URL, REDIS_PREFIX: prefix };
    expect(await ops(['dlq', 'list'], opsEnv, (l) => lines.push(l), fail)).toBe(0);
    expect(lines.join('\n')).toContain(queued.jobId);
    // One line per job, and nothing in it the operator's terminal would act on: the controls are shown escaped.
    expect(lines).toHaveLength(2);
    expect(lines[0]).not.toMatch(/\p{Cc}/u);
    expect(lines[0]).toContain(String.raw`q\n\u001b[2J\u009b31m`);
    hot.always({ kind: 'ok' });
    expect(await ops(['dlq', 'move', queued.jobId], opsEnv, (l) => lines.push(l), fail)).toBe(0);
    await until(async () => (await job(url, queued.jobId)).state === 'completed');
    await until(async () => posted.some((p) => /dead-lettered/.test(p.text)));
    // An id that cannot be moved is named (it said only "moved 0 job(s)"), exit 1.
    const unknown = `llm-${'0'.repeat(40)}`;
    const moved: string[] = [];
    const refused: string[] = [];
    expect(
      await ops(
        ['dlq', 'move', unknown],
        opsEnv,
        (l) => moved.push(l),
        (l) => refused.push(l),
      ),
    ).toBe(1);
    expect(refused).toEqual([`${unknown}: not a dead-lettered job (npm run ops -- dlq list shows them)`]);
    expect(moved).toEqual(['moved 0 job(s) back to the queue']);
    // The pause defers queued jobs without spending attempts: the command says so (it said they fail and are retried).
    const paused: string[] = [];
    expect(await ops(['pause'], opsEnv, (l) => paused.push(l), fail)).toBe(0);
    expect(paused).toEqual([
      'paused: queued jobs wait, no attempt spent, until resume (a job still waiting after 24 h is dead-lettered); running jobs finish; no notification is sent',
    ]);
    expect(await redis.get('pause_ai_tasks')).toBe('1');
    const status: string[] = [];
    await ops(['status'], opsEnv, (l) => status.push(l), fail);
    expect(status[0]).toMatch(/paused: yes/);
    await ops(['resume'], opsEnv, () => {}, fail);
    expect(await redis.get('pause_ai_tasks')).toBeNull();
  });

  it("a refusal quoted in a dead-lettered job's error is cut between characters: no emoji left as a replacement character", async () => {
    const { url, stack } = await up({ worker: true });
    // The provider's body is `{"error":{"message":"` (21 characters) then emoji: its 300th character is half of one.
    const message = '😀'.repeat(200);
    hot.always({ kind: 'status', status: 400, body: { error: { message, type: 'invalid_request_error', code: null, param: null } } });
    const queued = await stack.queue.enqueue(testJob('emoji-job'));
    const dead = await deadLettered(url, queued.jobId);
    expect(dead.lastError).toBe(`provider refused the request: HTTP 400 {"error":{"message":"${'😀'.repeat(139)}`);
  });

  it('dlq list past its 1,000 lines says how many are dead-lettered in all (it said 1000)', async () => {
    const connection = new Redis(REDIS_URL, { maxRetriesPerRequest: null });
    const queue = new Queue(QUEUE_NAME, { connection, prefix });
    const data = { body: { model: 'x', messages: [] }, customerId: 'acme', reason: 'all_failed', enqueuedAt: new Date().toISOString() };
    await queue.addBulk(Array.from({ length: 1003 }, (_, i) => ({ name: JOB_NAME, data, opts: { jobId: `dead-${i}`, attempts: 1 } })));
    const failing = new Worker(QUEUE_NAME, async () => Promise.reject(new Error('refused')), { connection, prefix, concurrency: 50 });
    await until(async () => (await queue.getFailedCount()) === 1003, 20_000);
    await failing.close();
    await queue.close();
    connection.disconnect();
    const lines: string[] = [];
    expect(await ops(['dlq', 'list'], { QUEUE_STORE_URL: REDIS_URL, REDIS_PREFIX: prefix }, (l) => lines.push(l), fail)).toBe(0);
    expect(lines).toHaveLength(1001);
    expect(lines[1000]).toBe('1003 dead-lettered job(s), the newest 1000 shown');
  });

  it('ops with the store away: one line saying so and exit code 1, within seconds (it waited for ever)', async () => {
    const lines: string[] = [];
    expect(
      await ops(
        ['status'],
        { QUEUE_STORE_URL: 'redis://127.0.0.1:1/0' },
        () => {},
        (l) => lines.push(l),
      ),
    ).toBe(1);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/^the store at QUEUE_STORE_URL did not answer: /);
  }, 10_000);

  it('a client that hangs up is not queued: no job, no notice, the call cancelled and metered CLIENT_CLOSED', async () => {
    const { url, stack } = await up({ worker: false });
    hot.always({ kind: 'hang' });
    const asked = fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-time-to-answer-ms': '5000' },
      body: JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'q' }] }),
      signal: AbortSignal.timeout(200),
    });
    await expect(asked).rejects.toThrow();
    const jobs = async () => {
      const c = await stack.queue.counts();
      return c.waiting + c.delayed + c.active;
    };
    const ended = async () =>
      /gateway_requests_total\{tier="none",status="client_closed"\} 1/.test(
        await (await fetch(`${url}/metrics`, { headers: { authorization: `Bearer ${ADMIN}` } })).text(),
      );
    // Whichever comes first: the request counted as ended by its client, or (the defect) a job queued for it.
    await until(async () => (await ended()) || (await jobs()) > 0);
    expect(await jobs()).toBe(0);
    expect(hot.cancelled).toBe(1);
    expect(warm.received.length).toBe(0);
    expect(posted).toEqual([]);
  });

  it('operator commands in a row leave no error behind (a queue closed while it was still connecting)', async () => {
    const unhandled: unknown[] = [];
    const record = (reason: unknown) => unhandled.push(reason);
    process.on('unhandledRejection', record);
    try {
      const opsEnv = { QUEUE_STORE_URL: REDIS_URL, REDIS_PREFIX: prefix };
      for (let i = 0; i < 30; i++) expect(await ops([i % 2 ? 'resume' : 'pause'], opsEnv, () => {}, fail)).toBe(0);
      // A rejection is reported after the microtasks of its turn: two turns more let the last one show.
      for (let turn = 0; turn < 2; turn++) await new Promise((r) => setImmediate(r));
    } finally {
      process.off('unhandledRejection', record);
    }
    expect(unhandled.map(String)).toEqual([]);
  });

  // Nothing bounded the queued jobs: a long outage filled Redis with them, new requests were told the
  // queue was unreachable, and once the providers were back no job could run (each run's first write
  // refused: OOM), so attempts were spent on Redis's refusals and the queue never drained.
  it.skipIf(!hasRedisServer)(
    'queued jobs cannot fill Redis: past 90 % of maxmemory new ones get 503 cold_queue_full and a person is told; the queue drains once a provider is back',
    async () => {
      const full = await new OwnRedis(['--appendonly', 'no', '--maxmemory', '30mb', '--maxmemory-policy', 'noeviction']).start();
      onTestFinished(() => full.end());
      env.QUEUE_STORE_URL = full.url;
      hot.always({ kind: 'status', status: 500 });
      warm.always({ kind: 'status', status: 500 });
      const breaker = { openMs: 400 }; // 30 s: the routes are probed again soon after the providers are back
      const { url, logs } = await up({ worker: false, breaker });
      const ids: string[] = [];
      let refused: Awaited<ReturnType<typeof chat>> | undefined;
      for (let i = 0; !refused && i < 200; i++) {
        const prompt = { model: 'x', messages: [{ role: 'user', content: `${i} ${'y'.repeat(500_000)}` }] };
        const r = await chat(url, prompt, { 'x-time-to-answer-ms': '3000' });
        if (r.status === 202) ids.push(r.json().jobId);
        else refused = r;
      }
      expect(ids.length).toBeGreaterThan(10);
      expect(refused?.status).toBe(503);
      expect(refused?.json().error).toMatchObject({
        code: 'cold_queue_full',
        message: 'no route answered, and the Cold queue is full: try again later',
      });
      expect(refused?.headers.get('retry-after')).toBe('30');
      await until(async () => posted.some((p) => p.text.startsWith('AI requests refused: the Cold queue is full')));
      // Clients keep trying while it is full: a few error lines, not one per request refused.
      for (let i = 0; i < 30; i++) expect((await chat(url, undefined, { 'x-time-to-answer-ms': '3000' })).status).toBe(503);
      expect(logs.filter((l) => l.includes('cold queue full')).length).toBeLessThanOrEqual(2);

      hot.always({ kind: 'ok', content: 'back' });
      const worker = await up({ worker: true, breaker });
      for (const id of ids) await until(async () => (await job(worker.url, id)).state === 'completed');
    },
  );

  // The queue reads Redis's memory at most once a second and counts the jobs added since by their
  // JSON, which Redis stores at more than that: a burst within one read passed maxmemory, Redis
  // refused the add (OOM), and the client was told the queue was unreachable (cold_queue_unavailable).
  it.skipIf(!hasRedisServer)(
    'a burst that fills Redis before the next memory read is refused as full (cold_queue_full), never "unreachable"',
    async () => {
      const small = await new OwnRedis(['--appendonly', 'no', '--maxmemory', '8mb', '--maxmemory-policy', 'noeviction']).start();
      onTestFinished(() => small.end());
      env.QUEUE_STORE_URL = small.url;
      hot.always({ kind: 'status', status: 500 });
      warm.always({ kind: 'status', status: 500 });
      const { url } = await up({ worker: false });
      const burst = Array.from({ length: 60 }, (_, i) => ({
        model: 'x',
        messages: [{ role: 'user', content: `${i} ${'y'.repeat(200_000)}` }],
      }));
      const answers = await Promise.all(burst.map((body) => chat(url, body, { 'x-time-to-answer-ms': '10000' })));
      const outcomes = answers.map((r) => (r.status === 202 ? 'queued' : `${r.status} ${r.json().error.code}`));
      expect(outcomes).toContain('503 cold_queue_full');
      expect(new Set(outcomes)).toEqual(new Set(['queued', '503 cold_queue_full']));
    },
  );

  it('every model switched off: the client is told no route could be called, not that none answered (no outage to look for)', async () => {
    const { url, stack } = await up({ worker: false });
    await stack.flags.update({ killed_models: ['gpt-4o-mini', 'claude-3-5-haiku-latest'] });
    const streamed = await chat(url, { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }], stream: true });
    expect(streamed.status).toBe(202);
    const message: string = JSON.parse(streamed.text.replace(/^data: /, '')).error.message;
    expect(message).toMatch(/^no route could be called \(/);
    await stack.flags.update({ enable_cold_queue: false });
    const refused = await chat(url);
    expect([refused.status, refused.json().error.code]).toEqual([503, 'cold_queue_disabled']);
    expect(refused.json().error.message).toMatch(/^no route could be called \(/);
    expect(hot.received.length + warm.received.length).toBe(0);
  });

  it('enable_cold_queue off answers 503 with a clear error', async () => {
    const { url, stack } = await up({ worker: false });
    await stack.flags.update({ enable_cold_queue: false });
    hot.always({ kind: 'status', status: 500 });
    warm.always({ kind: 'status', status: 500 });
    const res = await chat(url, undefined, { 'x-time-to-answer-ms': '3000' });
    expect(res.status).toBe(503);
    expect(res.json().error.code).toBe('cold_queue_disabled');
  });
});

describe('a worker killed during its provider call', () => {
  /** The CSV's rows as objects (no field of these rows holds a comma); none before its first event. */
  const rowsOf = (file: string): Array<Record<string, string>> => {
    if (!existsSync(file)) return [];
    const [head, ...lines] = readFileSync(file, 'utf8').trim().split('\n');
    const names = head.split(',');
    return lines.map((l) => Object.fromEntries(l.split(',').map((v, i) => [names[i], v])));
  };

  it('meters that call once, as an estimate, in the run that takes the job back', async () => {
    const killedCsv = join(mkdtempSync(join(tmpdir(), 'cold-killed-')), 'e.csv');
    // The built gateway with its worker, as `npm start` runs it: a process a kill -9 really ends.
    const first = await startInstance(mkdtempSync(join(tmpdir(), 'cold-kill9-')), {
      ...(env as Record<string, string>),
      METER_CSV_FILE: killedCsv,
      WORKER: 'on',
    });
    hot.always({ kind: 'ok', delayMs: 60_000, content: 'too late' }); // the provider holds its answer
    const { stack } = await up({ worker: false });
    const content = 'a prompt the provider bills for '.repeat(30);
    const { jobId } = await stack.queue.enqueue({
      body: { model: 'gpt-4o-mini', messages: [{ role: 'user', content }], service_tier: 'priority' },
      idempotencyKey: 'killed-mid-call',
      userId: '',
      jobId: 'job-7',
      customerId: 'acme',
      jobType: '',
      reason: 'all_failed',
      reviewRequired: false,
      enqueuedAt: new Date().toISOString(),
    });
    await until(async () => hot.received.length === 1); // the worker's call is with the provider
    await first.crash(); // kill -9 (an OOM kill, a node lost) while the call is under way
    // What the provider will bill, and nothing metered it.
    expect(rowsOf(killedCsv).filter((r) => r.job_id === 'job-7')).toEqual([]);

    // Time passing, without waiting for it: the killed run's BullMQ lock (30 s), its worker's last
    // stalled-job check (30 s) and its run claim (150 s) lapse.
    const q = `${prefix}:ai-tasks`;
    for (const key of [`${q}:${jobId}:lock`, `${q}:stalled-check`, `${q}:run:${jobId}`]) await redis.pexpire(key, 1);
    await until(async () => (await redis.exists(`${q}:run:${jobId}`, `${q}:${jobId}:lock`)) === 0);
    hot.always({ kind: 'ok', content: 'answered on the second run' });
    const second = await up({ worker: true, cold: { lockMs: 500 } });
    const done = await until(async () => {
      const j = await job(second.url, jobId);
      return j.state === 'completed' ? j : null;
    });
    expect(done.result.body.choices[0].message.content).toBe('answered on the second run');
    expect(hot.received).toHaveLength(2);
    await second.stack.close();
    stacks.splice(stacks.indexOf(second.stack), 1);
    const events = [...rowsOf(killedCsv), ...rowsOf(env.METER_CSV_FILE!)].filter((r) => r.job_id === 'job-7');
    const lost = events.filter((r) => r.error_code !== '');
    expect(lost).toHaveLength(1); // the killed run's call, metered once
    expect(lost[0]).toMatchObject({ provider: 'openai', model: 'gpt-4o-mini', customer_id: 'acme', output_tokens: '0' });
    expect(lost[0].error_code).toBe('WORKER_LOST|ESTIMATED');
    expect(Number(lost[0].input_tokens)).toBeGreaterThan(content.length / 4); // the prompt, estimated
    // At the tier the request asked for: gpt-4o-mini's priority input rate, $0.25 per million tokens.
    expect(Number(lost[0].cost_usd)).toBe(Number(((Number(lost[0].input_tokens) * 0.25) / 1e6).toFixed(9)));
    expect(events.filter((r) => r.error_code === '')).toHaveLength(1); // the second run's answer
    expect(await redis.keys(`${q}:calls:*`)).toEqual([]); // nothing left to meter again
  }, 30_000);

  it("meters that call also when the kill was its job's third, which dead-letters it without another run", async () => {
    const killedCsv = join(mkdtempSync(join(tmpdir(), 'cold-killed-')), 'e.csv');
    const first = await startInstance(mkdtempSync(join(tmpdir(), 'cold-kill9-')), {
      ...(env as Record<string, string>),
      METER_CSV_FILE: killedCsv,
      WORKER: 'on',
    });
    hot.always({ kind: 'ok', delayMs: 60_000, content: 'too late' });
    const { stack } = await up({ worker: false });
    const { jobId } = await stack.queue.enqueue({
      body: { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'billed, killed a third time' }] },
      idempotencyKey: 'killed-thrice',
      userId: '',
      jobId: 'job-8',
      customerId: 'acme',
      jobType: '',
      reason: 'all_failed',
      reviewRequired: false,
      enqueuedAt: new Date().toISOString(),
    });
    await until(async () => hot.received.length === 1);
    const q = `${prefix}:ai-tasks`;
    // Its two earlier runs were cut by kills as well (BullMQ's count of them; their calls were metered then).
    await redis.hset(`${q}:${jobId}`, 'stc', '2');
    await first.crash();
    for (const key of [`${q}:${jobId}:lock`, `${q}:stalled-check`, `${q}:run:${jobId}`]) await redis.pexpire(key, 1);
    await until(async () => (await redis.exists(`${q}:run:${jobId}`, `${q}:${jobId}:lock`)) === 0);
    const second = await up({ worker: true, cold: { lockMs: 500 } });
    await until(async () => ((await job(second.url, jobId)).state === 'dead-lettered' ? true : null));
    await until(async () => rowsOf(env.METER_CSV_FILE!).some((r) => r.job_id === 'job-8'));
    const lost = [...rowsOf(killedCsv), ...rowsOf(env.METER_CSV_FILE!)].filter((r) => r.job_id === 'job-8');
    expect(lost.map((r) => r.error_code)).toEqual(['WORKER_LOST|ESTIMATED']); // the third run's call, metered once
    expect(hot.received).toHaveLength(1); // a dead job is not run again
    expect(await redis.keys(`${q}:calls:*`)).toEqual([]);
    await until(async () => posted.some((p) => /dead-lettered/.test(p.text) && p.text.includes(jobId))); // and a person told
  }, 30_000);
});

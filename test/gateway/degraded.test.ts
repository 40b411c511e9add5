// Spend-cap routing from the meter's spend and the Redis-held rate limits.
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { Stack } from '../../gateway/src/stack';
import { FakeProvider } from './fake-provider';
import { captureLogger, chat, listenStack } from './harness';
import { until } from './keys-harness';
import { TEST_REDIS_DB, TEST_REDIS_URL } from '../redis-db';
import { RedisProxy } from '../redis-proxy';

const REDIS_URL = TEST_REDIS_URL;
const prefix = `test-degraded-${process.pid}`;
let redis: Redis;
let meter: Server;
let meterUrl = '';
let spend = { today_cost_usd: 0, last_7d_cost_usd: 0 };
let spendReads = 0;
/** `hang`: the meter takes spend reads and never answers them (held here until the test ends). */
let spendMode: 'answer' | 'hang' = 'answer';
const unanswered: Array<import('node:http').ServerResponse> = [];
let hot: FakeProvider, warm: FakeProvider;
const stacks: Array<Stack & { stop: () => Promise<void> }> = [];
let dir = '';

beforeAll(async () => {
  redis = new Redis(REDIS_URL);
  meter = createServer((req, res) => {
    const url = new URL(req.url!, 'http://x');
    if (req.method === 'GET' && url.searchParams.get('action') === 'spend') {
      spendReads++;
      if (spendMode === 'hang') return void unanswered.push(res);
      res
        .writeHead(200, { 'content-type': 'application/json' })
        .end(JSON.stringify({ ok: true, ...spend, daily_cap_usd: 50, burn_7d_cap_usd: 200, cap_exceeded: spend.today_cost_usd > 50 }));
    } else {
      req.resume();
      res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true,"appended":0,"duplicates":0}');
    }
  });
  await new Promise<void>((r) => meter.listen(0, '127.0.0.1', r));
  meterUrl = `http://127.0.0.1:${(meter.address() as AddressInfo).port}/exec`;
});
afterAll(() => {
  meter.close();
  redis.disconnect();
});
beforeEach(async () => {
  [hot, warm] = await Promise.all([new FakeProvider().start(), new FakeProvider().start()]);
  spend = { today_cost_usd: 0, last_7d_cost_usd: 0 };
  spendReads = 0;
  spendMode = 'answer';
  dir = mkdtempSync(join(tmpdir(), 'degraded-'));
});
afterEach(async () => {
  for (const s of stacks.splice(0)) await s.stop();
  for (const res of unanswered.splice(0)) res.destroy();
  await Promise.all([hot.stop(), warm.stop()]);
  const keys = await redis.keys(`${prefix}:*`);
  if (keys.length) await redis.del(...keys);
});

async function up(extra: Record<string, unknown> = {}, env: NodeJS.ProcessEnv = {}) {
  const routes = join(dir, `routes-${stacks.length}.json`);
  writeFileSync(
    routes,
    JSON.stringify({
      hot: [{ provider: 'openai', model: 'gpt-4o', baseUrl: hot.url }],
      warm: [{ provider: 'anthropic', model: 'claude-3-5-haiku-latest', baseUrl: warm.url }],
      cold: { mode: 'graceful_degrade', queue: 'ai-tasks', notify: ['reviewer@example.com'] },
      cheaper_model: 'gpt-4o-mini',
      ...extra,
    }),
  );
  const logs: string[] = [];
  const h = await listenStack(
    {
      ROUTES_FILE: routes,
      QUEUE_STORE_URL: REDIS_URL,
      REDIS_PREFIX: prefix,
      METER_URL: meterUrl,
      METER_TOKEN: 't',
      METER_SPOOL_DIR: join(dir, `spool-${stacks.length}`),
      NOTIFY_WINDOW_MS: '50',
      SCOPES_FILE: join(dir, 'none.yaml'),
      ...env,
    },
    { http: true, worker: false },
    captureLogger(logs),
  );
  const s = Object.assign(h.stack, { url: h.url, logs, stop: h.stop });
  stacks.push(s);
  return s;
}

describe('degraded routing', () => {
  it('under the caps routes normally (decision default) and reads the meter at most once a minute', async () => {
    const gw = await up({}, { METER_URL: '', METER_CSV_FILE: join(dir, 'e.csv') });
    const res = await chat(gw.url);
    expect(res.headers.get('x-route-model')).toBe('gpt-4o');
    await gw.meter.flush();
    expect(readFileSync(join(dir, 'e.csv'), 'utf8')).toMatch(/,default,\n?$/m);
    const withMeter = await up();
    for (let i = 0; i < 5; i++) await chat(withMeter.url);
    expect(spendReads).toBe(1);
  });

  it('a meter that never answers its spend read: only the first read is waited for, briefly, and it is asked once a minute, not per request', async () => {
    spendMode = 'hang';
    const gw = await up();
    // A time-to-answer the meter's own 5 s timeout would use up: each request still goes to Hot.
    const answers = [];
    for (let i = 0; i < 3; i++) answers.push(await chat(gw.url, undefined, { 'x-time-to-answer-ms': '2500' }));
    expect(answers.map((a) => [a.status, a.headers.get('x-route-tier')])).toEqual([
      [200, 'hot'],
      [200, 'hot'],
      [200, 'hot'],
    ]);
    expect(spendReads).toBe(1);
  });

  it('a cap exceeded: must-have false → queued for 2 hours; can-use-cheaper → the cheaper model; else → human review', async () => {
    spend = { today_cost_usd: 50.01, last_7d_cost_usd: 60 };
    const gw = await up();
    const later = await chat(gw.url, undefined, { 'x-must-have-answer': 'false', 'idempotency-key': 'd1' });
    expect(later.status).toBe(202);
    const job = (await (await fetch(`${gw.url}/v1/jobs/${later.json().jobId}`)).json()) as { state: string; reason: string };
    expect(job).toMatchObject({ state: 'delayed', reason: 'queue' });
    const delayed = await gw.queue.get(later.json().jobId);
    expect(delayed?.state).toBe('delayed');

    const cheaper = await chat(gw.url, undefined, { 'x-can-use-cheaper': 'true' });
    expect(cheaper.status).toBe(200);
    expect(cheaper.headers.get('x-route-model')).toBe('gpt-4o-mini');
    expect(hot.received.at(-1)!.body.model).toBe('gpt-4o-mini');

    const off = await chat(gw.url, undefined, { 'x-can-use-cheaper': 'off', 'idempotency-key': 'd2' });
    expect(off.status).toBe(202); // "off" is a no: human review, not the cheaper model
    const unclear = await chat(gw.url, undefined, { 'x-can-use-cheaper': 'maybe' });
    expect(unclear.status).toBe(400);
    expect(unclear.json().error.message).toBe('x-can-use-cheaper: expected true or false (or 1/0, yes/no, on/off), got "maybe"');

    const review = await chat(gw.url, undefined, { 'idempotency-key': 'd3' });
    expect(review.status).toBe(202);
    expect((await gw.queue.get(review.json().jobId))?.reason).toBe('human_review');
    await gw.notifier.flush();
    expect(gw.notifier.sent.find((m) => /human review/.test(m.subject))?.target).toBe('reviewer@example.com');
  });

  it('a cap exceeded: the requests it queued are counted in gateway_requests_total as the Cold tier answered them', async () => {
    spend = { today_cost_usd: 50.01, last_7d_cost_usd: 60 };
    const gw = await up({}, { ADMIN_TOKEN: 'admin' });
    expect((await chat(gw.url, undefined, { 'x-must-have-answer': 'false' })).status).toBe(202);
    expect((await chat(gw.url)).status).toBe(202); // human review
    const metrics = await (await fetch(`${gw.url}/metrics`, { headers: { authorization: 'Bearer admin' } })).text();
    // before: neither counted, so the requests by tier missed every request the cap queued
    expect(metrics).toContain('gateway_requests_total{tier="cold",status="queue"} 1');
    expect(metrics).toContain('gateway_requests_total{tier="cold",status="human_review"} 1');
  });

  // The streamed 202's event (and the 503 with the queue off) said "no route answered in time" for
  // these too: an operator or a client looked for an outage while it was the spend cap.
  it('a cap exceeded: a streamed request queued, or refused with the queue off, is told it was the spend cap, not that no route answered', async () => {
    spend = { today_cost_usd: 50.01, last_7d_cost_usd: 60 };
    const gw = await up();
    const streamed = async (headers: Record<string, string>) => {
      const res = await fetch(`${gw.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...headers },
        body: JSON.stringify({ model: 'gpt-4o', stream: true, messages: [{ role: 'user', content: 'hi' }] }),
      });
      const text = await res.text();
      return { status: res.status, error: (JSON.parse(text.replace(/^data: /, '')) as { error: { message: string } }).error };
    };
    const review = await streamed({ 'idempotency-key': 's1' });
    expect(review.status).toBe(202);
    expect(review.error.message).toMatch(/^a spend cap is exceeded: a person reviews the request first; queued as job llm-/);
    const later = await streamed({ 'idempotency-key': 's2', 'x-must-have-answer': 'false' });
    expect(later.error.message).toMatch(
      /^a spend cap is exceeded and the request may wait \(x-must-have-answer: false\); queued as job llm-/,
    );
    await gw.flags.update({ enable_cold_queue: false });
    const off = await chat(gw.url, undefined, { 'idempotency-key': 's3' });
    expect([off.status, off.json().error.code]).toEqual([503, 'cold_queue_disabled']);
    expect(off.json().error.message).toBe(
      'a spend cap is exceeded: a person reviews the request first, and the Cold queue is switched off (enable_cold_queue)',
    );
    expect(hot.received).toHaveLength(0);
  });

  it('a cap exceeded and the request not queued (the queue switched off): no meter event says it was queued or sent to a person', async () => {
    const csv = join(dir, 'not-queued.csv');
    const gw = await up({}, { METER_URL: '', METER_CSV_FILE: csv, DAILY_CAP_USD: '0.000001' });
    expect((await chat(gw.url)).status).toBe(200); // spends past the cap
    await gw.flags.update({ enable_cold_queue: false });
    const review = await chat(gw.url);
    const later = await chat(gw.url, undefined, { 'x-must-have-answer': 'false' });
    expect([review.status, later.status]).toEqual([503, 503]);
    await gw.flags.update({ enable_cold_queue: true });
    const queued = await chat(gw.url);
    expect(queued.status).toBe(202);
    await gw.meter.flush();
    const [header, ...rows] = readFileSync(csv, 'utf8').trim().split('\n');
    const cols = header.split(',');
    const events = rows.map((r) => Object.fromEntries(r.split(',').map((v, i) => [cols[i], v])));
    // The routed call, then the one request a person was really given to review.
    expect(events.map((e) => [e.decision, e.review_required])).toEqual([
      ['default', 'false'],
      ['human_review', 'true'],
    ]);
  });

  // One request (one idempotency key, one job) sent first as one that may wait, then as one that
  // needs an answer: the second found the first's job on its 2-hour hold, nobody was told, and its
  // meter event said a person had it. Now the job is held for review and a person is told; sent the
  // other way round, the job stays with the person and the meter event says so.
  for (const store of ['redis', 'in-process'] as const)
    it(`a cap exceeded, one request sent as may-wait and as must-have (${store} queue): its one job goes to a person, who is told, and each meter event says what its request got`, async () => {
      const csv = join(dir, `review-${store}.csv`);
      const env = {
        METER_URL: '',
        METER_CSV_FILE: csv,
        DAILY_CAP_USD: '0.000001',
        ...(store === 'in-process' ? { QUEUE_STORE_URL: '' } : {}),
      };
      const gw = await up({}, env);
      expect((await chat(gw.url)).status).toBe(200); // spends past the cap
      const body = (content: string) => ({ model: 'any', messages: [{ role: 'user', content }] });
      const later = await chat(gw.url, body('a'), { 'x-must-have-answer': 'false' });
      const review = await chat(gw.url, body('a'));
      expect([later.status, review.status]).toEqual([202, 202]);
      expect(review.json().jobId).toBe(later.json().jobId);
      const job = await gw.queue.get(review.json().jobId);
      expect([job?.state, job?.reason]).toEqual(['delayed', 'human_review']);
      const id = review.json().jobId as string;
      const told = async () => (
        await gw.notifier.flush(),
        gw.notifier.sent.some((m) => /human review/.test(m.subject) && m.text.includes(id))
      );
      await until(told, 3000);
      if (store === 'redis') {
        // Held as a review job is, 24 h from now, not the 2 hours the first asked for.
        const [key] = (await redis.keys(`${prefix}*:${id}`)).filter((k) => !/:(created|touches):/.test(k));
        const [timestamp, delay] = (await redis.hmget(key, 'timestamp', 'delay')).map(Number);
        expect(delay).toBe(24 * 3600_000);
        expect(timestamp + delay).toBeGreaterThan(Date.now() + 23 * 3600_000);
      }

      const first = await chat(gw.url, body('b'));
      const second = await chat(gw.url, body('b'), { 'x-must-have-answer': 'false' });
      expect(second.json().jobId).toBe(first.json().jobId);
      expect((await gw.queue.get(first.json().jobId))?.reason).toBe('human_review');
      await until(async () => (await gw.meter.flush(), readFileSync(csv, 'utf8').trim().split('\n').length === 6));
      const [header, ...rows] = readFileSync(csv, 'utf8').trim().split('\n');
      const cols = header.split(',');
      const events = rows.map((r) => Object.fromEntries(r.split(',').map((v, i) => [cols[i], v])));
      // Metered once the queue says what the job is: in any order. Only the first, before a person had its job, says queue.
      expect(events.map((e) => `${e.decision} ${e.review_required}`).sort()).toEqual([
        'default false',
        'human_review true',
        'human_review true',
        'human_review true',
        'queue false',
      ]);
    });

  // Its 202 goes out once the job is added; the queue's next command (the mark saying this call made
  // the job) can stall. The request's meter event waited for that answer, after its request had
  // ended: a stop meanwhile (the process exits once closed) left the queued request unmetered.
  it('a cap exceeded, a queued request whose queue stalls after its 202: its meter event is on disk before the stop ends', async () => {
    const slow = await new RedisProxy().start();
    let release = () => {};
    const held = new Promise<void>((r) => (release = r));
    try {
      const csv = join(dir, 'stalled.csv');
      const gw = await up({}, { METER_URL: '', METER_CSV_FILE: csv, DAILY_CAP_USD: '0.000001', QUEUE_STORE_URL: slow.url(TEST_REDIS_DB) });
      expect((await chat(gw.url)).status).toBe(200); // spends past the cap
      slow.holdUntil(
        (chunk) => chunk.includes(':created:'),
        () => held,
      );
      const later = await chat(gw.url, undefined, { 'x-must-have-answer': 'false' });
      expect(later.status).toBe(202);
      stacks.splice(stacks.indexOf(gw), 1);
      await gw.stop();
      const rows = readFileSync(csv, 'utf8').trim().split('\n');
      expect(rows.filter((r) => r.includes(',queue,')).length).toBe(1);
    } finally {
      release();
      await slow.stop();
    }
  });

  it('a cap exceeded: an embeddings request that can use cheaper goes to human review, never to the cheaper model', async () => {
    spend = { today_cost_usd: 50.01, last_7d_cost_usd: 60 };
    const gw = await up({
      hot: [
        { provider: 'openai', model: 'gpt-4o', baseUrl: hot.url },
        { provider: 'openai', model: 'text-embedding-3-small', baseUrl: hot.url, apis: ['embeddings'] },
      ],
    });
    const res = await fetch(`${gw.url}/v1/embeddings`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-can-use-cheaper': 'true', 'idempotency-key': 'e1' },
      body: JSON.stringify({ model: 'text-embedding-3-small', input: 'a' }),
    });
    expect(res.status).toBe(202);
    const { jobId } = (await res.json()) as { jobId: string };
    expect((await gw.queue.get(jobId))?.reason).toBe('human_review');
    expect(hot.received).toHaveLength(0);
  });

  it('the 7-day cap counts too, and the gateway adds its own spend since the last read', async () => {
    spend = { today_cost_usd: 1, last_7d_cost_usd: 200.5 };
    const gw = await up();
    expect((await chat(gw.url, undefined, { 'x-must-have-answer': 'false' })).status).toBe(202);
  });
});

/** Whether a provider's tokens counted in Redis (a window's counter) reached `budget`. */
async function spentOver(provider: string, budget: number): Promise<boolean> {
  const keys = await redis.keys(`${prefix}:tb:${provider}:*`);
  const counts = keys.length ? await redis.mget(...keys) : [];
  return counts.some((c) => Number(c) >= budget);
}

describe('rate limits held in Redis', () => {
  it('a tenant over its requests per minute gets 429 with Retry-After, across gateway instances', async () => {
    const a = await up({ limits: { tenant_requests_per_minute: 2 } }, { ADMIN_TOKEN: 'admin' });
    const b = await up({ limits: { tenant_requests_per_minute: 2 } });
    expect((await chat(a.url, undefined, { 'x-customer-id': 'acme' })).status).toBe(200);
    expect((await chat(b.url, undefined, { 'x-customer-id': 'acme' })).status).toBe(200);
    const over = await chat(a.url, undefined, { 'x-customer-id': 'acme' });
    expect(over.status).toBe(429);
    expect(Number(over.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    expect(over.json().error.code).toBe('tenant_rate_limited');
    expect((await chat(b.url, undefined, { 'x-customer-id': 'other' })).status).toBe(200);
    // The refusal is counted, as answered by no tier: an operator sees the 429s in the metrics.
    const metrics = await (await fetch(`${a.url}/metrics`, { headers: { authorization: 'Bearer admin' } })).text();
    expect(metrics).toContain('gateway_requests_total{tier="none",status="429"} 1');
  });

  it('a provider over its token budget is skipped; all over → 429', async () => {
    const gw = await up({ limits: { provider_tokens_per_minute: { openai: 10, anthropic: 10 } } });
    expect((await chat(gw.url)).headers.get('x-route-provider')).toBe('openai'); // 17 tokens spent
    await until(() => spentOver('openai', 10)); // the spend is counted after the answer is sent
    expect((await chat(gw.url)).headers.get('x-route-provider')).toBe('anthropic');
    await until(() => spentOver('anthropic', 10));
    const over = await chat(gw.url);
    expect(over.status).toBe(429);
    expect(over.json().error.code).toBe('provider_token_budget');
  });
});

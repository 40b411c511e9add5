// A burst of concurrent requests near a spend cap: each instance counts its own calls in flight
// against the caps (their cost is known only from their answers), so a burst routes about as many
// calls as the cap leaves room for, not all of them; and every way a call ends gives its room back.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { admission } from '../../gateway/src/admission';
import { MemoryLimiter } from '../../gateway/src/rate-limit';
import type { RequestContext } from '../../gateway/src/request-context';
import { SpendWatch } from '../../gateway/src/spend-cap-routing';
import { chat, listenStack } from './harness';
import { TEST_REDIS_URL } from '../redis-db';

const prefix = `test-spend-cap-burst-${process.pid}`;
/** What the provider reports each call cost: the cap below is counted in these. */
const CALL_USD = 0.01;
const BURST = 20;

/**
 * A provider on loopback that answers each chat call priced at CALL_USD; while `held`, it keeps its
 * answers until `open()` says so (then answers them all, and the later ones at once). `fail`: the
 * next call is refused (400); `stream`: a call that asks for a stream gets one event, then nothing
 * until its caller hangs up.
 */
class HoldingProvider {
  received = 0;
  held: Array<() => void> | null = null;
  fail = 0;
  /** Called as each call arrives. */
  onCall = () => {};
  private server!: Server;
  url = '';

  async start(): Promise<this> {
    this.server = createServer((req, res) => void this.handle(req, res));
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}/v1`;
    return this;
  }

  open(): void {
    for (const answer of this.held?.splice(0) ?? []) answer();
    this.held = null;
  }

  stop(): Promise<void> {
    this.server.closeAllConnections();
    return new Promise((r) => this.server.close(() => r()));
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    let text = '';
    for await (const chunk of req) text += chunk;
    const body = JSON.parse(text);
    this.received++;
    this.onCall();
    if (this.fail > 0 && this.fail--) return void res.writeHead(400, { 'content-type': 'application/json' }).end('{"error":{}}');
    if (body.stream) return void res.writeHead(200, { 'content-type': 'text/event-stream' }).write(`data: ${chunkOf('hi')}\n\n`);
    const answer = () =>
      res.writeHead(200, { 'content-type': 'application/json' }).end(
        JSON.stringify({
          id: 'chatcmpl-held',
          object: 'chat.completion',
          created: 1,
          model: body.model,
          choices: [{ index: 0, message: { role: 'assistant', content: 'hi' }, finish_reason: 'stop' }],
          usage: { prompt_tokens: 12, completion_tokens: 5, total_tokens: 17, cost: CALL_USD },
        }),
      );
    if (this.held) this.held.push(answer);
    else answer();
  }
}

const chunkOf = (content: string) =>
  JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [{ index: 0, delta: { content } }] });

let redis: Redis;
let provider: HoldingProvider;
let dir = '';
const running: Array<Awaited<ReturnType<typeof listenStack>>> = [];

beforeAll(() => {
  redis = new Redis(TEST_REDIS_URL);
});
afterAll(() => redis.disconnect());
beforeEach(async () => {
  provider = await new HoldingProvider().start();
  dir = mkdtempSync(join(tmpdir(), 'spend-cap-burst-'));
});
afterEach(async () => {
  provider.open();
  for (const r of running.splice(0)) await r.stop();
  await provider.stop();
  const keys = await redis.keys(`${prefix}:*`);
  if (keys.length) await redis.del(...keys);
});

/** One gateway in process, the daily cap at 4.5 calls' cost; `shared`: its spend counted in Redis. */
async function gateway(shared: boolean) {
  const routes = join(dir, 'routes.json');
  const map = {
    hot: [{ provider: 'openai', model: 'gpt-4o-mini', baseUrl: provider.url }],
    warm: [],
    cold: { mode: 'graceful_degrade', queue: 'ai-tasks', notify: [] },
  };
  writeFileSync(routes, JSON.stringify(map));
  const app = await listenStack({
    ROUTES_FILE: routes,
    METER_CSV_FILE: join(dir, 'events.csv'),
    METER_SPOOL_DIR: join(dir, 'spool'),
    SCOPES_FILE: join(dir, 'none.yaml'),
    DAILY_CAP_USD: String(4.5 * CALL_USD),
    ...(shared ? { QUEUE_STORE_URL: TEST_REDIS_URL, REDIS_PREFIX: prefix } : {}),
  });
  running.push(app);
  return app;
}

/** A request that may wait: routed (200) within the cap, queued (202) over it. */
const patient = async (url: string) => (await chat(url, undefined, { 'x-must-have-answer': 'false' })).status;

/**
 * Sends BURST requests at once while the provider holds its answers; the answers go out once every
 * request has either reached the provider or been queued. The statuses.
 */
async function burst(url: string): Promise<number[]> {
  provider.held = [];
  const before = provider.received;
  let queued = 0;
  const openWhenAllIn = () => {
    if (provider.received - before + queued === BURST) provider.open();
  };
  provider.onCall = openWhenAllIn;
  return Promise.all(
    Array.from({ length: BURST }, async () => {
      const status = await patient(url);
      if (status === 202) queued++;
      openWhenAllIn();
      return status;
    }),
  );
}

describe.each([
  ['in process', false],
  ['with Redis', true],
])('a burst near the daily cap (%s)', (_, shared) => {
  it('one call spent, the cap at 4.5 calls, 20 requests at once: 4 more are routed (5 in all), the rest queued', async () => {
    const gw = await gateway(shared);
    expect(await patient(gw.url)).toBe(200); // the day's first call: its cost is the estimate of the next
    const statuses = await burst(gw.url);
    expect(statuses.filter((s) => s === 200)).toHaveLength(4);
    expect(statuses.filter((s) => s === 202)).toHaveLength(BURST - 4);
    expect(provider.received).toBe(5);
  });

  it('a call that failed or whose stream its client cut gives its room back: the cap still admits 4 more calls', async () => {
    const gw = await gateway(shared);
    expect(await patient(gw.url)).toBe(200);
    provider.fail = 1;
    expect((await chat(gw.url)).status).toBe(400);
    const cut = new AbortController();
    const stream = await fetch(`${gw.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'any', stream: true, messages: [{ role: 'user', content: 'hi' }] }),
      signal: cut.signal,
    });
    await stream.body!.getReader().read(); // the stream under way
    cut.abort();
    expect(await running[0].stack.idle(5000)).toBe(true); // the cut stream's request ended
    const after = [];
    for (let i = 0; i < 5; i++) after.push(await patient(gw.url));
    expect(after).toEqual([200, 200, 200, 200, 202]);
  });
});

describe('a burst far from the daily cap whose limits answer together', () => {
  it('each request sees the calls held by those admitted before it: 40 at once, room for 30, 30 routed', async () => {
    // A tenant limit is read for each request first (a Redis round trip, whose answers for a burst
    // come back together): every request took its spend figures before any of them held its call.
    const spend = new SpendWatch({ dailyCap: 30.5 * CALL_USD, burnCap: 1000, warn: () => {} });
    spend.record(CALL_USD); // the day's first call: its cost is the estimate of the next
    const admit = admission({
      limiter: new MemoryLimiter({ tenant_requests_per_minute: 1000 }),
      limits: { tenant_requests_per_minute: 1000 },
      spend,
      providers: () => ['openai'],
      cheaperModel: undefined,
    });
    const ctx = { api: 'chat', customerId: 'acme', timeToAnswerMs: 30_000, mustHaveAnswer: false, canUseCheaper: false };
    const decided = await Promise.all(Array.from({ length: 40 }, () => admit(ctx as RequestContext)));
    expect(decided.filter((a) => a.kind === 'route')).toHaveLength(30);
    expect(decided.filter((a) => a.kind === 'queue')).toHaveLength(10);
  });
});

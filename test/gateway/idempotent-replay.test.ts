// Idempotent replay across instances: whole gateway stacks on one real Redis (db 9, a prefix of
// this process, removed afterwards) in front of a fake provider that counts its calls.
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request as httpRequest } from 'node:http';
import { Redis } from 'ioredis';
import OpenAI from 'openai';
import { afterAll, afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { CsvSink, type MeterSink } from '../../gateway/src/meter-sink';
import { MemoryReplayStore } from '../../gateway/src/replay-store';
import { FakeProvider } from './fake-provider';
import { chat, listenStack, mapOf, startGateway } from './harness';
import { keysWorld, until } from './keys-harness';
import { TEST_REDIS_URL } from '../redis-db';

const REDIS_URL = TEST_REDIS_URL;
const prefix = `test-replay-${process.pid}`;
const redis = new Redis(REDIS_URL);
const BODY = { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'Summarise invoice 7' }] };

let hot: FakeProvider;
let dir: string;
const stops: Array<() => Promise<void>> = [];

beforeEach(async () => {
  hot = await new FakeProvider().start();
  dir = mkdtempSync(join(tmpdir(), 'replay-'));
  writeFileSync(
    join(dir, 'routes.json'),
    JSON.stringify({
      hot: [
        { provider: 'openai', model: 'gpt-4o-mini', baseUrl: hot.url },
        { provider: 'openai', model: 'text-embedding-3-small', baseUrl: hot.url, apis: ['embeddings'] },
      ],
      warm: [],
      cold: { mode: 'graceful_degrade', queue: 'ai-tasks', notify: [] },
    }),
  );
});
afterEach(async () => {
  for (const stop of stops.splice(0)) await stop();
  await hot.stop();
  const keys = await redis.keys(`${prefix}:*`);
  if (keys.length) await redis.del(...keys);
});
afterAll(() => redis.disconnect());

/** A gateway instance on the shared Redis, with its own meter CSV. */
async function instance(name: string) {
  const csv = join(dir, `${name}.csv`);
  const env = {
    ROUTES_FILE: join(dir, 'routes.json'),
    QUEUE_STORE_URL: REDIS_URL,
    REDIS_PREFIX: prefix,
    METER_CSV_FILE: csv,
    SCOPES_FILE: join(dir, 'none.yaml'),
    HOT_API_KEY: 'provider-key',
  };
  const app = await listenStack(env);
  stops.push(app.stop);
  const events = () => {
    if (!existsSync(csv)) return [];
    const [header, ...lines] = readFileSync(csv, 'utf8').trim().split('\n');
    return lines.map((l) => Object.fromEntries(l.split(',').map((v, i) => [header.split(',')[i], v])));
  };
  return { ...app, events };
}

const routeHeaders = (h: Headers) => [...h].filter(([name]) => name.startsWith('x-route-'));

async function post(url: string, path: string, body: unknown, headers: Record<string, string> = {}) {
  const res = await fetch(`${url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
  return { status: res.status, headers: res.headers, text: await res.text() };
}

describe('idempotent replay across instances', () => {
  it('the same key twice runs once: another instance answers from the store, byte for byte, without a provider call', async () => {
    const [a, b] = await Promise.all([instance('a'), instance('b')]);
    const first = await chat(a.url, BODY, { 'idempotency-key': 'order-7' });
    const again = await chat(b.url, BODY, { 'idempotency-key': 'order-7' });
    expect(hot.received).toHaveLength(1);
    expect(first.status).toBe(200);
    expect(first.headers.get('idempotent-replayed')).toBeNull();
    expect(again.status).toBe(200);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.text).toBe(first.text);
    expect(routeHeaders(again.headers)).toEqual(routeHeaders(first.headers));
    expect(again.headers.get('content-type')).toBe(first.headers.get('content-type'));
    // The provider's id of the answer, which the SDKs give as `_request_id` and support asks for.
    expect(first.headers.get('x-request-id')).toBe('req_1');
    expect(again.headers.get('x-request-id')).toBe('req_1');
    // The replay is metered as one: no tokens, no cost, marked in `decision`.
    const [replayed] = b.events();
    expect(replayed).toMatchObject({ decision: 'idempotent_replay', input_tokens: '0', output_tokens: '0', cost_usd: '0' });
    expect(replayed.provider).toBe('openai');
    expect(a.events()[0].decision).toBe('default');
  });

  it('the same body with its keys in another order is the same request', async () => {
    const a = await instance('a');
    await chat(a.url, BODY, { 'idempotency-key': 'order-8' });
    const again = await chat(a.url, { messages: BODY.messages, model: BODY.model }, { 'idempotency-key': 'order-8' });
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.headers.get('x-request-id')).toBe('req_1');
    expect(hot.received).toHaveLength(1);
  });

  it('the key with another body is refused with 422, and nothing is called', async () => {
    const [a, b] = await Promise.all([instance('a'), instance('b')]);
    await chat(a.url, BODY, { 'idempotency-key': 'order-9' });
    const other = await chat(
      b.url,
      { ...BODY, messages: [{ role: 'user', content: 'Summarise invoice 8' }] },
      { 'idempotency-key': 'order-9' },
    );
    expect(other.status).toBe(422);
    expect(other.json().error).toMatchObject({ type: 'invalid_request_error', code: 'idempotency_key_reused' });
    expect(hot.received).toHaveLength(1);
  });

  it('a repeat while the first still runs gets 409; once it has answered, the answer', async () => {
    const [a, b] = await Promise.all([instance('a'), instance('b')]);
    hot.next({ kind: 'ok', delayMs: 700 });
    const first = chat(a.url, BODY, { 'idempotency-key': 'order-10' });
    await until(async () => hot.received.length === 1);
    const during = await chat(b.url, BODY, { 'idempotency-key': 'order-10' });
    expect(during.status).toBe(409);
    expect(during.json().error.code).toBe('idempotency_key_in_flight');
    expect(during.headers.get('retry-after')).toBe('1'); // OpenAI's clients retry a 409 by themselves, after this
    const answered = await first;
    const after = await chat(b.url, BODY, { 'idempotency-key': 'order-10' });
    expect([answered.status, after.status, after.text === answered.text]).toEqual([200, 200, true]);
    expect(hot.received).toHaveLength(1);
  });

  it('a key Redis lost while the first request ran (a restart without its data, a flush) still gets its answer kept: a repeat is replayed, not run and paid again', async () => {
    const [a, b] = await Promise.all([instance('a'), instance('b')]);
    hot.next({ kind: 'ok', delayMs: 500 });
    const first = chat(a.url, BODY, { 'idempotency-key': 'order-lost' });
    await until(async () => hot.received.length === 1);
    const held = await redis.keys(`${prefix}:idempotency:*`);
    expect(held).toHaveLength(1);
    await redis.del(...held); // what a Redis restarted without its data, or FLUSHDB, leaves of the claim
    expect((await first).status).toBe(200);
    const again = await chat(b.url, BODY, { 'idempotency-key': 'order-lost' });
    expect([again.status, again.headers.get('idempotent-replayed'), again.text]).toEqual([200, 'true', (await first).text]);
    expect(hot.received).toHaveLength(1);
  });

  it('a stream is replayed as the same stream of events', async () => {
    const [a, b] = await Promise.all([instance('a'), instance('b')]);
    hot.next({ kind: 'stream', chunks: 4 });
    const body = { ...BODY, stream: true };
    const first = await chat(a.url, body, { 'idempotency-key': 'order-11' });
    const again = await chat(b.url, body, { 'idempotency-key': 'order-11' });
    expect(first.text).toContain('part3');
    expect(first.text).toContain('data: [DONE]');
    expect(again.text).toBe(first.text);
    expect(again.headers.get('content-type')).toBe('text/event-stream; charset=utf-8');
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(hot.received).toHaveLength(1);
  });

  it('a stream the provider cut is not kept: the repeat runs again', async () => {
    const a = await instance('a');
    hot.next({ kind: 'stream', chunks: 5, cutAfter: 2, delayMs: 20 }, { kind: 'stream', chunks: 5 });
    const body = { ...BODY, stream: true };
    const cut = await chat(a.url, body, { 'idempotency-key': 'order-12' });
    expect(cut.text).toContain('stream_interrupted');
    const again = await chat(a.url, body, { 'idempotency-key': 'order-12' });
    expect(again.headers.get('idempotent-replayed')).toBeNull();
    expect(again.text).toContain('data: [DONE]');
    expect(hot.received).toHaveLength(2);
  });

  it('two tenants with the same key never see each other’s answers', async () => {
    const [a, b] = await Promise.all([instance('a'), instance('b')]);
    hot.next({ kind: 'ok', content: 'for acme' }, { kind: 'ok', content: 'for beta' });
    const key = { 'idempotency-key': 'shared-key' };
    await chat(a.url, BODY, { ...key, 'x-customer-id': 'acme' });
    await chat(a.url, BODY, { ...key, 'x-customer-id': 'beta' });
    const acme = await chat(b.url, BODY, { ...key, 'x-customer-id': 'acme' });
    const beta = await chat(b.url, BODY, { ...key, 'x-customer-id': 'beta' });
    expect(acme.json().choices[0].message.content).toBe('for acme');
    expect(beta.json().choices[0].message.content).toBe('for beta');
    expect([acme.headers.get('idempotent-replayed'), beta.headers.get('idempotent-replayed')]).toEqual(['true', 'true']);
    expect(hot.received).toHaveLength(2);
  });

  it('a request without the header never replays, however alike', async () => {
    const [a, b] = await Promise.all([instance('a'), instance('b')]);
    const first = await chat(a.url, BODY);
    const second = await chat(b.url, BODY);
    expect([first.status, second.status]).toEqual([200, 200]);
    expect(second.headers.get('idempotent-replayed')).toBeNull();
    expect(hot.received).toHaveLength(2);
  });

  it('a Cold 202 is replayed with the same job id; a 503 is not kept', async () => {
    const [a, b] = await Promise.all([instance('a'), instance('b')]);
    hot.always({ kind: 'status', status: 401 }); // a refused key: no retry, the Cold tier at once
    const queued = await chat(a.url, BODY, { 'idempotency-key': 'order-13' });
    expect(queued.status).toBe(202);
    const again = await chat(b.url, BODY, { 'idempotency-key': 'order-13' });
    expect([again.status, again.headers.get('idempotent-replayed')]).toEqual([202, 'true']);
    expect(again.json().jobId).toBe(queued.json().jobId);
    expect(hot.received).toHaveLength(1);

    await a.stack.flags.update({ enable_cold_queue: false });
    await until(async () => !b.stack.flags.get().enable_cold_queue);
    const failed = await chat(b.url, BODY, { 'idempotency-key': 'order-14' });
    expect(failed.status).toBe(503);
    const retried = await chat(a.url, BODY, { 'idempotency-key': 'order-14' });
    expect([retried.status, retried.headers.get('idempotent-replayed')]).toEqual([503, null]);
    expect(hot.received).toHaveLength(3);
  });

  it('responses and embeddings are replayed too', async () => {
    const [a, b] = await Promise.all([instance('a'), instance('b')]);
    const responses = { model: 'gpt-4o-mini', input: 'Summarise invoice 7' };
    const embeddings = { model: 'text-embedding-3-small', input: ['invoice 7'] };
    for (const [path, body] of [
      ['/v1/responses', responses],
      ['/v1/embeddings', embeddings],
    ] as const) {
      const first = await post(a.url, path, body, { 'idempotency-key': `k-${path}` });
      const again = await post(b.url, path, body, { 'idempotency-key': `k-${path}` });
      expect([first.status, again.status, again.headers.get('idempotent-replayed')]).toEqual([200, 200, 'true']);
      expect(again.text).toBe(first.text);
    }
    expect(hot.received.map((r) => r.path)).toEqual(['/v1/responses', '/v1/embeddings']);
    // One key, two endpoints: a different request.
    const crossed = await post(b.url, '/v1/embeddings', embeddings, { 'idempotency-key': 'k-/v1/responses' });
    expect(crossed.status).toBe(422);
  });

  it('Redis calls: none without the header; with it one to claim and one to keep, and one to replay', async () => {
    const a = await instance('a');
    const calls: string[] = [];
    const r = a.stack.redis!;
    const send = r.sendCommand.bind(r);
    r.sendCommand = ((command: { name: string; args: unknown[] }, ...rest: unknown[]) => {
      if (command.args.some((x) => String(x).includes(':idempotency:'))) calls.push(command.name);
      return (send as (...x: unknown[]) => unknown)(command, ...rest);
    }) as typeof r.sendCommand;
    for (let i = 0; i < 10; i++) await chat(a.url, BODY);
    expect(calls).toEqual([]);
    for (let i = 0; i < 10; i++) await chat(a.url, BODY, { 'idempotency-key': `count-${i}` });
    // One claim and one keep each, by script hash; a script's very first run on a connection is
    // answered NOSCRIPT and sent again in full (EVAL), once per script.
    expect(calls.filter((c) => c === 'evalsha')).toHaveLength(20);
    expect(calls.filter((c) => c === 'eval').length).toBeLessThanOrEqual(2);
    expect(calls.length).toBeLessThanOrEqual(22);
    calls.length = 0;
    for (let i = 0; i < 10; i++) await chat(a.url, BODY, { 'idempotency-key': `count-${i}` });
    expect(calls).toEqual(Array(10).fill('evalsha'));
  });
});

describe('idempotent replay: limits (in process)', () => {
  it('an answer over the size kept is not run again: the repeat gets 409 idempotency_answer_not_kept', async () => {
    const gw = await startGateway(mapOf([hot.url]), { replay: { store: new MemoryReplayStore(), maxBytes: 100 } });
    stops.push(gw.close);
    const first = await chat(gw.url, BODY, { 'idempotency-key': 'big' });
    expect(first.status).toBe(200);
    expect(first.text.length).toBeGreaterThan(100);
    const again = await chat(gw.url, BODY, { 'idempotency-key': 'big' });
    expect(again.status).toBe(409);
    expect(again.json().error.code).toBe('idempotency_answer_not_kept');
    expect(again.headers.get('x-should-retry')).toBe('false'); // retrying cannot help: OpenAI's clients obey this
    expect(hot.received).toHaveLength(1);
  });

  it('a whole answer larger than one piece written to the client (64 KiB) is kept whole: the repeat gets every byte', async () => {
    const map = mapOf([hot.url]);
    map.hot.push({ provider: 'openai', model: 'text-embedding-3-small', baseUrl: hot.url, apis: ['embeddings'] });
    const gw = await startGateway(map, { replay: { store: new MemoryReplayStore() } });
    stops.push(gw.close);
    const body = { model: 'text-embedding-3-small', input: Array.from({ length: 2000 }, (_, i) => `line ${i}`), encoding_format: 'float' };
    const first = await post(gw.url, '/v1/embeddings', body, { 'idempotency-key': 'many' });
    expect(first.status).toBe(200);
    expect(first.text.length).toBeGreaterThan(96 * 1024);
    const again = await post(gw.url, '/v1/embeddings', body, { 'idempotency-key': 'many' });
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.text.length).toBe(first.text.length);
    expect(JSON.parse(again.text).data).toHaveLength(2000);
    expect(hot.received).toHaveLength(1);
  });

  it('a stream whose client hung up before its end is not kept, though the provider finished: the repeat runs again, whole', async () => {
    // Chat-only (a Warm route): the Responses stream is translated, its closing events written by the gateway at the end.
    const gw = await startGateway(mapOf([], [hot.url]), { replay: { store: new MemoryReplayStore(), maxBytes: 64 * 1024 * 1024 } });
    stops.push(gw.close);
    const chunk = (delta: object, finish: string | null = null) =>
      `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
    hot.always({ kind: 'raw-stream', pieces: [Buffer.from(chunk({ role: 'assistant', content: 'hi' }, 'stop') + 'data: [DONE]\n\n')] });
    // The opening events echo the instructions: megabytes the client's socket cannot take while it reads nothing.
    const body = { model: 'x', input: 'hi', instructions: 'x'.repeat(3_000_000), stream: true };
    let answer: import('node:http').ServerResponse | undefined;
    gw.server.prependListener('request', (_req, res) => (answer = res));
    const gone = new Promise<void>((resolve) => {
      const req = httpRequest(`${gw.url}/v1/responses`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': 'cut' },
      });
      req.on('response', (res) => res.pause()); // reads nothing
      req.on('error', () => resolve());
      req.on('close', () => resolve());
      req.end(JSON.stringify(body));
      // Hangs up once the gateway waits for its socket, the provider's stream read to its [DONE].
      void until(async () => answer?.writableNeedDrain).then(() => req.destroy());
    });
    await gone;
    await until(async () => (await gw.meter.flush(), gw.events().length === 1));
    const again = await new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: 'unused', maxRetries: 0 }).responses
      .stream({ model: 'x', input: 'hi', instructions: body.instructions }, { headers: { 'idempotency-key': 'cut' } })
      .finalResponse();
    expect(again).toMatchObject({ status: 'completed', output_text: 'hi' });
    expect(hot.received).toHaveLength(2);
  });

  it('a stream whose client hangs up once it has read [DONE] is kept: it had the whole answer, and a repeat is replayed', async () => {
    // The call's event is made durable before the end is sent: held here until the client has gone.
    let durable = () => {};
    const gate = new Promise<void>((resolve) => (durable = resolve));
    const sink = new CsvSink(join(mkdtempSync(join(tmpdir(), 'replay-done-')), 'events.csv'));
    const meter: MeterSink = {
      kind: sink.kind,
      send: (record) => gate.then(() => sink.send(record)),
      flush: () => sink.flush(),
      close: () => sink.close(),
      status: () => sink.status(),
    };
    const gw = await startGateway(mapOf([hot.url]), { meter, replay: { store: new MemoryReplayStore() } });
    stops.push(gw.close);
    const chunk = `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [{ index: 0, delta: { content: 'hi' }, finish_reason: 'stop' }] })}\n\n`;
    hot.always({ kind: 'raw-stream', pieces: [Buffer.from(chunk + 'data: [DONE]\n\n')] });
    let answer: import('node:http').ServerResponse | undefined;
    gw.server.prependListener('request', (_req, res) => (answer = res));
    const ask = () =>
      fetch(`${gw.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': 'read-to-done' },
        body: JSON.stringify({ model: 'x', messages: [{ role: 'user', content: 'hi' }], stream: true }),
      });
    const first = await ask();
    const reader = first.body!.getReader();
    let text = '';
    while (!text.includes('[DONE]')) text += new TextDecoder().decode((await reader.read()).value);
    await reader.cancel(); // as a client that stops at [DONE] does
    await until(async () => answer?.destroyed === true);
    durable();
    let again = await ask();
    while (again.status === 409) again = (await again.text(), await ask()); // the first still being kept
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(await again.text()).toBe(chunk + 'data: [DONE]\n\n');
    expect(hot.received).toHaveLength(1);
  });

  it('a first request that outlasts its lease keeps its key: the lease is renewed while it runs', async () => {
    const gw = await startGateway(mapOf([hot.url]), { replay: { store: new MemoryReplayStore(), leaseMs: 150 } });
    stops.push(gw.close);
    hot.next({ kind: 'ok', delayMs: 800 });
    const started = Date.now();
    const first = chat(gw.url, BODY, { 'idempotency-key': 'slow' });
    await until(async () => hot.received.length === 1 && Date.now() - started > 500);
    expect((await chat(gw.url, BODY, { 'idempotency-key': 'slow' })).status).toBe(409);
    expect((await first).status).toBe(200);
    expect(hot.received).toHaveLength(1);
  });

  it('a wall clock set forward an hour while the first request runs (an NTP step, a virtual machine resumed) does not free its key: the repeat gets 409, the provider one call', async () => {
    const wall = Date.now.bind(Date);
    vi.spyOn(Date, 'now').mockImplementation(() => wall() + (hot.received.length ? 3_600_000 : 0));
    try {
      const gw = await startGateway(mapOf([hot.url]), { replay: { store: new MemoryReplayStore() } });
      stops.push(gw.close);
      hot.next({ kind: 'hang' });
      const first = chat(gw.url, BODY, { 'idempotency-key': 'stepped', 'x-time-to-answer-ms': '2000' });
      await until(async () => hot.received.length === 1);
      expect((await chat(gw.url, BODY, { 'idempotency-key': 'stepped' })).status).toBe(409);
      expect(hot.received).toHaveLength(1);
      await first;
    } finally {
      vi.restoreAllMocks();
    }
  });

  it("another tenant's answers filling the store do not free a request still running: its repeat gets 409, the provider one call", async () => {
    // A budget of a few answers: the default's 64 MiB is some 64 answers of 1 MiB, cheap embeddings.
    const gw = await startGateway(mapOf([hot.url]), { replay: { store: new MemoryReplayStore(3000) } });
    stops.push(gw.close);
    hot.next({ kind: 'hang' }); // acme's first request: received, still being answered
    const acme = { 'x-customer-id': 'acme', 'idempotency-key': 'invoice-7' };
    const hangUp = new AbortController();
    const first = fetch(`${gw.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...acme },
      body: JSON.stringify(BODY),
      signal: hangUp.signal,
    }).catch(() => undefined);
    await until(async () => hot.received.length === 1);
    for (let i = 0; i < 10; i++) {
      const other = await chat(gw.url, BODY, { 'x-customer-id': 'beta', 'idempotency-key': `beta-${i}` });
      expect(other.status).toBe(200);
    }
    const again = await chat(gw.url, BODY, acme);
    hangUp.abort();
    await first;
    expect(again.status).toBe(409);
    expect(again.json().error.code).toBe('idempotency_key_in_flight');
    expect(hot.received).toHaveLength(11); // acme's once, beta's ten
  });

  it('a provider 4xx is kept and replayed, as the first request got it', async () => {
    const gw = await startGateway(mapOf([hot.url]), { replay: { store: new MemoryReplayStore() } });
    stops.push(gw.close);
    hot.next({ kind: 'status', status: 400, body: { error: { message: 'bad tool schema', type: 'invalid_request_error' } } });
    const first = await chat(gw.url, BODY, { 'idempotency-key': 'bad' });
    const again = await chat(gw.url, BODY, { 'idempotency-key': 'bad' });
    expect([first.status, again.status, again.headers.get('idempotent-replayed')]).toEqual([400, 400, 'true']);
    expect(again.text).toBe(first.text);
    expect(hot.received).toHaveLength(1);
  });
});

describe('idempotent replay with client keys', () => {
  it('a tenant is its client key’s: the same Idempotency-Key from two tenants runs twice, each replays its own', async () => {
    const w = await keysWorld('replay-keys');
    try {
      const [a, b] = [await w.up(), await w.up()];
      const [acme, beta] = [await w.makeKey('acme'), await w.makeKey('beta')];
      w.hot.next({ kind: 'ok', content: 'for acme' }, { kind: 'ok', content: 'for beta' });
      const same = { 'idempotency-key': 'invoice-7' };
      const auth = (key: string) => ({ ...same, authorization: `Bearer ${key}` });
      await chat(a.url, BODY, auth(acme.key));
      await chat(a.url, BODY, auth(beta.key));
      const again = [await chat(b.url, BODY, auth(acme.key)), await chat(b.url, BODY, auth(beta.key))];
      expect(again.map((r) => r.json().choices[0].message.content)).toEqual(['for acme', 'for beta']);
      expect(again.map((r) => r.headers.get('idempotent-replayed'))).toEqual(['true', 'true']);
      // A tenant cannot name another to read its answers.
      expect((await chat(b.url, BODY, { ...auth(beta.key), 'x-customer-id': 'acme' })).status).toBe(403);
      expect(w.hot.received).toHaveLength(2);
    } finally {
      await w.end();
    }
  });
});

describe('idempotent replay and the rate limits', () => {
  it("a replay counts against the key's --rpm: past it the repeat gets 429, so a key cannot write meter events without bound", async () => {
    const w = await keysWorld('replay-rpm');
    try {
      const [a, b] = [await w.up(), await w.up()];
      const acme = await w.makeKey('acme', '--rpm', '3');
      const headers = { authorization: `Bearer ${acme.key}`, 'idempotency-key': 'invoice-8' };
      const first = await chat(a.url, BODY, headers);
      const replays = [await chat(b.url, BODY, headers), await chat(a.url, BODY, headers)];
      const over = await chat(b.url, BODY, headers);
      expect([first.status, ...replays.map((r) => r.headers.get('idempotent-replayed'))]).toEqual([200, 'true', 'true']);
      expect([over.status, over.json().error?.code, over.headers.get('idempotent-replayed')]).toEqual([
        429,
        'key_requests_per_minute',
        null,
      ]);
      expect(Number(over.headers.get('retry-after'))).toBeGreaterThan(0);
      expect(w.hot.received).toHaveLength(1);
    } finally {
      await w.end();
    }
  });
});

describe('idempotent replay: a refusal before routing is not kept', () => {
  it('a Responses request refused as continuing a response its tenant does not own: not kept, so a repeat is checked again and keys fill nothing', async () => {
    const w = await keysWorld('replay-owners');
    try {
      const gw = await w.up();
      const acme = await w.makeKey('acme', '--rpm', '3');
      const post = (body: object, key: string) =>
        fetch(`${gw.url}/v1/responses`, {
          method: 'POST',
          headers: { authorization: `Bearer ${acme.key}`, 'content-type': 'application/json', 'idempotency-key': key },
          body: JSON.stringify({ model: 'gpt-4o-mini', ...body }),
        }).then(async (r) => ({ status: r.status, replayed: r.headers.get('idempotent-replayed'), json: (await r.json()) as any }));
      // The follow-up sent before the response it continues was answered (the fake names its first one resp_native1).
      const followUp = { input: 'and then?', previous_response_id: 'resp_native1' };
      const early = await post(followUp, 'follow-up-1');
      expect([early.status, early.json.error.code]).toEqual([400, 'previous_response_not_found']);
      const first = await post({ input: 'remember 42' }, 'first-1');
      expect([first.status, first.json.id]).toEqual([200, 'resp_native1']);
      // Sent again now that acme owns it: checked again and served, not the refusal replayed.
      const again = await post(followUp, 'follow-up-1');
      expect([again.status, again.replayed]).toEqual([200, null]);
      // Refusals made before the key's --rpm is counted leave nothing in Redis for a day.
      for (let i = 0; i < 5; i++)
        expect((await post({ input: 'x', previous_response_id: `resp_nobody${i}` }, `hostile-${i}`)).status).toBe(400);
      const kept = await w.redis.keys(`${w.prefix}:idempotency:*`);
      expect(kept).toHaveLength(2); // the two requests answered
    } finally {
      await w.end();
    }
  });
});

describe('idempotent replay: a store that fails', () => {
  it('a request is served without replay when the store cannot be reached, and the log says so', async () => {
    const down = new Error('connect ECONNREFUSED');
    const store = {
      claim: () => Promise.reject(down),
      renew: () => Promise.reject(down),
      keep: () => Promise.reject(down),
      release: () => Promise.reject(down),
    };
    const gw = await startGateway(mapOf([hot.url]), { replay: { store } });
    stops.push(gw.close);
    const answers = [await chat(gw.url, BODY, { 'idempotency-key': 'k' }), await chat(gw.url, BODY, { 'idempotency-key': 'k' })];
    expect(answers.map((a) => a.status)).toEqual([200, 200]);
    expect(hot.received).toHaveLength(2);
    expect(gw.logs.join('')).toContain('idempotent replay: store unavailable, request runs without replay');
  });

  it('a store that is away writes a few warnings, not one per request (SDKs send an Idempotency-Key with every request)', async () => {
    const down = new Error('connect ECONNREFUSED');
    const failing = { claim: () => Promise.reject(down), renew: () => Promise.reject(down), keep: () => Promise.reject(down) };
    const gw = await startGateway(mapOf([hot.url]), { replay: { store: { ...failing, release: () => Promise.reject(down) } } });
    stops.push(gw.close);
    // Claimed, then nothing kept: the other warning, as often.
    const memory = new MemoryReplayStore();
    const keepFails = await startGateway(mapOf([hot.url]), {
      replay: {
        store: {
          claim: memory.claim.bind(memory),
          renew: memory.renew.bind(memory),
          keep: failing.keep,
          release: memory.release.bind(memory),
        },
      },
    });
    stops.push(keepFails.close);
    for (let i = 0; i < 40; i++) {
      expect((await chat(gw.url, BODY, { 'idempotency-key': `k${i}` })).status).toBe(200);
      expect((await chat(keepFails.url, BODY, { 'idempotency-key': `k${i}` })).status).toBe(200);
    }
    const warned = (logs: string[], what: string) => logs.filter((l) => l.includes(what)).length;
    expect(warned(gw.logs, 'store unavailable, request runs without replay')).toBeGreaterThanOrEqual(1);
    expect(warned(gw.logs, 'store unavailable, request runs without replay')).toBeLessThanOrEqual(2);
    expect(warned(keepFails.logs, 'answer not stored')).toBeGreaterThanOrEqual(1);
    expect(warned(keepFails.logs, 'answer not stored')).toBeLessThanOrEqual(2);
  });
});

// The idempotent function-call workflow, call records and their side effects, telephony rates,
// and the voice rollups — against loopback servers and the real Redis.
import { spawnSync } from 'node:child_process';
import { spawn } from '../children';
import { mkdtempSync, readFileSync, writeFileSync, existsSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, onTestFinished, vi } from 'vitest';
import { openDuck } from '../../archive/duck';
import { voiceRollupSql } from '../../archive/voice-rollups';
import { CALLS_CSV_HEADER, callToCsvLine, type CallRecord } from '../../schema/call-record';
import type { Stack } from '../../gateway/src/stack';
import { fetchCountryRates } from '../../gateway/src/voice/rates';
import { canonicalJson } from '../../gateway/src/canonical-json';
import { Workflow, workflowKey, type WorkflowAnswer } from '../../gateway/src/voice/workflow';
import { MemoryWorkflowStore, RedisWorkflowStore, type WorkflowStore } from '../../gateway/src/voice/workflow-store';
import { captureLogger, listenStack } from '../gateway/harness';
import { filled } from './filled';
import { TEST_REDIS_URL } from '../redis-db';

const root = join(import.meta.dirname, '..', '..');
const REDIS_URL = TEST_REDIS_URL;
const prefix = `test-wf-${process.pid}`;

/** A loopback server whose handler the test sets; it records every request. */
class Target {
  server!: Server;
  url = '';
  seen: Array<{ path: string; headers: IncomingMessage['headers']; body: any }> = [];
  handle: (n: number, req: IncomingMessage, res: ServerResponse, body: any) => void = (_n, _q, res) =>
    res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true,"booking_id":"evt-1"}');
  async start() {
    this.server = createServer(async (req, res) => {
      let text = '';
      for await (const c of req) text += c;
      const body = text ? JSON.parse(text) : null;
      this.seen.push({ path: req.url!, headers: req.headers, body });
      this.handle(this.seen.length, req, res, body);
    });
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this;
  }
  stop() {
    this.server.closeAllConnections();
    return new Promise<void>((r) => this.server.close(() => r()));
  }
}

let redis: Redis;
let target: Target, dlq: Target, observe: Target;
let dir: string;
const stacks: Array<{ stack: Stack; url: string; stop: () => Promise<void> }> = [];

beforeAll(() => {
  redis = new Redis(REDIS_URL);
});
afterAll(() => redis.disconnect());
beforeEach(async () => {
  [target, dlq, observe] = await Promise.all([new Target().start(), new Target().start(), new Target().start()]);
  dir = mkdtempSync(join(tmpdir(), 'wf-'));
});
afterEach(async () => {
  for (const s of stacks.splice(0)) await s.stop();
  await Promise.all([target.stop(), dlq.stop(), observe.stop()]);
  const keys = await redis.keys(`${prefix}:*`);
  if (keys.length) await redis.del(...keys);
});

/** `hooks`: where the functions' webhooks are (the target's URL unless given). */
async function up(extraEnv: NodeJS.ProcessEnv = {}, logs: string[] = [], hooks = target.url, edit: (c: any) => void = () => undefined) {
  const c = filled() as any;
  edit(c);
  for (const f of c.functions) if (f.webhook) f.webhook = `${hooks}/${f.name}`;
  c.workflow.dlq_url = `${dlq.url}/dlq`;
  c.spend_guard.log_to = `${observe.url}/log`;
  writeFileSync(join(dir, 'concierge.json'), JSON.stringify(c));
  const env = {
    CONCIERGE_FILE: join(dir, 'concierge.json'),
    VOICE_TOKEN: 'v',
    QUEUE_STORE_URL: REDIS_URL,
    REDIS_PREFIX: prefix,
    METER_CSV_FILE: join(dir, 'events.csv'),
    CALLS_CSV_FILE: join(dir, 'calls.csv'),
    TELEPHONY_RATES_FILE: join(dir, 'rates.json'),
    SCOPES_FILE: join(dir, 'none.yaml'),
    ...extraEnv,
  };
  const h = await listenStack(env, undefined, captureLogger(logs));
  stacks.push(h);
  return h;
}
const post = (url: string, path: string, body: unknown) =>
  fetch(`${url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: 'Bearer v' },
    body: JSON.stringify(body),
  });
const called = async (url: string, body: unknown) =>
  (await (await post(url, '/v1/workflow/function-called', body)).json()) as Record<string, any>;
const booking = {
  function: 'book_slot',
  call_id: 'call-1',
  args: { name: 'Ana', phone: '+351900000001', service: 'cut', date: '2026-11-24', time: '10:00', location: 'Lisboa', notes: '' },
};

describe('function-call workflow', () => {
  it('the key is canonical: key order and whitespace do not matter', () => {
    expect(canonicalJson({ b: 1, a: { d: [1, { f: 2, e: 3 }], c: 'x' } })).toBe('{"a":{"c":"x","d":[1,{"e":3,"f":2}]},"b":1}');
    expect(workflowKey('c', 'book_slot', JSON.parse('{ "b": 1,  "a": 2 }'))).toBe(workflowKey('c', 'book_slot', { a: 2, b: 1 }));
    expect(workflowKey('c', 'book_slot', { a: 2 })).not.toBe(workflowKey('c2', 'book_slot', { a: 2 }));
  });

  // fetch refuses a URL with user:password in it and quotes it whole: the webhook's password reached
  // the function's answer (what the model reads, and may say), the log and the dead letter.
  it('a webhook with user:password in its URL fails without its password in the answer, the log or the dead letter', async () => {
    const logs: string[] = [];
    const gw = await up({}, logs, target.url.replace('http://', 'https://hook:wh-s3cret@'));
    const answer = await called(gw.url, booking);
    expect(answer).toMatchObject({ ok: false, dead_lettered: true });
    expect(answer.error).toContain('network error');
    await until(() => dlq.seen.length > 0);
    const everything = [JSON.stringify(answer), ...logs, JSON.stringify(dlq.seen)].join('\n');
    expect(everything).not.toContain('wh-s3cret');
  });

  it('a 500 twice then success: retried with the same Idempotency-Key; a replay answers the first result without calling again', async () => {
    const gw = await up();
    target.handle = (n, _q, res) =>
      n <= 2
        ? res.writeHead(500).end('boom')
        : res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true,"booking_id":"evt-77"}');
    const first = await called(gw.url, booking);
    expect(first).toMatchObject({ ok: true, result: { booking_id: 'evt-77' }, replayed: false });
    expect(target.seen).toHaveLength(3);
    expect(new Set(target.seen.map((s) => s.headers['idempotency-key']))).toEqual(new Set([first.idempotency_key]));
    expect(target.seen[0].body).toMatchObject({
      call_id: 'call-1',
      function: 'book_slot',
      args: booking.args,
      idempotency_key: first.idempotency_key,
      timezone: 'Europe/Lisbon', // meta.timezone: the back office refuses to book in another
    });
    const replay = await called(gw.url, { ...booking, args: Object.fromEntries(Object.entries(booking.args).reverse()) });
    expect(replay).toEqual({ ...first, replayed: true });
    expect(target.seen).toHaveLength(3); // replaying the webhook twice yields one booking
  });

  it('a replay arriving while the first call is still running waits for it: one call to the target', async () => {
    const gw = await up();
    target.handle = (_n, _q, res) =>
      setTimeout(() => res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true,"booking_id":"slow"}'), 400);
    const first = called(gw.url, booking);
    await until(() => target.seen.length === 1); // the first call is at the target (it answers 400 ms later)
    const [a, b] = await Promise.all([first, called(gw.url, booking)]);
    expect(target.seen).toHaveLength(1);
    expect(a.result).toEqual({ ok: true, booking_id: 'slow' });
    expect(b).toMatchObject({ replayed: true, result: a.result });
  });

  // The wait was bounded on the wall clock: set back an hour while a repeat waited, the repeat
  // waited that hour, its caller in silence, though the bound was a minute.
  it("a repeat waiting for a first call that does not finish gives up at its bound (409), the machine's clock set back or not", async () => {
    const config = filled();
    for (const f of config.functions) if (f.webhook) f.webhook = `${target.url}/${f.name}`;
    target.handle = () => undefined; // the first call never answers
    const store = new MemoryWorkflowStore<WorkflowAnswer>();
    const wall = Date.now.bind(Date);
    let stepped = false;
    const result = store.result.bind(store);
    store.result = (key) => ((stepped = true), result(key)); // the repeat is waiting: the clock goes back
    vi.spyOn(Date, 'now').mockImplementation(() => wall() - (stepped ? 3_600_000 : 0));
    onTestFinished(() => void vi.restoreAllMocks());
    const retry = { attempts: 1, firstMs: 10 };
    const wf = new Workflow({ config, store, log: { warn: () => {}, error: () => {} }, waitMs: 300, timeoutMs: 30_000, retry });
    const first = wf.called(booking).catch(() => undefined);
    await until(() => target.seen.length === 1);
    await expect(wf.called(booking)).rejects.toMatchObject({ status: 409 });
    target.server.closeAllConnections(); // the first call ends
    await first;
  });

  it('a 400 is not retried and carries the target’s message', async () => {
    const gw = await up();
    target.handle = (_n, _q, res) => res.writeHead(400, { 'content-type': 'application/json' }).end('{"error":"date: not a date"}');
    const answer = await called(gw.url, { ...booking, call_id: 'call-400' });
    expect(answer).toMatchObject({ ok: false, replayed: false });
    expect(answer.error).toContain('date: not a date');
    expect(target.seen).toHaveLength(1);
  });

  it("a 400's message, cut to 500 characters, is cut between characters: never half an emoji", async () => {
    const gw = await up();
    // `{"error":"x` is 11 characters: the 500th is the first half of an emoji.
    target.handle = (_n, _q, res) =>
      res.writeHead(400, { 'content-type': 'application/json' }).end(JSON.stringify({ error: `x${'😀'.repeat(300)}` }));
    const answer = await called(gw.url, { ...booking, call_id: 'call-400-emoji' });
    expect(answer).toMatchObject({ ok: false, replayed: false });
    expect(answer.error).toBe(`HTTP 400: {"error":"x${'😀'.repeat(244)}`);
  });

  it('a 429 or a 408 (the target asks for a later try) is retried as a 5xx is, not answered as a refusal for good', async () => {
    const gw = await up();
    target.handle = (n, _q, res) =>
      n === 1
        ? res.writeHead(429, { 'retry-after': '0' }).end('Too Many Requests')
        : n === 2
          ? res.writeHead(408).end('Request Timeout')
          : res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true,"booking_id":"evt-later"}');
    const answer = await called(gw.url, { ...booking, call_id: 'call-429' });
    expect(answer).toMatchObject({ ok: true, result: { booking_id: 'evt-later' }, replayed: false });
    expect(target.seen).toHaveLength(3);
    // Always 429: dead-lettered for the on-call person, as a target that keeps failing is.
    dlq.handle = (_n, _q, res) => res.writeHead(204).end();
    target.handle = (_n, _q, res) => res.writeHead(429).end();
    const busy = await called(gw.url, { ...booking, call_id: 'call-429-always' });
    expect(busy).toMatchObject({ ok: false, dead_lettered: true });
    expect(busy.error).toContain('HTTP 429');
    expect(dlq.seen.map((d) => d.body.call_id)).toEqual(['call-429-always']);
  });

  it('a 200 with an HTML page (an Apps Script error or sign-in page) is not the target’s answer: retried, then dead-lettered, never a booking', async () => {
    const gw = await up();
    dlq.handle = (_n, _q, res) => res.writeHead(204).end();
    const page =
      '<!DOCTYPE html><html><head><title>Error</title></head><body><div>TypeError: Cannot read properties of null (reading &quot;getRange&quot;) (line 812, file &quot;meter&quot;)</div></body></html>';
    target.handle = (_n, _q, res) => res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end(page);
    const answer = await called(gw.url, { ...booking, call_id: 'call-html' });
    expect(answer).toMatchObject({ ok: false, dead_lettered: true, replayed: false });
    expect(answer.error).toContain('HTML');
    expect(target.seen).toHaveLength(3);
    // A webhook that answers plain text is still answered.
    target.handle = (_n, _q, res) => res.writeHead(200, { 'content-type': 'text/plain' }).end('accepted');
    const plain = await called(gw.url, { ...booking, call_id: 'call-plain' });
    expect(plain).toMatchObject({ ok: true, result: 'accepted' });
  });

  it('a redirect the fetch cannot follow (a 302 without Location, a 304) is not the target’s answer: retried, then dead-lettered, never a booking', async () => {
    const gw = await up();
    dlq.handle = (_n, _q, res) => res.writeHead(204).end();
    for (const status of [302, 304]) {
      target.seen = [];
      target.handle = (_n, _q, res) => res.writeHead(status).end();
      const answer = await called(gw.url, { ...booking, call_id: `call-${status}` });
      expect(answer).toMatchObject({ ok: false, dead_lettered: true, replayed: false });
      expect(answer.error).toContain(`HTTP ${status}: a redirect not followed`);
      expect(target.seen).toHaveLength(3);
      // Replayed as what it was: a failure, never a booking.
      expect(await called(gw.url, { ...booking, call_id: `call-${status}` })).toMatchObject({ ok: false, replayed: true });
    }
  });

  it('failing for ever: 3 attempts, then the dead-letter URL; with that down too, nothing is lost', async () => {
    const gw = await up();
    target.handle = (_n, _q, res) => res.writeHead(503).end();
    dlq.handle = (_n, _q, res) => res.writeHead(503).end(); // the dead-letter receiver is down
    const answer = await called(gw.url, { ...booking, call_id: 'call-dead' });
    expect(answer).toMatchObject({ ok: false, dead_lettered: true });
    expect(target.seen).toHaveLength(3);
    expect(await redis.llen(`${prefix}:wf:dlq-pending`)).toBe(1);
    dlq.handle = (_n, _q, res) => res.writeHead(204).end(); // back up
    const sent = await flushVia();
    expect(sent).toBe(1);
    const letter = dlq.seen.at(-1)!.body;
    expect(letter).toMatchObject({
      function: 'book_slot',
      call_id: 'call-dead',
      args: booking.args,
      idempotency_key: answer.idempotency_key,
      last_error: 'HTTP 503',
    });
    expect(await redis.llen(`${prefix}:wf:dlq-pending`)).toBe(0);
    // Every post of the letter, the first and the one kept, carries its key as every outbound call does.
    expect(dlq.seen.map((r) => r.headers['idempotency-key'])).toEqual([answer.idempotency_key, answer.idempotency_key]);
  });

  it('a dead letter Redis refuses to keep and the dead-letter URL refuses too is not answered as dead-lettered: the call fails, to be run again', async () => {
    const logs: string[] = [];
    const gw = await up({}, logs);
    await redis.set(`${prefix}:wf:dlq-pending`, 'not a list'); // Redis refuses the push (WRONGTYPE), as when full (OOM)
    target.handle = (_n, _q, res) => res.writeHead(503).end();
    dlq.handle = (_n, _q, res) => res.writeHead(503).end();
    const res = await post(gw.url, '/v1/workflow/function-called', { ...booking, call_id: 'call-nowhere' });
    expect(res.status).toBe(503);
    expect(((await res.json()) as { error: string }).error).toMatch(/neither kept .* nor taken by the dead-letter URL/);
    expect(dlq.seen).toHaveLength(1);
    expect(logs.join('\n')).not.toContain('(kept');
    // Nothing was remembered for the key: the same call runs the target again once things are back.
    await redis.del(`${prefix}:wf:dlq-pending`);
    target.handle = (_n, _q, res) => res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true,"booking_id":"later"}');
    expect(await called(gw.url, { ...booking, call_id: 'call-nowhere' })).toMatchObject({ ok: true, replayed: false });
  });

  it('a kept letter the dead-letter URL refuses for good (a 4xx) is set aside, not posted for ever ahead of every later one', async () => {
    const gw = await up();
    const key = `${prefix}:wf:dlq-pending`;
    await redis.rpush(key, JSON.stringify({ n: 1, idempotency_key: 'k1', too: 'large' }));
    target.handle = (_n, _q, res) => res.writeHead(503).end();
    dlq.handle = (_n, _q, res, body) => res.writeHead(body.too ? 413 : 204).end();
    const answer = await called(gw.url, { ...booking, call_id: 'call-after' });
    expect(answer).toMatchObject({ ok: false, dead_lettered: true });
    expect(dlq.seen.map((r) => r.body.n ?? r.body.call_id)).toEqual([1, 'call-after']);
    expect(await redis.llen(key)).toBe(0);
    expect((await redis.lrange(`${prefix}:wf:dlq-refused`, 0, -1)).map((l) => JSON.parse(l).n)).toEqual([1]); // kept for a person
    expect(await flushVia()).toBe(0); // and not posted again
    expect(dlq.seen).toHaveLength(2);
  });

  it('a call dead-lettered while older letters are kept goes behind them, and is kept before its post', async () => {
    const gw = await up();
    const key = `${prefix}:wf:dlq-pending`;
    for (const n of [1, 2]) await redis.rpush(key, JSON.stringify({ n, idempotency_key: `k${n}` })); // kept while the URL was down
    target.handle = (_n, _q, res) => res.writeHead(503).end();
    let keptWhilePosted = -1;
    dlq.handle = (n, _q, res) => {
      if (n === 3) void redis.llen(key).then((l) => ((keptWhilePosted = l), res.writeHead(204).end()));
      else res.writeHead(204).end();
    };
    const answer = await called(gw.url, { ...booking, call_id: 'call-late' });
    expect(answer).toMatchObject({ ok: false, dead_lettered: true });
    expect(dlq.seen.map((r) => r.body.n ?? r.body.call_id)).toEqual([1, 2, 'call-late']);
    expect(keptWhilePosted).toBe(1); // in Redis while its post was under way: a crash then would lose nothing
    expect(await redis.llen(key)).toBe(0);
  });

  it('kept dead letters are posted again one at a time, in order: a slow dead-letter URL never gets a second post while one is unanswered', async () => {
    const store = new RedisWorkflowStore<never>(redis, prefix);
    await store.pushDeadLetter('{"n":1}');
    let open = 0;
    let most = 0;
    let answered = 0;
    dlq.handle = (_n, _q, res) => {
      most = Math.max(most, ++open);
      // Slower than many retry periods: each answer comes 300 ms after its post.
      setTimeout(() => {
        open--;
        answered++;
        res.writeHead(204).end();
      }, 300);
    };
    const wf = dlqWorkflow(store);
    wf.startDeadLetterRetry(20);
    try {
      await until(() => dlq.seen.length === 1);
      await store.pushDeadLetter('{"n":2}'); // kept while the first post is unanswered
      await until(() => answered === 2);
    } finally {
      await wf.stop();
    }
    expect(dlq.seen.map((r) => r.body)).toEqual([{ n: 1 }, { n: 2 }]);
    expect(most).toBe(1);
    expect(await redis.llen(`${prefix}:wf:dlq-pending`)).toBe(0);
  });

  it('stopping (a shutdown) lets the post under way finish and be recorded, starts no other, and gives the round up: no letter is posted twice', async () => {
    const key = `${prefix}:wf:dlq-pending`;
    for (const n of [1, 2, 3]) await redis.rpush(key, JSON.stringify({ n }));
    let answer: () => void = () => {};
    dlq.handle = (_n, _q, res) => (answer = () => res.writeHead(204).end());
    const wf = dlqWorkflow();
    const round = wf.flushDeadLetters();
    await until(() => dlq.seen.length === 1);
    const stopped = wf.stop();
    answer(); // the post under way is answered while the gateway stops
    await stopped;
    // Stopped: the letter posted is out of Redis, the round given up (another gateway goes on at once).
    expect((await redis.lrange(key, 0, -1)).map((l) => JSON.parse(l).n)).toEqual([2, 3]);
    expect(await redis.exists(`${prefix}:wf:dlq-round`)).toBe(0);
    expect(await round).toBe(1);
    expect(dlq.seen).toHaveLength(1);
  });

  it('two instances on one Redis: while one posts kept dead letters the other posts none, so each goes once and in order', async () => {
    const [a, b] = [dlqWorkflow(), dlqWorkflow()];
    const store = new RedisWorkflowStore<never>(redis, prefix);
    for (const n of [1, 2]) await store.pushDeadLetter(JSON.stringify({ n }));
    let open = 0;
    let most = 0;
    dlq.handle = (_n, _q, res) => {
      most = Math.max(most, ++open);
      setTimeout(() => (open--, res.writeHead(204).end()), 200);
    };
    const first = a.flushDeadLetters();
    await until(() => dlq.seen.length === 1);
    await store.pushDeadLetter(JSON.stringify({ n: 3 })); // kept while the other instance's round runs
    expect(await b.flushDeadLetters()).toBe(0);
    expect(await first).toBe(3);
    expect(dlq.seen.map((r) => r.body.n)).toEqual([1, 2, 3]);
    expect(most).toBe(1);
    expect(await redis.llen(`${prefix}:wf:dlq-pending`)).toBe(0);
  });

  it('a letter kept just as a round ends (its last look found none, its lock not yet given up) is posted by that round, not left for the next timer', async () => {
    let closing: () => void = () => {};
    const closed = new Promise<void>((r) => (closing = r));
    let atClose = false;
    // The real store; its round is held open at its end until the test lets it go.
    class Ending extends RedisWorkflowStore<never> {
      override async closeRound(holder: string) {
        atClose = true;
        await closed;
        return super.closeRound(holder);
      }
    }
    const [a, b] = [dlqWorkflow(new Ending(redis, prefix)), dlqWorkflow()];
    await redis.rpush(`${prefix}:wf:dlq-pending`, JSON.stringify({ n: 1 }));
    dlq.handle = (_n, _q, res) => res.writeHead(204).end();
    const round = a.flushDeadLetters();
    await until(() => atClose);
    await redis.rpush(`${prefix}:wf:dlq-pending`, JSON.stringify({ n: 2 })); // kept by another gateway now
    expect(await b.flushDeadLetters()).toBe(0); // the round is still a's
    closing();
    expect(await round).toBe(2);
    expect(dlq.seen.map((r) => r.body.n)).toEqual([1, 2]);
    expect(await redis.llen(`${prefix}:wf:dlq-pending`)).toBe(0);
  });

  it('without Redis too, a dead letter whose post fails is kept in its place: the next round posts it and those after it, in order', async () => {
    const store = new MemoryWorkflowStore<never>();
    const wf = dlqWorkflow(store);
    for (const n of [1, 2, 3]) await store.pushDeadLetter(JSON.stringify({ n }));
    dlq.handle = (n, _q, res) => {
      if (n === 2) void store.pushDeadLetter(JSON.stringify({ n: 4 })); // kept while the round runs
      res.writeHead(n === 2 ? 503 : 204).end();
    };
    expect(await wf.flushDeadLetters()).toBe(1);
    expect(await wf.flushDeadLetters()).toBe(3);
    expect(dlq.seen.map((r) => r.body.n)).toEqual([1, 2, 2, 3, 4]);
    expect(await wf.flushDeadLetters()).toBe(0);
  });

  it('a gateway killed (kill -9) while a kept dead letter is being posted loses none: after a restart every letter is posted, in order', async () => {
    const key = `${prefix}:wf:dlq-pending`;
    for (const n of [1, 2, 3]) await redis.rpush(key, JSON.stringify({ n, idempotency_key: `k${n}` }));
    dlq.handle = () => {}; // holds the post open: the gateway is killed while it waits
    const first = dlqRetryProcess();
    await until(() => dlq.seen.length === 1);
    await first.kill();
    expect(await redis.lrange(key, 0, -1)).toHaveLength(3); // the letter being posted, and those after it, are still kept
    dlq.handle = (_n, _q, res) => res.writeHead(204).end();
    const restarted = dlqRetryProcess();
    await until(() => dlq.seen.length === 4);
    // The last letter leaves Redis once its answer is back in the gateway, a moment after the post arrived here.
    for (const end = Date.now() + 10_000; (await redis.llen(key)) > 0 && Date.now() < end;) await new Promise((r) => setTimeout(r, 20));
    await restarted.kill();
    // At least once: the letter the dead gateway was posting is posted again (same idempotency_key).
    expect(dlq.seen.map((r) => r.body.n)).toEqual([1, 1, 2, 3]);
    expect(await redis.llen(key)).toBe(0);
  }, 30_000);

  it('static_url answers the pricing page; dial answers the number; an unknown function is refused', async () => {
    const gw = await up();
    expect(await called(gw.url, { function: 'lookup_pricing_page', call_id: 'c', args: {} })).toMatchObject({
      ok: true,
      result: { url: 'https://example.com/prices' },
    });
    expect(await called(gw.url, { function: 'escalate_to_human', call_id: 'c', args: { reason: 'x' } })).toMatchObject({
      ok: true,
      result: { dial: '+351211234567' },
    });
    const res = await post(gw.url, '/v1/workflow/function-called', { function: 'order_pizza', call_id: 'c', args: {} });
    expect(res.status).toBe(400);
    expect(target.seen).toHaveLength(0);
  });
});

async function until(check: () => boolean, ms = 10_000): Promise<void> {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 20));
  }
}

/**
 * A gateway's dead-letter retry in a process of its own (so kill -9 is real): the Redis store under
 * the test's prefix, rounds every 50 ms, a round of a dead process lapsing after 1 s.
 */
function dlqRetryProcess() {
  const source = (name: string) => JSON.stringify(join(root, 'gateway/src/voice', name));
  const code = `Promise.all([import(${source('workflow.ts')}), import(${source('workflow-store.ts')}), import('ioredis')]).then(
    ([{ Workflow }, { RedisWorkflowStore }, { Redis }]) => {
      const store = new RedisWorkflowStore(new Redis(${JSON.stringify(REDIS_URL)}), ${JSON.stringify(prefix)}, { resultS: 60, runningS: 60, roundS: 1 });
      const config = { workflow: { dlq_url: ${JSON.stringify(`${dlq.url}/dlq`)} }, functions: [] };
      new Workflow({ config, store, log: console }).startDeadLetterRetry(50);
      setInterval(() => {}, 1000);
    });`;
  const child = spawn(process.execPath, ['--import', 'tsx', '-e', code], { cwd: root, stdio: ['ignore', 'inherit', 'inherit'] });
  return {
    kill: () => new Promise<void>((resolve) => (child.once('exit', () => resolve()), child.kill('SIGKILL'))),
  };
}

/** A workflow of its own, as a gateway's, whose dead letters go to the test's dead-letter server. */
function dlqWorkflow(store: WorkflowStore<never> = new RedisWorkflowStore<never>(redis, prefix)): Workflow {
  const config = filled();
  config.workflow.dlq_url = `${dlq.url}/dlq`;
  return new Workflow({ config, store, log: { warn: () => {}, error: () => {} } });
}

/** Posts kept dead letters now (the service does it every 30 s). */
async function flushVia(): Promise<number> {
  const c = JSON.parse(readFileSync(join(dir, 'concierge.json'), 'utf8'));
  const wf = new Workflow({ config: c, store: new RedisWorkflowStore(redis, prefix), log: { warn: () => {}, error: () => {} } });
  return wf.flushDeadLetters();
}

describe('after each call', () => {
  it('builds the call record, posts the summary, sends record and audio cost to the meter; ending twice sends nothing twice', async () => {
    writeFileSync(
      join(dir, 'rates.json'),
      JSON.stringify({ PT: { price_unit: 'USD', inbound: { local: 0.01 }, outbound: [], fetched_at: 'x' } }),
    );
    const gw = await up();
    await post(gw.url, '/v1/voice/calls', { call_id: 'rec-1', from: '+351900000001', country: 'PT', at: '2026-11-23T10:00:00Z' });
    await post(gw.url, '/v1/voice/calls/rec-1/events', [
      { type: 'transcript', text: 'I want to book a haircut', confidence: 0.9, speaker: 'user' },
      { type: 'user.audio_frame', ms: 3000 },
      { type: 'assistant.response.start', ttfb_ms: 800 },
      { type: 'assistant.audio_frame', ms: 2000 },
      { type: 'assistant.response.done' },
      { type: 'transcript', text: 'tomorrow at ten', confidence: 0.7, speaker: 'user' },
      { type: 'assistant.response.start', ttfb_ms: 1200 },
      { type: 'assistant.response.done' },
    ]);
    const res = await post(gw.url, '/v1/voice/calls/rec-1/end', { outcome: 'booking', duration_s: 95, asr_wer: 0.08 });
    const record = (await res.json()) as CallRecord;
    expect(record).toEqual({
      call_id: 'rec-1',
      started_at: '2026-11-23T10:00:00.000Z',
      duration_s: 95,
      model: 'gpt-realtime-mini',
      intent_primary: 'book',
      turns: 2,
      ttfb_s: 1,
      asr_wer: 0.08,
      confidence_avg: 0.8,
      escalated: false,
      outcome: 'booking',
      est_audio_cost_usd: Number(((30 * 10 + 40 * 20) / 1e6).toFixed(6)),
      telephony_minutes: 2,
      country: 'PT',
      ended_reason: '',
    });
    expect(await (await post(gw.url, '/v1/voice/calls/rec-1/end', { outcome: 'abandoned' })).json()).toEqual(record);
    // A call ended after both: once its summary is in, a second one for rec-1 would be too.
    await post(gw.url, '/v1/voice/calls', { call_id: 'rec-mark', from: '+351900000002', at: '2026-11-23T10:00:00Z' });
    await post(gw.url, '/v1/voice/calls/rec-mark/end', { outcome: 'abandoned', duration_s: 1 });
    await until(() => observe.seen.some((s) => s.body.call_id === 'rec-mark'));
    expect(observe.seen.filter((s) => s.body.call_id !== 'rec-mark').map((s) => s.body)).toEqual([
      {
        call_id: 'rec-1',
        intent: 'book',
        status: 'booking',
        duration_s: 95,
        turns: 2,
        est_audio_cost_usd: record.est_audio_cost_usd,
        escalated: false,
      },
    ]);
    await gw.stack.close();
    stacks.pop();
    const ofRec1 = (file: string) =>
      readFileSync(join(dir, file), 'utf8')
        .trim()
        .split('\n')
        .filter((line) => !line.includes('rec-mark'));
    expect(ofRec1('calls.csv')).toEqual([CALLS_CSV_HEADER, callToCsvLine(record)]);
    const events = ofRec1('events.csv').slice(1);
    expect(events).toHaveLength(2);
    expect(events[0]).toMatch(/,openai,gpt-realtime-mini,n\/a,30,40,95000,0\.0011,,0\.8,rec-1,/);
    expect(events[1]).toMatch(/,twilio,voice-inbound-pt,n\/a,0,0,0,0\.02,,,rec-1,/);
    expect(await redis.ttl(`${prefix}:voice:call:rec-1`)).toBeLessThanOrEqual(3600);
  });

  it('the summary: a 5xx is retried (3 posts in all, one Idempotency-Key the receiver can count it once by), a 4xx is not; either way a warning names the call', async () => {
    const logs: string[] = [];
    const gw = await up({}, logs);
    const warned = (id: string) => logs.some((l) => l.includes(`call ${id}: the observability webhook did not take the summary`));
    observe.handle = (_n, _q, res) => res.writeHead(503).end();
    await post(gw.url, '/v1/voice/calls', { call_id: 'sum-5xx', from: '+1', at: '2026-11-23T10:00:00Z' });
    await post(gw.url, '/v1/voice/calls/sum-5xx/end', { outcome: 'abandoned', duration_s: 1 });
    await until(() => warned('sum-5xx'));
    expect(observe.seen).toHaveLength(3);
    const keys = observe.seen.map((r) => r.headers['idempotency-key']);
    expect(new Set(keys).size).toBe(1);
    expect(keys[0]).toMatch(/^call-summary-[0-9a-f]{64}$/);
    observe.handle = (_n, _q, res) => res.writeHead(400).end();
    await post(gw.url, '/v1/voice/calls', { call_id: 'sum-4xx', from: '+1', at: '2026-11-23T10:00:00Z' });
    await post(gw.url, '/v1/voice/calls/sum-4xx/end', { outcome: 'abandoned', duration_s: 1 });
    await until(() => warned('sum-4xx'));
    expect(observe.seen).toHaveLength(4);
  });

  it("a voice server's call whose responses reported text tokens the configuration has no price for is metered with its known cost and UNPRICED, not as a whole figure", async () => {
    const usage = {
      input_token_details: { audio_tokens: 100, text_tokens: 2000 },
      output_token_details: { audio_tokens: 50, text_tokens: 40 },
    };
    const costOf = async (id: string, edit: (c: any) => void) => {
      const gw = await up({}, [], target.url, edit);
      await post(gw.url, '/v1/voice/calls', { call_id: id, from: '+1', at: '2026-11-23T10:00:00Z' });
      await post(gw.url, '/v1/voice/calls/' + id + '/events', [{ type: 'assistant.response.done', usage }]);
      await post(gw.url, '/v1/voice/calls/' + id + '/end', { outcome: 'abandoned', duration_s: 30 });
      await gw.stack.close();
      stacks.pop();
      const line = readFileSync(join(dir, 'events.csv'), 'utf8')
        .split('\n')
        .find((l) => l.includes(`,openai,gpt-realtime-mini,`) && l.includes(`,${id},`));
      const cells = line?.split(',') ?? [];
      return [cells[9], cells.at(-1)]; // cost_usd, error_code
    };
    // Audio 100 × 10 + 50 × 20; text 2000 × 0.6 + 40 × 2.4 (USD per million).
    expect(await costOf('text-priced', () => undefined)).toEqual(['0.003296', '']);
    const unpriced = (c: any) => {
      delete c.spend_guard.text_in_per_million;
      delete c.spend_guard.text_out_per_million;
    };
    expect(await costOf('text-unpriced', unpriced)).toEqual(['0.002', 'UNPRICED']);
  });

  it('a country without telephony rates is an error naming it, never a global rate', async () => {
    const gw = await up();
    await post(gw.url, '/v1/voice/calls', { call_id: 'rec-2', from: '+1', country: 'US', at: '2026-11-23T10:00:00Z' });
    await post(gw.url, '/v1/voice/calls/rec-2/end', { outcome: 'abandoned', duration_s: 30 });
    await gw.stack.close();
    stacks.pop();
    const events = readFileSync(join(dir, 'events.csv'), 'utf8');
    expect(events).not.toContain('twilio');
  });

  it('a rates file edited by hand (a rate that is not a price, an entry of another shape, a file not JSON) or in another currency than USD meters no telephony cost of NaN or below 0, and the call still ends: 200, its summary posted, the log naming the entry', async () => {
    const logs: string[] = [];
    const gw = await up({}, logs);
    observe.handle = (_n, _q, res) => res.writeHead(204).end();
    const files = [
      JSON.stringify({ US: { price_unit: 'USD', inbound: { local: 'abc' }, outbound: [] } }),
      JSON.stringify({ US: { price_unit: 'USD', inbound: { local: -0.01 }, outbound: [] } }),
      JSON.stringify({ US: { local: 0.0085 } }),
      '{"US": {',
      JSON.stringify({ US: { price_unit: 'EUR', inbound: { local: 0.0085 }, outbound: [] } }),
    ];
    for (const [i, text] of files.entries()) {
      writeFileSync(join(dir, 'rates.json'), text);
      await post(gw.url, '/v1/voice/calls', { call_id: `rates-${i}`, from: '+1', country: 'US', at: '2026-11-23T10:00:00Z' });
      const end = await post(gw.url, `/v1/voice/calls/rates-${i}/end`, { outcome: 'abandoned', duration_s: 30 });
      expect(end.status).toBe(200);
    }
    await until(() => observe.seen.length === files.length); // every call's summary
    await gw.stack.close();
    stacks.pop();
    const events = readFileSync(join(dir, 'events.csv'), 'utf8');
    expect(events).not.toContain('twilio');
    const notMetered = logs.filter((l) => l.includes('telephony cost not metered'));
    expect(notMetered).toHaveLength(files.length);
    expect(notMetered[0]).toContain('US.inbound.local: expected a price per minute (a number >= 0), got \\"abc\\"');
    expect(notMetered[1]).toContain('US.inbound.local: expected a price per minute (a number >= 0), got -0.01');
    expect(notMetered[2]).toContain('US.inbound: expected the per-minute prices by number type');
    expect(notMetered[3]).toContain('not a rates file');
    expect(notMetered[4]).toContain('the rates file prices US in EUR, and the meter counts USD');
  });
});

describe('telephony rates', () => {
  let pricing: Server;
  let pricingUrl = '';
  beforeAll(async () => {
    pricing = createServer((req, res) => {
      const auth = Buffer.from((req.headers.authorization ?? '').replace('Basic ', ''), 'base64').toString();
      if (auth !== 'ACsid:tok') return void res.writeHead(401).end();
      const iso = req.url!.split('/').pop();
      if (iso !== 'US') return void res.writeHead(404).end('{"message":"not found"}');
      res.writeHead(200, { 'content-type': 'application/json' }).end(
        JSON.stringify({
          country: 'United States',
          iso_country: 'US',
          price_unit: 'USD',
          inbound_call_prices: [
            { number_type: 'local', base_price: '0.0085', current_price: '0.0085' },
            { number_type: 'toll free', base_price: '0.0220', current_price: '0.0220' },
          ],
          outbound_prefix_prices: [{ prefixes: ['1'], friendly_name: 'United States', base_price: '0.0140', current_price: '0.0140' }],
          url: 'https://pricing.twilio.com/v1/Voice/Countries/US',
        }),
      );
    });
    await new Promise<void>((r) => pricing.listen(0, '127.0.0.1', r));
    pricingUrl = `http://127.0.0.1:${(pricing.address() as AddressInfo).port}`;
  });
  afterAll(() => pricing.close());

  it('reads Twilio’s shape (prices as strings) with basic authentication', async () => {
    const r = await fetchCountryRates('US', { baseUrl: pricingUrl, sid: 'ACsid', token: 'tok' });
    expect(r).toMatchObject({
      price_unit: 'USD',
      inbound: { local: 0.0085, 'toll free': 0.022 },
      outbound: [{ prefixes: ['1'], name: 'United States', price: 0.014 }],
    });
    await expect(fetchCountryRates('US', { baseUrl: pricingUrl, sid: 'ACsid', token: 'bad' })).rejects.toThrow(
      'US: pricing service answered HTTP 401',
    );
  });

  it('npm run concierge:rates writes the file, and a country without rates is an error that names it', async () => {
    const file = join(dir, 'rates.json');
    // Asynchronous: the pricing server lives in this process and must keep answering.
    const child = spawn(join(root, 'node_modules', '.bin', 'tsx'), ['bin/concierge-rates.ts', 'US', 'ZZ'], {
      detached: true, // npm or tsx starts node beneath it: killed with it if the test ends first (children.ts)
      cwd: root,
      env: {
        ...process.env,
        TWILIO_PRICING_URL: pricingUrl,
        TWILIO_ACCOUNT_SID: 'ACsid',
        TWILIO_AUTH_TOKEN: 'tok',
        TELEPHONY_RATES_FILE: file,
      },
    });
    const run = { stdout: '', stderr: '', status: null as number | null };
    child.stdout.on('data', (d) => (run.stdout += d));
    child.stderr.on('data', (d) => (run.stderr += d));
    run.status = await new Promise<number | null>((r) => child.on('exit', r));
    expect(run.status).toBe(1);
    expect(run.stderr).toContain('ZZ: the pricing service has no rates for this country');
    expect(existsSync(file) && JSON.parse(readFileSync(file, 'utf8')).US.inbound.local).toBe(0.0085);
    expect(run.stdout + run.stderr).not.toContain('tok');
  });
});

describe('voice rollups', () => {
  it('npm run report -- voice equals a direct computation over the call records', async () => {
    const base = {
      model: 'm',
      started_at: '2026-11-20T10:00:00.000Z',
      duration_s: 60,
      telephony_minutes: 1,
      country: 'PT',
      confidence_avg: 0.9,
      ttfb_s: 1,
    } as const;
    const records: CallRecord[] = [
      {
        ...base,
        call_id: 'a',
        intent_primary: 'book',
        turns: 4,
        asr_wer: 0.1,
        escalated: false,
        outcome: 'booking',
        est_audio_cost_usd: 0.1,
      },
      {
        ...base,
        call_id: 'b',
        intent_primary: 'book',
        turns: 6,
        asr_wer: null,
        escalated: true,
        outcome: 'abandoned',
        est_audio_cost_usd: 0.2,
        ttfb_s: 2,
      },
      {
        ...base,
        call_id: 'c',
        intent_primary: 'qualify',
        turns: 2,
        asr_wer: 0.3,
        escalated: false,
        outcome: 'lead_created',
        est_audio_cost_usd: 0.05,
      },
      {
        ...base,
        call_id: 'd',
        intent_primary: 'voicemail',
        turns: 0,
        asr_wer: null,
        escalated: false,
        outcome: 'voicemail_left',
        est_audio_cost_usd: 0.01,
        ttfb_s: null,
      },
      {
        ...base,
        call_id: 'old',
        started_at: '2026-10-01T10:00:00.000Z',
        intent_primary: 'book',
        turns: 9,
        asr_wer: null,
        escalated: false,
        outcome: 'booking',
        est_audio_cost_usd: 9,
      },
    ];
    const file = join(dir, 'calls.csv');
    writeFileSync(file, [CALLS_CSV_HEADER, ...records.map(callToCsvLine)].join('\n') + '\n');
    const duck = await openDuck();
    const [r] = await duck.all(voiceRollupSql(file, '2026-11-01'));
    duck.close();
    const recent = records.filter((x) => x.started_at >= '2026-11-01');
    const answered = recent.filter((x) => x.outcome !== 'voicemail_left');
    const bookings = recent.filter((x) => x.outcome === 'booking');
    const esc = answered.filter((x) => x.escalated).length;
    const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
    expect(r).toMatchObject({ calls: 4, answered_calls: 3, bookings: 1, escalations: 1, asr_wer_sampled_calls: 2 });
    expect(r.booking_rate).toBeCloseTo(bookings.length / answered.length, 12);
    expect(r.escalation_rate).toBeCloseTo(esc / answered.length, 12);
    expect(r.containment_rate).toBeCloseTo((answered.length - esc) / answered.length, 12);
    expect(r.avg_turns).toBeCloseTo(mean(recent.map((x) => x.turns)), 12);
    expect(r.avg_ttfb_s).toBeCloseTo(mean(recent.filter((x) => x.ttfb_s !== null).map((x) => x.ttfb_s!)), 12);
    expect(r.asr_wer).toBeCloseTo(0.2, 12);
    expect(r.cost_per_call).toBeCloseTo(mean(recent.map((x) => x.est_audio_cost_usd)), 12);
    expect(r.cost_per_booking).toBeCloseTo(0.1, 12);
    const cli = spawnSync(
      join(root, 'node_modules', '.bin', 'tsx'),
      ['bin/archive.ts', 'report', 'voice', '--calls', file, '--format', 'json'],
      { cwd: root, encoding: 'utf8' },
    );
    expect(JSON.parse(cli.stdout)[0].calls).toBe(5);
  });
});

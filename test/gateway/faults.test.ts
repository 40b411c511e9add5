// Faults around the request path: a client that stops reading a stream (for good, or for a
// while), a SIGTERM with a call in flight, and caller text that is not a valid header value.
import { spawn } from '../children';
import { mkdtempSync, readFileSync, existsSync } from 'node:fs';
import { createServer, request, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Agent, request as undiciRequest } from 'undici';
import { calcPrice } from '@pydantic/genai-prices';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { FakeProvider, refusedUrl } from './fake-provider';
import { ADMIN, chat, listenStack, mapOf, startGateway, type TestGateway, writeOneRouteMap } from './harness';
import { until } from './instances';
import { TEST_REDIS_URL } from '../redis-db';
import { redisUnderPrefix } from '../redis-prefix';
import { keysCli } from '../../gateway/src/keys-cli';
import { MemoryReplayStore } from '../../gateway/src/replay-store';
import { MemoryColdQueue } from '../../gateway/src/cold-queue-memory';
import { coldFallback } from '../../gateway/src/cold-tier';
import { MemoryPause } from '../../gateway/src/budget';
import { LocalFlags } from '../../gateway/src/flags';
import { Notifier } from '../../gateway/src/notify';
import { relaySse, type RelayResult } from '../../gateway/src/sse';
import { sendBody } from '../../gateway/src/http-io';
import { responsesPassthrough } from '../../gateway/src/stream-transforms';

const root = join(import.meta.dirname, '..', '..');
let hot: FakeProvider;
let gw: TestGateway | undefined;
beforeEach(async () => {
  hot = await new FakeProvider().start();
});
const servers: Server[] = [];
afterEach(async () => {
  await gw?.close();
  gw = undefined;
  await hot.stop();
  for (const s of servers.splice(0)) {
    s.closeAllConnections();
    s.close();
  }
});

describe('a client that stops reading a stream', () => {
  it('ends the relay when it goes away while the gateway waits for it, and the call is metered CLIENT_CLOSED (estimated)', async () => {
    gw = await startGateway(mapOf([hot.url]));
    hot.always({ kind: 'stream', chunks: 4000, chunkBytes: 4096 });
    const body = JSON.stringify({ model: 'x', messages: [{ role: 'user', content: 'hi' }], stream: true });
    const req = request(`${gw.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' } });
    const res = await new Promise<import('node:http').IncomingMessage>((resolve) => {
      req.on('response', resolve);
      req.end(body);
    });
    await new Promise((r) => res.once('data', r));
    res.pause(); // reads nothing more: the gateway's socket fills up, then the provider's
    await until('the provider to be held back', () => hot.stalls > 0, 15_000);
    req.destroy();
    const event = await until('the meter event', async () => {
      await gw!.meter.flush();
      return gw!.events().find((e) => e.error_code === 'CLIENT_CLOSED|ESTIMATED');
    });
    expect(event).toMatchObject({ provider: 'openai', error_code: 'CLIENT_CLOSED|ESTIMATED' });
    expect(Number(event!.output_tokens)).toBeGreaterThan(1000); // at least the first 4 KiB chunk's text
    expect(gw.gateway.path.failover.routes[0].breaker.state()).toBe('closed');
  });
});

describe('a client that reads a large event slowly', () => {
  it('is not cut as one that stopped reading: the event goes out in pieces, each drained in turn', async () => {
    // A Responses event carrying an image is several MB: a client on a slow link takes longer than
    // the stall limit (here 1 s) to read it, though it reads all along. It was cut after the limit.
    const image = 'x'.repeat(32 * 1024 * 1024);
    const completed = { type: 'response.completed', sequence_number: 1, response: { id: 'resp_1', output: [{ result: image }] } };
    const last = `event: response.completed\ndata: ${JSON.stringify(completed)}\n\n`;
    const relayed = new Promise<RelayResult>((resolve) => {
      const server = createServer((req, res) => {
        req.resume();
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        const first = Buffer.from('event: response.created\ndata: {"type":"response.created","sequence_number":0}\n\n');
        const rest = (async function* () {
          yield Buffer.from(last);
        })();
        void relaySse(first, rest, res, responsesPassthrough(256 * 1024 * 1024), 1000).then(resolve);
      });
      servers.push(server);
      server.listen(0, '127.0.0.1', () => {
        const req = request({ port: (server.address() as AddressInfo).port, host: '127.0.0.1', method: 'POST' }, (res) => {
          res.pause();
          const received: Buffer[] = [];
          // 64 KiB every 10 ms: the event takes seconds to read, and its reader never stops.
          const reading = setInterval(() => {
            for (let n = 0, c: Buffer | null; n < 65536 && (c = res.read() as Buffer | null); n += c.length) received.push(c);
          }, 10);
          const done = () => {
            clearInterval(reading);
            got = Buffer.concat(received).toString();
          };
          res.on('end', done);
          res.on('aborted', done);
        });
        req.end();
      });
    });
    let got = '';
    expect(await relayed).toMatchObject({ broken: false });
    await until('the client to have read the stream', () => got !== '', 30_000);
    expect(got.endsWith(last)).toBe(true);
  });
});

describe('a whole answer to a client that stops reading', () => {
  /** A loopback server answering each request with `size` bytes through sendBody (stall limit `stallMs`). */
  function answering(size: number, stallMs: number, onClose: (finished: boolean) => void): Promise<number> {
    const body = Buffer.alloc(size, 'x');
    const server = createServer((req, res) => {
      req.resume();
      res.on('close', () => onClose(res.writableFinished));
      sendBody(res, 200, body, 'application/json', {}, stallMs);
    });
    servers.push(server);
    return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve((server.address() as AddressInfo).port)));
  }

  it('is cut after the stall limit, not held in memory for as long as the client keeps the connection', async () => {
    let cut: boolean | null = null;
    const port = await answering(20 * 1024 * 1024, 500, (finished) => (cut = !finished));
    const req = request({ port, host: '127.0.0.1', method: 'POST' }, (res) => res.pause()); // reads nothing, ever
    req.on('error', () => {});
    req.end();
    // Before: the 20 MB answer sat in the gateway's socket until the client hung up.
    await until('the answer to be cut', () => cut !== null, 15_000);
    expect(cut).toBe(true);
    req.destroy();
  });

  it('reaches a client that reads it slowly but all along, whole', async () => {
    let finished = false;
    const size = 16 * 1024 * 1024;
    const port = await answering(size, 1000, (f) => (finished = f));
    let got = 0;
    const req = request({ port, host: '127.0.0.1', method: 'POST' }, (res) => {
      res.pause();
      // 64 KiB every 10 ms: seconds to read, longer than the stall limit, and never a stop.
      const reading = setInterval(() => {
        for (let n = 0, c: Buffer | null; n < 65536 && (c = res.read() as Buffer | null); n += c.length) got += c.length;
      }, 10);
      res.on('close', () => clearInterval(reading));
    });
    req.end();
    await until('the answer to be read', () => got === size && finished, 30_000);
  });
});

describe('a client that hangs up before its call starts', () => {
  it('while its Idempotency-Key is claimed: no provider call is made, and the request counts as client_closed', async () => {
    let claimed!: () => void;
    const claiming = new Promise<void>((r) => (claimed = r));
    let release!: () => void;
    const released = new Promise<void>((r) => (release = r));
    const store = new MemoryReplayStore();
    const claim = store.claim.bind(store);
    store.claim = async (...args) => {
      claimed();
      await released; // a replay store slow to answer (a Redis round trip)
      return claim(...args);
    };
    gw = await startGateway(mapOf([hot.url]), { replay: { store } });
    const socketClosed = new Promise<void>((r) => gw!.server.once('connection', (s) => s.once('close', r)));
    const headers = { 'content-type': 'application/json', 'idempotency-key': 'gone-early' };
    const req = request(`${gw.url}/v1/chat/completions`, { method: 'POST', headers });
    req.on('error', () => {});
    req.end(JSON.stringify({ model: 'x', messages: [{ role: 'user', content: 'hi' }] }));
    await claiming;
    req.destroy();
    await socketClosed;
    release();
    expect(await gw.gateway.path.pipeline.idle(10_000)).toBe(true);
    expect(hot.received).toHaveLength(0);
    const metrics = await (await fetch(`${gw.url}/metrics`, { headers: { authorization: `Bearer ${ADMIN}` } })).text();
    expect(metrics).toContain('gateway_requests_total{tier="none",status="client_closed"} 1');
  });
});

describe('a client that hangs up while its limits are read', () => {
  it('is not queued when a spend cap would queue it for a person: no job, no notice, counted client_closed', async () => {
    let admitting!: () => void;
    const asked = new Promise<void>((r) => (admitting = r));
    let release!: () => void;
    const released = new Promise<void>((r) => (release = r));
    const admit = async () => {
      admitting();
      await released; // the limits' Redis round trip
      return { kind: 'queue', delayMs: 60_000, reviewRequired: true, decision: 'human_review' } as const;
    };
    const map = mapOf([hot.url]);
    const flags = new LocalFlags(map.flags);
    const queue = new MemoryColdQueue();
    const quiet = { info: () => {}, warn: () => {}, error: () => {} };
    const notifier = new Notifier([], { log: quiet });
    const cold = coldFallback({
      queue,
      pause: new MemoryPause(),
      flags,
      notifier,
      cappedProvider: 'openai',
      pauseAtPercent: 80,
      providers: () => ['openai'],
      log: quiet,
    });
    gw = await startGateway(map, { admit, cold, flags });
    const socketClosed = new Promise<void>((r) => gw!.server.once('connection', (s) => s.once('close', r)));
    const req = request(`${gw.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' } });
    req.on('error', () => {});
    req.end(JSON.stringify({ model: 'x', messages: [{ role: 'user', content: 'hi' }] }));
    await asked;
    req.destroy();
    await socketClosed;
    release();
    expect(await gw.gateway.path.pipeline.idle(10_000)).toBe(true);
    await notifier.close();
    expect(await queue.counts()).toMatchObject({ waiting: 0, delayed: 0, active: 0 });
    const metrics = await (await fetch(`${gw.url}/metrics`, { headers: { authorization: `Bearer ${ADMIN}` } })).text();
    expect(metrics).toContain('gateway_requests_total{tier="none",status="client_closed"} 1');
  });
});

describe('a client that reads slowly', () => {
  it('holds the provider back while it does not read, then gets the whole stream, in order, once it reads again', async () => {
    gw = await startGateway(mapOf([hot.url]));
    const chunks = 4000;
    const pad = 'x'.repeat(4096);
    hot.always({ kind: 'stream', chunks, chunkBytes: pad.length });
    const body = JSON.stringify({
      model: 'x',
      messages: [{ role: 'user', content: 'hi' }],
      stream: true,
      stream_options: { include_usage: true },
    });
    const req = request(`${gw.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' } });
    const res = await new Promise<import('node:http').IncomingMessage>((resolve) => {
      req.on('response', resolve);
      req.end(body);
    });
    const received: Buffer[] = [];
    res.on('data', (c: Buffer) => received.push(c));
    res.pause();
    await until('the provider to be held back', () => hot.stalls > 0, 15_000);
    const ended = new Promise((r) => res.on('end', r));
    res.resume();
    await ended;
    const events = Buffer.concat(received).toString('utf8').split('\n\n').filter(Boolean);
    expect(events.at(-1)).toBe('data: [DONE]');
    const parsed = events.slice(0, -1).map((e) => JSON.parse(e.slice('data: '.length)));
    const text = parsed.map((e) => e.choices[0]?.delta.content ?? '').join('');
    const expected = Array.from({ length: chunks }, (_, i) => (i === 0 ? `part0${pad}` : ` part${i}${pad}`)).join('');
    expect(text === expected).toBe(true); // 16 MB: compared whole, not printed
    expect(parsed.at(-1).usage).toMatchObject({ completion_tokens: chunks });
    const event = await until('the meter event', async () => {
      await gw!.meter.flush();
      return gw!.events()[0];
    });
    expect(event).toMatchObject({ provider: 'openai', error_code: '', output_tokens: String(chunks) });
  });
});

describe('a provider that answers a streamed request with a whole answer', () => {
  it('counts it as a failure of that route and streams from the next one, without retrying the first', async () => {
    const warm = await new FakeProvider().start();
    try {
      gw = await startGateway(mapOf([hot.url], [warm.url]));
      hot.always({ kind: 'ok', content: 'a whole answer' }); // 200 application/json to stream: true
      warm.always({ kind: 'stream', chunks: 3 });
      const res = await chat(gw.url, { model: 'x', messages: [{ role: 'user', content: 'hi' }], stream: true });
      expect(res.status).toBe(200);
      expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
      expect(res.headers.get('x-route-tier')).toBe('warm');
      const events = res.text.split('\n\n').filter(Boolean);
      expect(events.at(-1)).toBe('data: [DONE]');
      const text = events
        .slice(0, -1)
        .map((e) => JSON.parse(e.slice('data: '.length)).choices[0]?.delta.content ?? '')
        .join('');
      expect(text).toBe('part0 part1 part2');
      expect(hot.received).toHaveLength(1);
      const failed = await until("the failed call's meter event", async () => {
        await gw!.meter.flush();
        return gw!.events().find((e) => e.provider === 'openai');
      });
      // The provider billed that whole answer: its usage is in the event.
      expect(failed).toMatchObject({ error_code: 'NOT_A_STREAM', input_tokens: '12', output_tokens: '5' });
      const listed = calcPrice({ input_tokens: 12, output_tokens: 5 }, 'gpt-4o-mini', { providerId: 'openai' })!;
      expect(listed.total_price).toBeGreaterThan(0);
      expect(Number(failed?.cost_usd)).toBe(listed.total_price);
    } finally {
      await warm.stop();
    }
  });
});

describe('caller text in response headers', () => {
  it('a model name that is not a valid header value still gets its 202 when queued, the name percent-encoded', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'faults-'));
    const routes = join(dir, 'routes.json');
    const dead = await refusedUrl();
    writeOneRouteMap(routes, dead);
    const app = await listenStack({ ROUTES_FILE: routes, METER_CSV_FILE: join(dir, 'e.csv'), SCOPES_FILE: join(dir, 'none.yaml') });
    try {
      for (const model of ['gpt-4o-mini-🤖', 'evil\r\nset-cookie: x=1']) {
        const res = await chat(app.url, { model, messages: [{ role: 'user', content: `hi ${model}` }] });
        expect(res.status).toBe(202);
        expect(res.json()).toMatchObject({ status: 'queued' });
        expect(res.headers.get('x-route-model')).toBe(encodeURIComponent(model));
        expect(res.headers.get('set-cookie')).toBeNull();
      }
    } finally {
      await app.stop();
    }
  });
});

describe('SIGTERM', () => {
  /** A real gateway process (gateway/dist/main.js) on a routing map with `hot` as its one route, writing its events to a CSV. */
  async function spawnGateway(env: Record<string, string> = {}) {
    const dir = mkdtempSync(join(tmpdir(), 'sigterm-'));
    const routes = join(dir, 'routes.json');
    const csv = join(dir, 'e.csv');
    writeOneRouteMap(routes, hot.url);
    const child = spawn(process.execPath, [join(root, 'gateway/dist/main.js')], {
      cwd: root,
      env: {
        PATH: process.env.PATH,
        PORT: '0',
        ROUTES_FILE: routes,
        METER_CSV_FILE: csv,
        WORKER: 'off',
        SCOPES_FILE: join(dir, 'none.yaml'),
        ...env,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    const exited = new Promise<number | null>((r) => child.on('exit', r));
    const port = await until('the gateway to listen', () => /listening on :(\d+)/.exec(out)?.[1], 10_000);
    /** The CSV's events, each as field → value. */
    const events = () => {
      if (!existsSync(csv)) return [];
      const [header, ...lines] = readFileSync(csv, 'utf8').trim().split('\n');
      const fields = header.split(',');
      return lines.map((l) => Object.fromEntries(l.split(',').map((v, i) => [fields[i], v])));
    };
    return { child, exited, url: `http://127.0.0.1:${port}`, csv, events, log: () => out };
  }

  it('lets the call in flight finish, writes its meter event, then exits 0', async () => {
    hot.always({ kind: 'ok', delayMs: 1500, content: 'finished in time' });
    const g = await spawnGateway();
    const answer = chat(g.url);
    await until('the provider to get the call', () => hot.received.length === 1);
    g.child.kill('SIGTERM');
    const res = await answer;
    expect(res.status).toBe(200);
    expect(res.text).toContain('finished in time');
    expect(await g.exited).toBe(0);
    expect(existsSync(g.csv)).toBe(true);
    const lines = readFileSync(g.csv, 'utf8').trim().split('\n');
    expect(lines).toHaveLength(2); // header + the call
  });

  // A keep-alive client (a load balancer's upstream pool, an SDK's agent) queues its next request
  // behind the one in flight; told to close, it sends that one on a new connection, which the
  // stopped listener refuses before anything is sent (safe to send elsewhere), instead of on the
  // old one, cut with the request on it.
  it('tells a keep-alive client whose request was in flight to close: its next request is refused at connect, not cut', async () => {
    hot.always({ kind: 'ok', delayMs: 800, content: 'finished in time' });
    const g = await spawnGateway();
    const pool = new Agent({ connections: 1 });
    const send = () =>
      undiciRequest(`${g.url}/v1/chat/completions`, {
        dispatcher: pool,
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'x', messages: [{ role: 'user', content: 'hi' }] }),
      });
    try {
      const first = send();
      const queued = send().catch((error: Error & { code?: string }) => error);
      await until('the provider to get the call', () => hot.received.length === 1);
      g.child.kill('SIGTERM');
      const answered = await first;
      expect([answered.statusCode, answered.headers.connection]).toEqual([200, 'close']);
      expect(await answered.body.text()).toContain('finished in time');
      expect(await queued).toMatchObject({ code: 'ECONNREFUSED' });
      expect(await g.exited).toBe(0);
      expect(hot.received).toHaveLength(1);
    } finally {
      await pool.close();
    }
  });

  it('with client keys, a call whose client waited for 100 Continue (as curl sends a large body) finishes too', async () => {
    hot.always({ kind: 'ok', delayMs: 1500, content: 'finished in time' });
    const keys = { CLIENT_KEYS_FILE: join(mkdtempSync(join(tmpdir(), 'sigterm-keys-')), 'keys.json') };
    const output: string[] = [];
    expect(
      await keysCli(
        ['create', 'acme'],
        keys,
        (l) => output.push(l),
        () => {},
      ),
    ).toBe(0);
    const g = await spawnGateway({ ...keys, GATEWAY_AUTH: 'keys' });
    const body = JSON.stringify({ model: 'x', messages: [{ role: 'user', content: 'hi' }] });
    const headers = { 'content-type': 'application/json', authorization: `Bearer ${output.at(-1)}`, expect: '100-continue' };
    const req = request(`${g.url}/v1/chat/completions`, { method: 'POST', headers });
    req.on('continue', () => req.end(body));
    const answer = new Promise<{ status: number; text: string }>((resolve, reject) => {
      req.on('response', (res) => {
        let text = '';
        res.on('data', (d) => (text += d));
        res.on('end', () => resolve({ status: res.statusCode!, text }));
      });
      req.on('error', reject);
    });
    req.flushHeaders();
    await until('the provider to get the call', () => hot.received.length === 1);
    g.child.kill('SIGTERM');
    const res = await answer;
    expect(res.status).toBe(200);
    expect(res.text).toContain('finished in time');
    expect(await g.exited).toBe(0);
    expect(g.events()).toMatchObject([{ provider: 'openai', error_code: '' }]);
  });

  const npmDb = redisUnderPrefix('sigterm-npm');
  /** npm's process groups: children.ts kills a child's group only while the child runs, and npm may end before its gateway. */
  const npmGroups: number[] = [];
  afterEach(() => {
    for (const group of npmGroups.splice(0))
      try {
        process.kill(-group, 'SIGKILL');
      } catch {
        // none left
      }
  });
  /**
   * `npm start` or `npm run worker` with an environment of files in a folder of its own; npm's output is the process's
   * (`--silent`: no npm lines). Spawned `detached`: its group, killed after the test, holds the gateway
   * however npm ends.
   */
  function npmRun(args: string[], more: Record<string, string> = {}) {
    const dir = mkdtempSync(join(tmpdir(), 'sigterm-npm-'));
    const routes = join(dir, 'routes.json');
    writeOneRouteMap(routes, hot.url);
    const files = { ROUTES_FILE: routes, METER_CSV_FILE: join(dir, 'e.csv'), SCOPES_FILE: join(dir, 'none.yaml') };
    const env = { PATH: process.env.PATH, PORT: '0', WORKER: 'off', METER_SPOOL_DIR: join(dir, 'spool'), ...files, ...more };
    const npm = spawn('npm', [...args, '--silent'], { cwd: root, env, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    npmGroups.push(npm.pid!);
    let out = '';
    npm.stdout.on('data', (d) => (out += d));
    const exited = new Promise<number | null>((r) => npm.on('exit', r));
    /** SIGTERM to npm's own process (not its group), as systemd, Docker or Kubernetes send it to the command they started. */
    const stop = () => process.kill(npm.pid!, 'SIGTERM');
    /** Whether a process of npm's group still runs: the gateway or worker, orphaned when npm ended before it. */
    const orphan = () => {
      try {
        process.kill(-npm.pid!, 0);
        return true;
      } catch {
        return false;
      }
    };
    return { exited, stop, orphan, log: () => out };
  }

  // npm runs a script through sh and passes SIGTERM to its child alone: dash (/bin/sh on Debian, and
  // in node's images) ended on it, and the gateway or worker ran on, orphaned, never told to stop.
  it('npm start: a SIGTERM to npm reaches the gateway, which finishes the call in flight and exits 0', async () => {
    hot.always({ kind: 'ok', delayMs: 1500, content: 'finished in time' });
    // --ignore-scripts: not prestart's build (the tests run on the built gateway); the script itself runs as ever.
    const g = npmRun(['start', '--ignore-scripts']);
    const port = await until('the gateway to listen', () => /listening on :(\d+)/.exec(g.log())?.[1], 10_000);
    const answer = chat(`http://127.0.0.1:${port}`);
    await until('the provider to get the call', () => hot.received.length === 1);
    g.stop();
    const res = await answer;
    expect([res.status, res.text]).toEqual([200, expect.stringContaining('finished in time')]);
    expect(await g.exited).toBe(0);
    expect(g.log()).toContain('shutting down');
    await until('no process of it left', () => !g.orphan(), 5000);
  });

  it('npm run worker: a SIGTERM to npm stops the worker, exit 0', async () => {
    // On the test run's Redis: a worker without one has nothing to wait for.
    const g = npmRun(['run', 'worker'], { QUEUE_STORE_URL: TEST_REDIS_URL, REDIS_PREFIX: npmDb.prefix });
    await until('the worker to run', () => g.log().includes('worker: running'), 30_000);
    g.stop();
    expect(await g.exited).toBe(0);
    expect(g.log()).toContain('worker stopping');
    await until('no process of it left', () => !g.orphan(), 5000);
  });

  // A terminal's Ctrl-C reaches the gateway twice under `npm start` (from the terminal and from npm).
  it.each(['SIGTERM', 'SIGINT'] as const)(
    'a %s during the stop does not cut it short: the call finishes, is metered, exit 0',
    async (second) => {
      hot.always({ kind: 'ok', delayMs: 1500, content: 'finished in time' });
      const g = await spawnGateway();
      const answer = chat(g.url);
      await until('the provider to get the call', () => hot.received.length === 1);
      g.child.kill('SIGTERM');
      await until('the stop to begin', () => g.log().includes('shutting down'));
      g.child.kill(second);
      const res = await answer;
      expect(res.status).toBe(200);
      expect(res.text).toContain('finished in time');
      expect(await g.exited).toBe(0);
      expect(g.events()).toMatchObject([{ provider: 'openai', error_code: '' }]);
    },
  );

  // A call still running when the grace period ends is cut; the provider was called, so it is metered.
  it.each([
    // A stream cut before the provider's usage, or a whole answer the provider was generating, is
    // metered with an estimate (cut-stream-metering.test.ts).
    ['a stream', { kind: 'stream', chunks: 50, delayMs: 100 } as const, true, 'CLIENT_CLOSED|ESTIMATED'],
    ['a whole answer', { kind: 'ok', delayMs: 5000 } as const, false, 'CLIENT_CLOSED|ESTIMATED'],
  ])('meters %s cut at the end of the grace period, then exits 0', async (_, behaviour, stream, code) => {
    hot.always(behaviour); // 5 s: longer than the grace period
    const g = await spawnGateway({ SHUTDOWN_GRACE_MS: '1000' });
    const res = fetch(`${g.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'x', messages: [{ role: 'user', content: 'hi' }], stream }),
    });
    let reading: Promise<unknown> = res;
    if (stream) {
      const reader = (await res).body!.getReader();
      await reader.read(); // the relay has started
      reading = (async () => {
        while (!(await reader.read()).done);
      })();
    } else await until('the provider to get the call', () => hot.received.length === 1);
    g.child.kill('SIGTERM');
    await reading.catch(() => {}); // cut by the gateway
    expect(await g.exited).toBe(0);
    expect(g.log()).toContain('were cut');
    expect(g.events()).toMatchObject([{ provider: 'openai', error_code: code }]);
  });

  it('a stream cut at the end of the grace period ends with an error event saying why, not a dropped connection', async () => {
    hot.always({ kind: 'stream', chunks: 50, delayMs: 100 }); // 5 s: longer than the grace period
    const g = await spawnGateway({ SHUTDOWN_GRACE_MS: '500' });
    const res = await fetch(`${g.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'x', messages: [{ role: 'user', content: 'hi' }], stream: true }),
    });
    const reader = res.body!.getReader();
    await reader.read(); // the relay has started
    g.child.kill('SIGTERM');
    // Read to its end: a connection dropped mid-stream rejects here instead.
    let text = '';
    for (let r = await reader.read(); !r.done; r = await reader.read()) text += Buffer.from(r.value).toString('utf8');
    const last = text.trim().split('\n\n').at(-1)!;
    expect(JSON.parse(last.replace(/^data: /, ''))).toMatchObject({
      error: { code: 'stream_interrupted', message: expect.stringContaining('shutting down') },
    });
    expect(await g.exited).toBe(0);
    expect(g.events()).toMatchObject([{ provider: 'openai', error_code: 'CLIENT_CLOSED|ESTIMATED' }]);
  });
});

describe('a provider that reports an error in a 200 answer (OpenRouter, once generation began)', () => {
  it('is a failure of the route: the request is answered by the next route, the call metered PROVIDER_ERROR with its usage', async () => {
    const warm = await new FakeProvider().start();
    try {
      gw = await startGateway(mapOf([hot.url], [warm.url]));
      const error = { message: 'Provider returned error', code: 502 };
      const usage = { prompt_tokens: 9, completion_tokens: 3, total_tokens: 12 };
      hot.always({ kind: 'status', status: 200, body: { id: 'gen-1', object: 'chat.completion', choices: [], error, usage } });
      const res = await chat(gw.url);
      expect(res.status).toBe(200);
      expect(res.headers.get('x-route-tier')).toBe('warm');
      expect(res.json().choices[0].message.content).toBeTruthy();
      const event = await until('the failed call metered', async () => {
        await gw!.meter.flush();
        return gw!.events().find((e) => e.error_code === 'PROVIDER_ERROR');
      });
      expect(event).toMatchObject({ provider: 'openai', input_tokens: '9', output_tokens: '3' });
      expect(gw.gateway.path.failover.routes[0].health.lastTwenty()).toContain(0); // scored as a failure
    } finally {
      await warm.stop();
    }
  });

  it('one sent after a byte-order mark (JSON all the same, as the client reads it) is a failure of the route too', async () => {
    gw = await startGateway(mapOf([hot.url]));
    const error = { message: 'Provider returned error', code: 502 };
    const failed = `\uFEFF${JSON.stringify({ id: 'gen-1', object: 'chat.completion', choices: [], error })}`;
    hot.next({ kind: 'raw-stream', type: 'application/json', pieces: [Buffer.from(failed)] });
    const res = await chat(gw.url);
    expect(res.status).toBe(200);
    expect(res.json().choices[0].message.content).toBeTruthy();
    expect(hot.received.length).toBe(2); // the failed try, then the answer
  });

  it('a choice that finished with "error" counts the same; an answer that merely says the word does not', async () => {
    gw = await startGateway(mapOf([hot.url]));
    const message = { role: 'assistant', content: 'Hel' };
    hot.always({
      kind: 'status',
      status: 200,
      body: { object: 'chat.completion', choices: [{ index: 0, message: { role: 'assistant', content: 'error' }, finish_reason: 'stop' }] },
    });
    hot.next(
      { kind: 'status', status: 200, body: { object: 'chat.completion', choices: [{ index: 0, message, finish_reason: 'error' }] } },
      { kind: 'status', status: 200, body: { object: 'chat.completion', choices: [{ index: 0, message, finish_reason: 'error' }] } },
    );
    const res = await chat(gw.url);
    expect(res.status).toBe(200);
    expect(res.json().choices[0].message.content).toBe('error');
    expect(hot.received.length).toBe(3); // two failed tries, then the answer
  });

  it('a choice its engine aborted (vLLM\'s finish_reason "abort") counts the same: the cut answer is tried again', async () => {
    gw = await startGateway(mapOf([hot.url]));
    const message = { role: 'assistant', content: 'Hel' };
    hot.next({
      kind: 'status',
      status: 200,
      body: { object: 'chat.completion', choices: [{ index: 0, message, finish_reason: 'abort' }] },
    });
    const res = await chat(gw.url);
    expect(res.status).toBe(200);
    expect(res.json().choices[0].finish_reason).not.toBe('abort');
    expect(hot.received.length).toBe(2); // the aborted try, then the answer
  });
});

describe('a 200 answer that is not JSON (a proxy or captive page, an empty body)', () => {
  it.each([
    ['an HTML page', 'text/html', '<html><body>Service temporarily unavailable</body></html>'],
    ['an empty body', 'application/json', ''],
  ])('%s is a failure of the route: not retried there, answered by the next route, metered NOT_JSON', async (_, type, page) => {
    const warm = await new FakeProvider().start();
    try {
      gw = await startGateway(mapOf([hot.url], [warm.url]));
      hot.always({ kind: 'raw-stream', pieces: [Buffer.from(page)], type });
      const res = await chat(gw.url);
      expect(res.status).toBe(200);
      expect(res.headers.get('x-route-tier')).toBe('warm');
      expect(res.json().choices[0].message.content).toBeTruthy();
      expect(hot.received.length).toBe(1); // it would answer the same way
      const event = await until('the failed call metered', async () => {
        await gw!.meter.flush();
        return gw!.events().find((e) => e.error_code === 'NOT_JSON');
      });
      expect(event).toMatchObject({ provider: 'openai' });
      expect(gw.gateway.path.failover.routes[0].health.lastTwenty()).toContain(0);
    } finally {
      await warm.stop();
    }
  });

  it('a JSON answer with a byte-order mark or leading white space is an answer', async () => {
    gw = await startGateway(mapOf([hot.url]));
    const body = {
      object: 'chat.completion',
      choices: [{ index: 0, message: { role: 'assistant', content: 'fine' }, finish_reason: 'stop' }],
    };
    hot.next({ kind: 'raw-stream', pieces: [Buffer.from(`\uFEFF\n  ${JSON.stringify(body)}`)], type: 'application/json' });
    const res = await chat(gw.url);
    expect(res.status).toBe(200);
    expect(JSON.parse(res.text.replace(/^\uFEFF/, '')).choices[0].message.content).toBe('fine');
  });
});

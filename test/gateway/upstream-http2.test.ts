// HTTP/2 to providers (UPSTREAM_HTTP2=on): the built gateway streams many completions at once from a
// provider that speaks HTTP/2 over TLS (ALPN), as the hosted providers do, on few connections. The
// provider is node:http2 on loopback with a certificate made for the test, which the gateway trusts
// through NODE_EXTRA_CA_CERTS (no verification is switched off).
import { spawnSync, type ChildProcess } from 'node:child_process';
import { spawn } from '../children';
import { existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { request, type IncomingMessage } from 'node:http';
import { createServer as createHttpsServer, type Server as HttpsServer } from 'node:https';
import {
  constants,
  createSecureServer,
  type Http2SecureServer,
  type Http2ServerRequest,
  type Http2ServerResponse,
  type ServerHttp2Session,
  type Settings,
} from 'node:http2';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { writeFileSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { until } from './instances';

const root = join(import.meta.dirname, '..', '..');
const dir = mkdtempSync(join(tmpdir(), 'h2-'));
const hasOpenssl =
  spawnSync('openssl', [
    'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '1',
    '-keyout', join(dir, 'key.pem'), '-out', join(dir, 'cert.pem'), '-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1',
  ]).status === 0; // prettier-ignore

/** A streaming provider over TLS that speaks HTTP/2 (and HTTP/1.1 to a client that asks for it). */
class TlsProvider {
  versions: string[] = [];
  connections = 0;
  /** Since when the last stream's writes have waited for its reader (the gateway); null while it reads. */
  heldSince: number | null = null;
  private server!: Http2SecureServer;
  url = '';
  /** `heavy`: 4,000 chunks of 4 KB each, as fast as the reader takes them, then a usage chunk. */
  constructor(private readonly heavy = false) {}
  async start(): Promise<this> {
    const tls = { key: readFileSync(join(dir, 'key.pem')), cert: readFileSync(join(dir, 'cert.pem')) };
    this.server = createSecureServer({ ...tls, allowHTTP1: true }, (req, res) => this.handle(req, res));
    this.server.on('secureConnection', () => this.connections++);
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    this.url = `https://127.0.0.1:${(this.server.address() as AddressInfo).port}/v1`;
    return this;
  }
  private handle(req: Http2ServerRequest, res: Http2ServerResponse) {
    this.versions.push(req.httpVersion);
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      if (this.heavy) return void this.heavyStream(res);
      const chunk = (i: number) => ({
        id: 'c',
        object: 'chat.completion.chunk',
        created: 1,
        model: 'gpt-4o-mini',
        choices: [{ index: 0, delta: { content: `p${i} ` } }],
      });
      let i = 0;
      const timer = setInterval(() => {
        if (i < 5) return void res.write(`data: ${JSON.stringify(chunk(i++))}\n\n`);
        clearInterval(timer);
        res.end('data: [DONE]\n\n');
      }, 10);
    });
  }
  private async heavyStream(res: Http2ServerResponse) {
    const pad = 'x'.repeat(4096);
    const event = (value: object) =>
      `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'm', ...value })}\n\n`;
    for (let i = 0; i < 4000; i++) {
      if (res.write(event({ choices: [{ index: 0, delta: { content: `p${i}${pad}` } }] }))) continue;
      this.heldSince = Date.now();
      await new Promise((r) => res.once('drain', r));
      this.heldSince = null;
    }
    res.write(event({ choices: [], usage: { prompt_tokens: 9, completion_tokens: 4000 } }));
    res.end('data: [DONE]\n\n');
  }
  stop() {
    return new Promise<void>((r) => this.server.close(() => r()));
  }
}

/**
 * A streaming provider over TLS that speaks HTTP/1.1 only (no `h2` in ALPN), as some self-hosted
 * servers behind TLS do. Each request's socket is recorded; a stream marked `hold` sends its first
 * event and waits until the next request has arrived before it ends.
 */
class Http1TlsProvider {
  sockets: number[] = [];
  private server!: HttpsServer;
  private held: Array<() => void> = [];
  url = '';
  async start(): Promise<this> {
    const tls = { key: readFileSync(join(dir, 'key.pem')), cert: readFileSync(join(dir, 'cert.pem')) };
    this.server = createHttpsServer(tls, (req, res) => {
      this.sockets.push(req.socket.remotePort!);
      for (const release of this.held.splice(0)) release();
      let body = '';
      req.on('data', (d) => (body += d));
      req.on('end', () => {
        const event = (content: string) =>
          `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [{ index: 0, delta: { content } }] })}\n\n`;
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write(event('first '));
        const end = () => res.end(`${event('last')}data: [DONE]\n\n`);
        if (body.includes('"hold"')) this.held.push(end);
        else end();
      });
    });
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    this.url = `https://127.0.0.1:${(this.server.address() as AddressInfo).port}/v1`;
    return this;
  }
  stop() {
    this.server.closeAllConnections();
    return new Promise<void>((r) => this.server.close(() => r()));
  }
}

/**
 * An HTTP/2 provider that holds every answer on its first connection (on every one with `holdAll`)
 * after its first event (a whole answer before its headers) until `release`, and answers on any
 * later connection at once: chat completions as an event stream or whole, and a Responses event
 * stream. `settings`: the HTTP/2 settings it announces.
 */
class HoldingProvider {
  constructor(
    private readonly settings: Settings = {},
    private readonly holdAll = false,
  ) {}
  sessions: ServerHttp2Session[] = [];
  /** The connection (its index in `sessions`) each request came on. */
  arrivals: number[] = [];
  lastStream = 0;
  private held: Array<() => void> = [];
  private server!: Http2SecureServer;
  url = '';
  get holding() {
    return this.held.length;
  }
  async start(): Promise<this> {
    const tls = { key: readFileSync(join(dir, 'key.pem')), cert: readFileSync(join(dir, 'cert.pem')) };
    this.server = createSecureServer({ ...tls, settings: this.settings }, (req, res) => this.handle(req, res));
    this.server.on('session', (session) => this.sessions.push(session));
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    this.url = `https://127.0.0.1:${(this.server.address() as AddressInfo).port}/v1`;
    return this;
  }
  release() {
    for (const end of this.held.splice(0)) end();
  }
  private handle(req: Http2ServerRequest, res: Http2ServerResponse) {
    const on = this.sessions.indexOf(req.stream.session as ServerHttp2Session);
    this.arrivals.push(on);
    this.lastStream = Math.max(this.lastStream, req.stream.id ?? 0);
    let body = '';
    req.on('data', (d) => (body += d));
    req.on('end', () => {
      const stream = (JSON.parse(body) as { stream?: boolean }).stream === true;
      const [first, last] = req.url.endsWith('/responses') ? responsesEvents() : chatEvents();
      const hold = (end: () => void) => (on === 0 || this.holdAll ? this.held.push(end) : end());
      if (!stream) {
        return hold(() => {
          res.writeHead(200, { 'content-type': 'application/json' });
          res.end(JSON.stringify(whole));
        });
      }
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(first);
      hold(() => res.end(last));
    });
  }
  stop() {
    for (const session of this.sessions) session.destroy();
    return new Promise<void>((r) => this.server.close(() => r()));
  }
}

/**
 * An HTTP/2 provider that refuses its first `refuse` streams (RST_STREAM REFUSED_STREAM: taken for
 * nothing, as a server refuses streams past its limit or after its GOAWAY), then streams every answer.
 */
class RefusingProvider {
  /** `afterHeaders`: each refused stream first gets its headers (200) and part of its first event. */
  constructor(
    private refuse: number,
    private readonly afterHeaders = false,
  ) {}
  refused = 0;
  answered = 0;
  private server!: Http2SecureServer;
  url = '';
  async start(): Promise<this> {
    const tls = { key: readFileSync(join(dir, 'key.pem')), cert: readFileSync(join(dir, 'cert.pem')) };
    this.server = createSecureServer(tls, (req, res) => {
      if (this.refused < this.refuse) {
        this.refused++;
        if (!this.afterHeaders) return void req.stream.close(constants.NGHTTP2_REFUSED_STREAM);
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        return void res.write('data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"fir', () =>
          req.stream.close(constants.NGHTTP2_REFUSED_STREAM),
        );
      }
      this.answered++;
      req.resume();
      req.on('end', () => {
        const [first, last] = chatEvents();
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.end(first + last);
      });
    });
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    this.url = `https://127.0.0.1:${(this.server.address() as AddressInfo).port}/v1`;
    return this;
  }
  stop() {
    return new Promise<void>((r) => this.server.close(() => r()));
  }
}

/** An HTTP/2 provider that closes each connection gracefully once it has answered on it (GOAWAY NO_ERROR), as a load balancer rotating its connections. */
class RotatingProvider {
  sessions: ServerHttp2Session[] = [];
  private server!: Http2SecureServer;
  url = '';
  async start(): Promise<this> {
    const tls = { key: readFileSync(join(dir, 'key.pem')), cert: readFileSync(join(dir, 'cert.pem')) };
    this.server = createSecureServer(tls, (req, res) => {
      req.resume();
      req.on('end', () => {
        const [first, last] = chatEvents();
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.end(first + last, () => req.stream.session?.goaway(constants.NGHTTP2_NO_ERROR, req.stream.id));
      });
    });
    this.server.on('session', (session) => this.sessions.push(session));
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    this.url = `https://127.0.0.1:${(this.server.address() as AddressInfo).port}/v1`;
    return this;
  }
  stop() {
    for (const session of this.sessions) session.destroy();
    return new Promise<void>((r) => this.server.close(() => r()));
  }
}

const whole = {
  id: 'c',
  object: 'chat.completion',
  created: 1,
  model: 'gpt-4o-mini',
  choices: [{ index: 0, message: { role: 'assistant', content: 'whole answer' }, finish_reason: 'stop' }],
  usage: { prompt_tokens: 9, completion_tokens: 2, total_tokens: 11 },
};

/** A chat completion stream's first event, and the rest of it. */
function chatEvents(): [string, string] {
  const event = (value: object) =>
    `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'gpt-4o-mini', ...value })}\n\n`;
  return [
    event({ choices: [{ index: 0, delta: { content: 'first ' } }] }),
    `${event({ choices: [{ index: 0, delta: { content: 'last' }, finish_reason: 'stop' }] })}${event({ choices: [], usage: { prompt_tokens: 9, completion_tokens: 2 } })}data: [DONE]\n\n`,
  ];
}

/** A Responses stream's first event, and the rest of it. */
function responsesEvents(): [string, string] {
  const message = {
    id: 'msg_1',
    type: 'message',
    role: 'assistant',
    status: 'completed',
    content: [{ type: 'output_text', text: 'hi', annotations: [] }],
  };
  const response = { id: 'resp_1', object: 'response', created_at: 1, status: 'completed', model: 'gpt-4o-mini', output: [message] };
  const usage = { input_tokens: 9, output_tokens: 2, total_tokens: 11 };
  let seq = 0;
  const event = (type: string, fields: object) =>
    `event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: seq++, ...fields })}\n\n`;
  return [
    event('response.created', { response: { ...response, status: 'in_progress', output: [] } }),
    event('response.output_text.delta', { item_id: 'msg_1', output_index: 0, content_index: 0, delta: 'hi' }) +
      event('response.completed', { response: { ...response, usage } }),
  ];
}

let child: ChildProcess | null = null;
let provider: TlsProvider | Http1TlsProvider | HoldingProvider | RefusingProvider | RotatingProvider | null = null;
afterEach(async () => {
  child?.kill('SIGKILL');
  await provider?.stop();
  [child, provider] = [null, null];
});

async function gatewayTo(p: { url: string }, http2: 'on' | 'off', name: string = http2, env: Record<string, string> = {}): Promise<string> {
  const routes = join(dir, `routes-${name}.json`);
  const cold = { mode: 'graceful_degrade', queue: 'ai-tasks', notify: [] };
  writeFileSync(routes, JSON.stringify({ hot: [{ provider: 'openai', model: 'gpt-4o-mini', baseUrl: p.url }], warm: [], cold }));
  child = spawn(process.execPath, [join(root, 'gateway/dist/main.js')], {
    cwd: root,
    env: {
      PATH: process.env.PATH,
      PORT: '0',
      ROUTES_FILE: routes,
      METER_CSV_FILE: join(dir, `events-${name}.csv`),
      SCOPES_FILE: join(dir, 'none.yaml'),
      WORKER: 'off',
      UPSTREAM_HTTP2: http2,
      NODE_EXTRA_CA_CERTS: join(dir, 'cert.pem'),
      ...env,
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let out = '';
  return new Promise((resolve, reject) => {
    child!.stdout!.on('data', (d) => {
      out += d;
      const port = /listening on :(\d+)/.exec(out)?.[1];
      if (port) resolve(`http://127.0.0.1:${port}`);
    });
    child!.on('exit', (code) => reject(new Error(`gateway exited ${code}: ${out}`)));
  });
}

async function streams(url: string, n: number): Promise<string[]> {
  const one = async () => {
    const res = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'gpt-4o-mini', stream: true, messages: [{ role: 'user', content: 'hi' }] }),
    });
    expect(res.status).toBe(200);
    return res.text();
  };
  return Promise.all(Array.from({ length: n }, one));
}

describe.skipIf(!hasOpenssl)('HTTP/2 to providers', () => {
  it('UPSTREAM_HTTP2=on: 100 concurrent streams go over HTTP/2 on one or two TLS connections, every one complete', async () => {
    provider = await new TlsProvider().start();
    const url = await gatewayTo(provider, 'on');
    await streams(url, 1); // the connection is made and its protocol known; then the burst
    const bodies = await streams(url, 100);
    expect(bodies.every((b) => b.includes('p4') && b.trimEnd().endsWith('data: [DONE]'))).toBe(true);
    expect(new Set(provider.versions)).toEqual(new Set(['2.0']));
    expect(provider.connections).toBeLessThanOrEqual(2);
  });

  it('UPSTREAM_HTTP2=on with a provider that answers in HTTP/1.1: a stream never waits behind another on its connection', async () => {
    const p = (provider = await new Http1TlsProvider().start());
    const url = await gatewayTo(p, 'on');
    await streams(url, 1); // the connection is made and its protocol (HTTP/1.1) known
    const ask = (user: string) =>
      fetch(`${url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'gpt-4o-mini', stream: true, messages: [{ role: 'user', content: user }] }),
      });
    const held = await ask('hold'); // streaming, kept open by the provider until the next request reaches it
    const reader = held.body!.getReader();
    expect(new TextDecoder().decode((await reader.read()).value)).toContain('first');
    const next = await ask('next');
    expect(await next.text()).toContain('data: [DONE]');
    let rest = '';
    for (let r = await reader.read(); !r.done; r = await reader.read()) rest += new TextDecoder().decode(r.value);
    expect(rest).toContain('data: [DONE]');
    // The held stream and the one after it on two connections: not pipelined behind each other.
    expect(p.sockets).toHaveLength(3);
    expect(p.sockets[2]).not.toBe(p.sockets[1]);
  }, 20_000);

  it('a provider closing its connection gracefully (GOAWAY, no error): the streams on it finish, new calls go on a new connection', async () => {
    const p = (provider = await new HoldingProvider().start());
    const url = await gatewayTo(p, 'on', 'goaway');
    const ask = (path: string, stream: boolean) =>
      fetch(`${url}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(
          path === '/v1/responses'
            ? { model: 'gpt-4o-mini', input: 'hi', stream }
            : { model: 'gpt-4o-mini', stream, messages: [{ role: 'user', content: 'hi' }] },
        ),
      }).then(async (res) => ({ status: res.status, text: await res.text() }));
    const warm = ask('/v1/chat/completions', true); // the connection is made and its protocol known
    await until('the first call held', () => p.holding === 1);
    p.release();
    await warm;
    const calls: Array<[string, boolean]> = [
      ['/v1/chat/completions', true],
      ['/v1/chat/completions', true],
      ['/v1/chat/completions', true],
      ['/v1/chat/completions', false],
      ['/v1/responses', true],
      ['/v1/responses', true],
    ];
    const open = calls.map(([path, stream]) => ask(path, stream));
    await until('six calls held on the connection', () => p.holding === 6);
    // GOAWAY NO_ERROR naming the last stream it has: those six it will finish. Answered PING: the
    // gateway has read the GOAWAY (a call it sent before would be refused, unprocessed, and retried).
    const session = p.sessions[0];
    session.goaway(constants.NGHTTP2_NO_ERROR, p.lastStream);
    await new Promise((resolve) => session.ping(resolve));
    // Calls made meanwhile are answered on a new connection, not failed, nor queued behind the six.
    const later = await Promise.all(calls.map(([path, stream]) => ask(path, stream)));
    expect(later.map(({ status }) => status)).toEqual(Array(6).fill(200));
    expect(p.arrivals.slice(7)).toHaveLength(6);
    expect(p.arrivals.slice(7)).not.toContain(0); // a burst may open more than one new connection
    p.release();
    const answers = [...(await Promise.all(open)), ...later];
    answers.forEach(({ status, text }, i) => {
      expect(status).toBe(200);
      const [path, stream] = calls[i % calls.length];
      if (!stream) expect(JSON.parse(text).choices[0].message.content).toBe('whole answer');
      else if (path === '/v1/responses') expect(text).toContain('response.completed');
      else expect(text.endsWith('data: [DONE]\n\n') && text.includes('last')).toBe(true);
    });
    // Metered as answered, every one: none interrupted, none the route's failure.
    const csv = join(dir, 'events-goaway.csv');
    const lines = (await until('13 meter events', () => {
      const read = existsSync(csv) ? readFileSync(csv, 'utf8').trim().split('\n') : [];
      return read.length === 14 && read;
    })) as string[];
    const errorCode = lines[0].split(',').indexOf('error_code');
    expect(lines.slice(1).map((row) => row.split(',')[errorCode])).toEqual(Array(13).fill(''));
  }, 20_000);

  it('a provider that allows few streams per connection (SETTINGS_MAX_CONCURRENT_STREAMS): more calls go on more connections, none waits for a stream to end', async () => {
    const p = (provider = await new HoldingProvider({ maxConcurrentStreams: 2 }, true).start());
    const url = await gatewayTo(p, 'on', 'few-streams');
    const ask = () =>
      fetch(`${url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'gpt-4o-mini', stream: true, messages: [{ role: 'user', content: 'hi' }] }),
      }).then((res) => res.text());
    const warm = ask(); // the connection is made, its protocol and its settings known
    await until('the first call held', () => p.holding === 1);
    p.release();
    await warm;
    // One at a time, so that each finds the connections as the calls before left them.
    const open: Array<Promise<string>> = [];
    for (let n = 1; n <= 6; n++) {
      open.push(ask());
      await until(`call ${n} at the provider, its stream held`, () => p.holding === n);
    }
    expect(p.sessions.length).toBeGreaterThanOrEqual(3); // two streams a connection at most
    p.release();
    for (const text of await Promise.all(open)) expect(text.endsWith('data: [DONE]\n\n')).toBe(true);
    const csv = join(dir, 'events-few-streams.csv');
    const lines = (await until('7 meter events', () => {
      const read = existsSync(csv) ? readFileSync(csv, 'utf8').trim().split('\n') : [];
      return read.length === 8 && read;
    })) as string[];
    const errorCode = lines[0].split(',').indexOf('error_code');
    expect(lines.slice(1).map((row) => row.split(',')[errorCode])).toEqual(Array(7).fill('')); // none refused
  }, 20_000);

  it('streams the provider refused (REFUSED_STREAM) are sent again: every client answered, none metered a failure, the breaker shut', async () => {
    const p = (provider = await new RefusingProvider(5).start());
    const url = await gatewayTo(p, 'on', 'refused');
    // Five at once, each refused once (five failures in a row would open the route's breaker).
    const bodies = await streams(url, 5);
    for (const text of bodies) expect(text.endsWith('data: [DONE]\n\n') && text.includes('last')).toBe(true);
    expect([p.refused, p.answered]).toEqual([5, 5]);
    expect(await streams(url, 1)).toHaveLength(1); // the route still taken (a 503 if its breaker had opened)
    const csv = join(dir, 'events-refused.csv');
    const lines = (await until('6 meter events', () => {
      const read = existsSync(csv) ? readFileSync(csv, 'utf8').trim().split('\n') : [];
      return read.length === 7 && read;
    })) as string[];
    const errorCode = lines[0].split(',').indexOf('error_code');
    expect(lines.slice(1).map((row) => row.split(',')[errorCode])).toEqual(Array(6).fill(''));
  }, 20_000);

  it('a stream refused after its answer began (REFUSED_STREAM past its headers) is a failed attempt, not sent again unseen', async () => {
    const p = (provider = await new RefusingProvider(1, true).start());
    const url = await gatewayTo(p, 'on', 'refused-late');
    const res = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'gpt-4o-mini', stream: true, messages: [{ role: 'user', content: 'hi' }] }),
    });
    expect(res.status).toBe(200);
    expect(await res.text()).toContain('data: [DONE]');
    // The provider answered the first (its headers, part of its text): that attempt failed, and the call was retried as one.
    expect(res.headers.get('x-route-attempts')).toBe('2');
    expect([p.refused, p.answered]).toEqual([1, 1]);
  }, 20_000);

  it('connections the provider closed gracefully leave the pool: with UPSTREAM_CONNECTIONS=1, every call after the first GOAWAY is still answered', async () => {
    const p = (provider = await new RotatingProvider().start());
    const url = await gatewayTo(p, 'on', 'rotating', { UPSTREAM_CONNECTIONS: '1' });
    for (let n = 1; n <= 4; n++) {
      const res = await fetch(`${url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'gpt-4o-mini', stream: true, messages: [{ role: 'user', content: 'hi' }] }),
        signal: AbortSignal.timeout(5000), // else it waits for its time-to-answer, then a 504
      });
      expect(res.status).toBe(200);
      expect((await res.text()).endsWith('data: [DONE]\n\n')).toBe(true);
    }
    expect(p.sessions).toHaveLength(4); // each call on a connection of its own, the one before it closed
  }, 20_000);

  it('calls waiting for a connection (UPSTREAM_CONNECTIONS reached, its streams all taken) go on a new one when the provider closes it gracefully', async () => {
    const p = (provider = await new HoldingProvider({ maxConcurrentStreams: 2 }).start());
    // A gateway in a process of its own, which says each call it hands to its pool of connections to the provider.
    const src = (file: string) => JSON.stringify(join(root, file));
    const code = `const { Pool } = await import('undici');
      const dispatch = Pool.prototype.dispatch;
      Pool.prototype.dispatch = function (...args) { const r = dispatch.apply(this, args); console.log('handed to the pool'); return r; };
      const { configureUpstream } = await import(${src('gateway/src/upstream.ts')});
      const { startGateway, mapOf } = await import(${src('test/gateway/harness.ts')});
      configureUpstream({ connections: 1, http2: true });
      const gw = await startGateway(mapOf([${JSON.stringify(p.url)}]));
      console.log(JSON.stringify({ url: gw.url }));`;
    child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', code], {
      env: { PATH: process.env.PATH, NODE_EXTRA_CA_CERTS: join(dir, 'cert.pem') },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    child.stdout!.on('data', (d) => (out += d));
    const handed = () => out.split('\n').filter((l) => l === 'handed to the pool').length;
    const line = await until('the gateway to listen', () => out.split('\n').find((l) => l.startsWith('{')), 15_000);
    const { url } = JSON.parse(line!) as { url: string };
    const ask = () =>
      fetch(`${url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-time-to-answer-ms': '5000' },
        body: JSON.stringify({ model: 'gpt-4o-mini', stream: true, messages: [{ role: 'user', content: 'hi' }] }),
      }).then(async (res) => ({ status: res.status, text: await res.text() }));
    const warm = ask(); // the connection is made, and the provider's limit of 2 streams known
    await until('the first call held', () => p.holding === 1);
    p.release();
    await warm;
    const open = [ask(), ask()]; // both streams of the only connection allowed
    await until('two calls held', () => p.holding === 2);
    const waiting = ask(); // waits for a connection
    await until('the third call handed to the pool', () => handed() === 4);
    const session = p.sessions[0];
    session.goaway(constants.NGHTTP2_NO_ERROR, p.lastStream);
    // Answered on a new connection while the two streams still run, not at its time-to-answer (a 504).
    const answered = await waiting;
    expect(answered.status).toBe(200);
    expect(answered.text.endsWith('data: [DONE]\n\n')).toBe(true);
    expect(p.holding).toBe(2);
    expect(p.arrivals).toEqual([0, 0, 0, 1]);
    p.release();
    for (const { status, text } of await Promise.all(open)) expect([status, text.endsWith('data: [DONE]\n\n')]).toEqual([200, true]);
  }, 20_000);

  it('UPSTREAM_HTTP2=off (the default): the same streams over HTTP/1.1, one at a time per connection', async () => {
    provider = await new TlsProvider().start();
    const url = await gatewayTo(provider, 'off');
    await streams(url, 1);
    const bodies = await streams(url, 100);
    expect(bodies.every((b) => b.includes('p4'))).toBe(true);
    expect(new Set(provider.versions)).toEqual(new Set(['1.1']));
    expect(provider.connections).toBeGreaterThan(2); // how many overlap depends on the machine's speed
  });
});

describe.skipIf(!hasOpenssl)('the idle limit on a provider stream', () => {
  const IDLE_MS = 300;
  /** A gateway in a process of its own (it must trust the test's certificate from its start), the idle limit IDLE_MS. */
  async function gatewayWithIdleLimit(p: TlsProvider, http2: boolean) {
    const src = (file: string) => JSON.stringify(join(root, file));
    const code = `const { configureUpstream } = await import(${src('gateway/src/upstream.ts')});
      const { startGateway, mapOf } = await import(${src('test/gateway/harness.ts')});
      configureUpstream({ connections: null, http2: ${http2}, idleMs: ${IDLE_MS} });
      const gw = await startGateway(mapOf([${JSON.stringify(p.url)}]));
      console.log(JSON.stringify({ url: gw.url, csv: gw.csv }));`;
    child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', code], {
      env: { PATH: process.env.PATH, NODE_EXTRA_CA_CERTS: join(dir, 'cert.pem') },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    child.stdout!.on('data', (d) => (out += d));
    const line = await until('the gateway to listen', () => out.split('\n').find((l) => l.startsWith('{')), 15_000);
    return JSON.parse(line!) as { url: string; csv: string };
  }

  it.each([
    ['HTTP/1.1', false],
    ['HTTP/2', true],
  ])(
    'over %s it does not run while our client reads nothing: the stream is whole, the route not blamed',
    async (_, http2) => {
      const p = (provider = await new TlsProvider(true).start());
      const gw = await gatewayWithIdleLimit(p, http2);
      const req = request(`${gw.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' } });
      const res = await new Promise<IncomingMessage>((resolve) => {
        req.on('response', resolve);
        req.end(JSON.stringify({ model: 'x', messages: [{ role: 'user', content: 'hi' }], stream: true }));
      });
      const received: Buffer[] = [];
      res.on('data', (c: Buffer) => received.push(c));
      res.pause(); // reads nothing: the gateway holds the provider back, for longer than the idle limit
      await until(
        'the provider held back for 3 idle limits',
        () => {
          const since = p.heldSince;
          return since !== null && Date.now() - since > 3 * IDLE_MS;
        },
        15_000,
      );
      const ended = new Promise((r) => res.on('end', r));
      res.resume();
      await ended;
      const text = Buffer.concat(received).toString('utf8');
      expect(text).not.toContain('stream_interrupted');
      expect(text.endsWith('data: [DONE]\n\n')).toBe(true);
      expect(text).toContain('p3999');
      const [header, ...rows] = readFileSync(gw.csv, 'utf8').trim().split('\n');
      const event = Object.fromEntries(header.split(',').map((k, i) => [k, rows[0].split(',')[i]]));
      expect(rows).toHaveLength(1);
      expect(event).toMatchObject({ error_code: '', input_tokens: '9', output_tokens: '4000' });
    },
    30_000,
  );
});

// HTTP/2 to providers (UPSTREAM_HTTP2=on): the built gateway streams many completions at once from a
// provider that speaks HTTP/2 over TLS (ALPN), as the hosted providers do, on few connections. The
// provider is node:http2 on loopback with a certificate made for the test, which the gateway trusts
// through NODE_EXTRA_CA_CERTS (no verification is switched off).
import { spawnSync, type ChildProcess } from 'node:child_process';
import { spawn } from '../children';
import { mkdtempSync, readFileSync } from 'node:fs';
import { request, type IncomingMessage } from 'node:http';
import { createServer as createHttpsServer, type Server as HttpsServer } from 'node:https';
import { createSecureServer, type Http2SecureServer, type Http2ServerRequest, type Http2ServerResponse } from 'node:http2';
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

let child: ChildProcess | null = null;
let provider: TlsProvider | Http1TlsProvider | null = null;
afterEach(async () => {
  child?.kill('SIGKILL');
  await provider?.stop();
  [child, provider] = [null, null];
});

async function gatewayTo(p: { url: string }, http2: 'on' | 'off'): Promise<string> {
  const routes = join(dir, `routes-${http2}.json`);
  const cold = { mode: 'graceful_degrade', queue: 'ai-tasks', notify: [] };
  writeFileSync(routes, JSON.stringify({ hot: [{ provider: 'openai', model: 'gpt-4o-mini', baseUrl: p.url }], warm: [], cold }));
  child = spawn(process.execPath, [join(root, 'gateway/dist/main.js')], {
    cwd: root,
    env: {
      PATH: process.env.PATH,
      PORT: '0',
      ROUTES_FILE: routes,
      METER_CSV_FILE: join(dir, `events-${http2}.csv`),
      SCOPES_FILE: join(dir, 'none.yaml'),
      WORKER: 'off',
      UPSTREAM_HTTP2: http2,
      NODE_EXTRA_CA_CERTS: join(dir, 'cert.pem'),
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

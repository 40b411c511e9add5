// HTTP/2 to providers (UPSTREAM_HTTP2=on): the built gateway streams many completions at once from a
// provider that speaks HTTP/2 over TLS (ALPN), as the hosted providers do, on few connections. The
// provider is node:http2 on loopback with a certificate made for the test, which the gateway trusts
// through NODE_EXTRA_CA_CERTS (no verification is switched off).
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { createSecureServer, type Http2SecureServer, type Http2ServerRequest, type Http2ServerResponse } from 'node:http2';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { writeFileSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';

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
  private server!: Http2SecureServer;
  url = '';
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
  stop() {
    return new Promise<void>((r) => this.server.close(() => r()));
  }
}

let child: ChildProcess | null = null;
let provider: TlsProvider | null = null;
afterEach(async () => {
  child?.kill('SIGKILL');
  await provider?.stop();
  [child, provider] = [null, null];
});

async function gatewayTo(p: TlsProvider, http2: 'on' | 'off'): Promise<string> {
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

  it('UPSTREAM_HTTP2=off (the default): the same streams over HTTP/1.1, a connection each', async () => {
    provider = await new TlsProvider().start();
    const bodies = await streams(await gatewayTo(provider, 'off'), 100);
    expect(bodies.every((b) => b.includes('p4'))).toBe(true);
    expect(new Set(provider.versions)).toEqual(new Set(['1.1']));
    expect(provider.connections).toBeGreaterThan(50);
  });
});

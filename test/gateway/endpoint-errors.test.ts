// An endpoint's unexpected failure: the client gets OpenAI's JSON 500, and the log line says which
// path failed without what the caller put in its query string (where some clients put a key).
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import pino from 'pino';
import { afterEach, expect, it } from 'vitest';
import { endpoint } from '../../gateway/src/endpoint';
import { GatewayMetrics } from '../../gateway/src/metrics';
import type { Pipeline } from '../../gateway/src/pipeline';

let server: Server | null = null;
afterEach(() => new Promise<void>((r) => (server ? server.close(() => r()) : r())));

it('a 500 is logged with the path, not its query string', async () => {
  const lines: string[] = [];
  const log = pino({}, new Writable({ write: (chunk, _enc, done) => (lines.push(String(chunk)), done()) }));
  const metrics = new GatewayMetrics(() => []);
  const failing = endpoint({ pipeline: {} as Pipeline, metrics, log }, () => {
    throw new Error('parser broke');
  });
  server = createServer((req, res) => void failing(req, res));
  await new Promise<void>((r) => server!.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  const res = await fetch(`http://127.0.0.1:${port}/v1/chat/completions?api-key=sk-query-secret-123`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm', messages: [] }),
  });
  expect(res.status).toBe(500);
  expect(await res.json()).toEqual({ error: expect.objectContaining({ message: 'internal error', type: 'api_error' }) });
  const logged = lines.join('');
  expect(logged).toContain('request failed');
  expect(logged).toContain('/v1/chat/completions');
  expect(logged).not.toContain('sk-query-secret-123');
  expect(await metrics.registry.metrics()).toContain('gateway_requests_total{tier="none",status="500"} 1');
});

// The budget pause or a kill-switch turned on while a request is under way: the routes it has not
// called yet and may no longer use are skipped from then on, as a request that starts after them skips them.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { FakeProvider } from './fake-provider';
import { ADMIN, chat, listenStack } from './harness';
import { until } from './keys-harness';

let capped: FakeProvider;
/** A provider that holds its first call until the test answers it, then fails every call with a 500. */
let gate: Server;
let gateUrl = '';
const held: ServerResponse[] = [];
let app: Awaited<ReturnType<typeof listenStack>> | undefined;

beforeEach(async () => {
  capped = await new FakeProvider().start();
  capped.always({ kind: 'ok', content: 'from the capped provider' });
  gate = createServer((req, res) => {
    req.resume();
    req.on('end', () => (held.length === 0 ? held.push(res) : res.writeHead(500).end('{}')));
  });
  await new Promise<void>((r) => gate.listen(0, '127.0.0.1', r));
  gateUrl = `http://127.0.0.1:${(gate.address() as AddressInfo).port}/v1`;
});
afterEach(async () => {
  await app?.stop();
  app = undefined;
  held.length = 0;
  gate.closeAllConnections();
  await new Promise<void>((r) => gate.close(() => r()));
  await capped.stop();
});

it('a pause set while a request waits on another route: the request does not call the capped provider afterwards', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'pause-in-flight-'));
  const file = join(dir, 'routes.json');
  const hot = [
    { id: 'first', provider: 'openai', model: 'gpt-4o-mini', baseUrl: gateUrl },
    { id: 'capped', provider: 'mistral', model: 'mistral-small', baseUrl: capped.url },
  ];
  writeFileSync(file, JSON.stringify({ hot, warm: [], cold: { mode: 'graceful_degrade', queue: 'ai-tasks', notify: [] } }));
  const env = {
    ROUTES_FILE: file,
    ADMIN_TOKEN: ADMIN,
    CAPPED_PROVIDER: 'mistral',
    METER_CSV_FILE: join(dir, 'e.csv'),
    SCOPES_FILE: join(dir, 'none.yaml'),
  };
  app = await listenStack(env);

  const answer = chat(app.url);
  await until(async () => held.length === 1); // the request is on its first route
  const paused = await fetch(`${app.url}/budget/webhook`, {
    method: 'POST',
    headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
    body: JSON.stringify({ provider: 'mistral', percentUsed: 95 }),
  });
  expect(paused.status).toBe(204);
  held[0].writeHead(500).end('{}'); // the first route fails: the request goes on to the next routes
  const res = await answer;
  expect(res.headers.get('x-route-provider')).not.toBe('mistral');
  expect(capped.received).toHaveLength(0);
});

it('a model killed while a request waits on another route: the request does not call the killed model afterwards', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'kill-in-flight-'));
  const file = join(dir, 'routes.json');
  const hot = [
    { id: 'first', provider: 'openai', model: 'gpt-4o-mini', baseUrl: gateUrl },
    { id: 'big', provider: 'openai', model: 'gpt-4o', baseUrl: capped.url },
  ];
  writeFileSync(file, JSON.stringify({ hot, warm: [], cold: { mode: 'graceful_degrade', queue: 'ai-tasks', notify: [] } }));
  const env = { ROUTES_FILE: file, ADMIN_TOKEN: ADMIN, METER_CSV_FILE: join(dir, 'e.csv'), SCOPES_FILE: join(dir, 'none.yaml') };
  app = await listenStack(env);

  const answer = chat(app.url);
  await until(async () => held.length === 1); // the request is on its first route
  const killed = await fetch(`${app.url}/admin/flags`, {
    method: 'PUT',
    headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
    body: JSON.stringify({ killed_models: ['gpt-4o'] }),
  });
  expect(killed.status).toBe(200);
  held[0].writeHead(500).end('{}'); // the first route fails: the request goes on to the next routes
  const res = await answer;
  expect(res.headers.get('x-route-model')).not.toBe('gpt-4o');
  expect(capped.received).toHaveLength(0);
});

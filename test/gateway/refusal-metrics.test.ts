// Every request to chat completions, responses and embeddings that gets an answer counts once in
// gateway_requests_total, the ones refused before any tier as tier "none" with their status: a
// whole gateway stack with client keys on the real Redis (replay store, limits), scraped on loopback.
import { writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { keysCli } from '../../gateway/src/keys-cli';
import { ADMIN } from './harness';
import { keysWorld, type KeysWorld } from './keys-harness';

let w: KeysWorld;
let url = '';
let key = '';

beforeAll(async () => {
  w = await keysWorld('refusal-metrics');
  const routes = join(w.dir, 'with-embeddings.json');
  writeFileSync(
    routes,
    JSON.stringify({
      hot: [
        { provider: 'openai', model: 'gpt-4o-mini', baseUrl: w.hot.url },
        { provider: 'openai', model: 'text-embedding-3-small', baseUrl: w.hot.url, apis: ['embeddings'] },
      ],
      warm: [],
      cold: { mode: 'graceful_degrade', queue: 'ai-tasks', notify: [] },
    }),
  );
  ({ url } = await w.up({ ROUTES_FILE: routes, ADMIN_TOKEN: ADMIN }));
  ({ key } = await w.makeKey('acme', '--models', 'gpt-4o-mini,text-embedding-3-small'));
});
afterAll(() => w.end());

const CHAT = { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] };

/** Every gateway_requests_total series, `tier/status` → count. */
async function counts(): Promise<Map<string, number>> {
  const text = await (await fetch(`${url}/metrics`, { headers: { authorization: `Bearer ${ADMIN}` } })).text();
  const series = new Map<string, number>();
  for (const [, tier, status, n] of text.matchAll(/^gateway_requests_total\{tier="([^"]*)",status="([^"]*)"\} (\S+)$/gm))
    series.set(`${tier}/${status}`, Number(n));
  return series;
}

/** The series `act` moved and by how much (none it did not move). */
async function moved(act: () => Promise<unknown>): Promise<Record<string, number>> {
  const before = await counts();
  await act();
  const after = await counts();
  const moves: Record<string, number> = {};
  for (const [series, n] of after) if (n !== (before.get(series) ?? 0)) moves[series] = n - (before.get(series) ?? 0);
  return moves;
}

async function post(path: string, body: string, headers: Record<string, string> = {}) {
  const res = await fetch(`${url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body });
  return { status: res.status, text: await res.text() };
}

const keyed = (more: Record<string, string> = {}) => ({ authorization: `Bearer ${key}`, ...more });

/** What fetch will not send (a length it does not keep to, an Expect header): the answer's status, the body unsent. */
function postUnsent(path: string, headers: Record<string, string>): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request(`${url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers } }, (res) => {
      res.resume();
      res.on('end', () => {
        resolve(res.statusCode!);
        req.destroy();
      });
    });
    req.on('error', reject);
    req.flushHeaders();
  });
}

describe('gateway_requests_total counts the requests the endpoints refuse before any tier', () => {
  it.each([
    ['no key', () => post('/v1/chat/completions', JSON.stringify(CHAT)), 401],
    ['a key this gateway never made', () => post('/v1/embeddings', '{}', { authorization: 'Bearer gk_not_a_key' }), 401],
    ['a body that is not JSON', () => post('/v1/chat/completions', '{"model":', keyed()), 400],
    ['a body of another type', () => post('/v1/responses', 'hi', keyed({ 'content-type': 'text/plain' })), 400],
    ['a charset other than UTF-8', () => post('/v1/embeddings', '{}', keyed({ 'content-type': 'application/json; charset=latin1' })), 415],
    ['an encoding the gateway cannot read', () => post('/v1/chat/completions', '{}', keyed({ 'content-encoding': 'zstd' })), 415],
    ['a request its parser refuses (chat)', () => post('/v1/chat/completions', JSON.stringify({ model: 'gpt-4o-mini' }), keyed()), 400],
    ['a request its parser refuses (responses)', () => post('/v1/responses', JSON.stringify({ input: 'hi' }), keyed()), 400],
    ['a request its parser refuses (embeddings)', () => post('/v1/embeddings', JSON.stringify({ model: 'x' }), keyed()), 400],
    ['a model the key may not use', () => post('/v1/chat/completions', JSON.stringify({ ...CHAT, model: 'o3' }), keyed()), 403],
    [
      'a conversation no tenant was given',
      () => post('/v1/responses', JSON.stringify({ model: 'gpt-4o-mini', input: 'hi', conversation: 'conv_1' }), keyed()),
      400,
    ],
  ])('%s: counted once, as tier none with its status', async (_name, send, status) => {
    let answered = 0;
    const moves = await moved(async () => (answered = (await send()).status));
    expect(answered).toBe(status);
    expect(moves).toEqual({ [`none/${status}`]: 1 });
  });

  it('a body declared larger than the limit (413), refused before it is sent', async () => {
    let status = 0;
    const moves = await moved(async () => (status = await postUnsent('/v1/embeddings', keyed({ 'content-length': '30000000' }))));
    expect([status, moves]).toEqual([413, { 'none/413': 1 }]);
  });

  it('no key with Expect: 100-continue (401 before the body is asked for), and an Expect the gateway cannot meet (417)', async () => {
    let status = 0;
    let moves = await moved(async () => (status = await postUnsent('/v1/chat/completions', { expect: '100-continue' })));
    expect([status, moves]).toEqual([401, { 'none/401': 1 }]);
    moves = await moved(async () => (status = await postUnsent('/v1/responses', keyed({ expect: 'something-else' }))));
    expect([status, moves]).toEqual([417, { 'none/417': 1 }]);
  });

  it('a revoked key', async () => {
    const { key: revoked, id } = await w.makeKey('acme');
    expect(
      await keysCli(
        ['revoke', id],
        w.env,
        () => {},
        () => {},
      ),
    ).toBe(0);
    let status = 0;
    const moves = await moved(async () => (status = (await post('/v1/embeddings', '{}', { authorization: `Bearer ${revoked}` })).status));
    expect([status, moves]).toEqual([401, { 'none/401': 1 }]);
  });

  it('an Idempotency-Key used with another body (422) or while its first request runs (409)', async () => {
    const first = await moved(() => post('/v1/chat/completions', JSON.stringify(CHAT), keyed({ 'idempotency-key': 'k-422' })));
    expect(first).toEqual({ 'hot/200': 1 });
    let status = 0;
    const other = JSON.stringify({ ...CHAT, messages: [{ role: 'user', content: 'another' }] });
    let moves = await moved(
      async () => (status = (await post('/v1/chat/completions', other, keyed({ 'idempotency-key': 'k-422' }))).status),
    );
    expect([status, moves]).toEqual([422, { 'none/422': 1 }]);

    // The first request of a key held while it streams: its repeat is refused while it runs.
    const data = `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'gpt-4o-mini', choices: [{ index: 0, delta: { content: 'a' }, finish_reason: null }] })}\n\n`;
    w.hot.next({ kind: 'raw-stream', pieces: [Buffer.from(data)], hold: true });
    const streamed = JSON.stringify({ ...CHAT, stream: true });
    const running = new AbortController();
    const held = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...keyed({ 'idempotency-key': 'k-409' }) },
      body: streamed,
      signal: running.signal,
    });
    expect(held.status).toBe(200);
    moves = await moved(
      async () => (status = (await post('/v1/chat/completions', streamed, keyed({ 'idempotency-key': 'k-409' }))).status),
    );
    running.abort();
    expect([status, moves]).toEqual([409, { 'none/409': 1 }]);
  });

  it("a replay over its key's requests per minute (429)", async () => {
    const { key: limited } = await w.makeKey('acme', '--rpm', '1');
    const headers = { authorization: `Bearer ${limited}`, 'idempotency-key': 'k-429' };
    expect(await moved(() => post('/v1/chat/completions', JSON.stringify(CHAT), headers))).toEqual({ 'hot/200': 1 });
    let status = 0;
    const moves = await moved(async () => (status = (await post('/v1/chat/completions', JSON.stringify(CHAT), headers)).status));
    expect([status, moves]).toEqual([429, { 'none/429': 1 }]);
  });
});

describe('gateway_requests_total still counts an answered request once', () => {
  it('a chat completion, an embedding and a response, each once by the tier that answered', async () => {
    const body = JSON.stringify(CHAT);
    expect(await moved(() => post('/v1/chat/completions', body, keyed()))).toEqual({ 'hot/200': 1 });
    const embedding = JSON.stringify({ model: 'text-embedding-3-small', input: 'hi' });
    expect(await moved(() => post('/v1/embeddings', embedding, keyed()))).toEqual({ 'hot/200': 1 });
    const response = JSON.stringify({ model: 'gpt-4o-mini', input: 'hi' });
    expect(await moved(() => post('/v1/responses', response, keyed()))).toEqual({ 'hot/200': 1 });
  });
});

// Client keys, as a customer with the official openai client sees them: who may call,
// whose tenant a request is, and each key's own limits. Real Redis, real HTTP.
import { readFileSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { readEnv } from '../../gateway/src/env';
import { redisDump } from './redis-dump';
import { ask, client, keysWorld, refusal, until, type KeysWorld } from './keys-harness';
import { captureLogger, listenStack } from './harness';

let w: KeysWorld;
beforeEach(async () => {
  w = await keysWorld('keys');
});
afterEach(() => w.end());

const calls = () => w.hot.received.length + w.warm.received.length;

describe('who may call (GATEWAY_AUTH=keys)', () => {
  it('no key or a wrong one: 401 invalid_api_key in OpenAI shape, and no provider is called', async () => {
    const { url } = await w.up();
    const { key } = await w.makeKey('acme');
    const wrong = await refusal(ask(url, `gk_${'x'.repeat(32)}`));
    expect(wrong).toMatchObject({ status: 401, code: 'invalid_api_key' });
    expect(await refusal(ask(url, 'sk-some-openai-key'))).toMatchObject({ status: 401, code: 'invalid_api_key' });
    const none = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] }),
    });
    expect(none.status).toBe(401);
    const body = (await none.json()) as { error: Record<string, unknown> };
    expect(body).toEqual({
      error: { message: expect.stringMatching(/API key/), type: 'invalid_request_error', code: 'invalid_api_key', param: null },
    });
    // What Express serves under /v1 needs the key too, the chat endpoint included (a query string sends it there).
    expect((await fetch(`${url}/v1/jobs/llm-${'0'.repeat(40)}`)).status).toBe(401);
    const viaExpress = await fetch(`${url}/v1/chat/completions?trace=1`, {
      method: 'POST',
      body: '{}',
      headers: { 'content-type': 'application/json' },
    });
    expect(viaExpress.status).toBe(401);
    expect((await fetch(`${url}/v1/models`)).status).toBe(401);
    expect(calls()).toBe(0);

    const { data, response } = await ask(url, key);
    expect(response.status).toBe(200);
    expect(data.choices[0].message.content).toContain('hello');
    // The provider gets the operator's provider key, never the client's key.
    expect(w.hot.received[0].headers.authorization).toBe('Bearer provider-hot-key');
  });

  it('a client that asks before sending its body (Expect: 100-continue) is refused unsent without a key, told to send with one', async () => {
    const { url } = await w.up();
    const { key } = await w.makeKey('acme');
    const body = JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'x'.repeat(100_000) }] });
    // As curl sends a large body: the headers, then the body only once the server says 100 Continue.
    const send = (path: string, authorization?: string) =>
      new Promise<{ status: number; continued: boolean }>((resolve, reject) => {
        const headers = { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), expect: '100-continue' };
        const req = request(`${url}${path}`, { method: 'POST', headers: authorization ? { ...headers, authorization } : headers });
        let continued = false;
        req.on('continue', () => {
          continued = true;
          req.end(body);
        });
        req.on('response', (res) => {
          res.resume();
          res.on('end', () => resolve({ status: res.statusCode!, continued }));
        });
        req.on('error', reject);
        req.flushHeaders();
      });
    for (const path of ['/v1/chat/completions', '/v1/responses', '/v1/chat/completions?trace=1']) {
      expect(await send(path)).toEqual({ status: 401, continued: false });
      expect(await send(path, `Bearer gk_${'x'.repeat(32)}`)).toEqual({ status: 401, continued: false });
    }
    expect(await send('/v1/chat/completions', `Bearer ${key}`)).toEqual({ status: 200, continued: true });
    expect(calls()).toBe(1);
  });

  it('voice endpoints keep VOICE_TOKEN and operator endpoints ADMIN_TOKEN: a client key opens neither', async () => {
    const { url } = await w.up({ ADMIN_TOKEN: 'admin-t' });
    const { key } = await w.makeKey('acme');
    const voice = await fetch(`${url}/v1/voice/calls`, { method: 'POST', headers: { authorization: `Bearer ${key}` } });
    expect(voice.status).toBe(401);
    expect(await voice.json()).toEqual({ error: expect.stringMatching(/unauthorized/) }); // the voice guard's answer, not ours
    expect((await fetch(`${url}/health`, { headers: { authorization: `Bearer ${key}` } })).status).toBe(401);
    expect((await fetch(`${url}/health`, { headers: { authorization: 'Bearer admin-t' } })).status).toBe(200);
  });

  it('the key, the key id and the tenant: the key is in no log line, no answer and no Redis key or value', async () => {
    const { url, logs, stop } = await w.up();
    const a = await w.makeKey('acme');
    const b = await w.makeKey('beta', '--rpm', '100', '--tpm', '100000');
    w.hot.always({ kind: 'status', status: 500 });
    w.warm.always({ kind: 'status', status: 500 });
    const queued = await ask(url, a.key); // Cold fallback: a job in Redis
    expect(queued.response.status).toBe(202);
    const jobId = (queued.data as unknown as { jobId: string }).jobId;
    const job = await (await fetch(`${url}/v1/jobs/${jobId}`, { headers: { authorization: `Bearer ${a.key}` } })).text();
    await ask(url, b.key); // through its limits (counters in Redis)
    await refusal(ask(url, b.key, { 'x-customer-id': 'acme' }));
    await stop(); // writes the last-used times
    const dump = await redisDump(w.redis, w.prefix);
    expect(dump).toContain(a.id); // the dump holds the keys' records, the job and the limits
    expect(dump).toContain(jobId);
    for (const text of [dump, logs.join(''), job]) {
      for (const { key } of [a, b]) expect(text).not.toContain(key.slice(3));
      expect(text).not.toContain('gk_');
    }
  });

  it('GATEWAY_AUTH is keys by default in production and open otherwise; open warns at start that anyone can spend', async () => {
    expect(readEnv({ NODE_ENV: 'production' }).GATEWAY_AUTH).toBe('keys');
    expect(readEnv({}).GATEWAY_AUTH).toBe('open');
    expect(() => readEnv({ GATEWAY_AUTH: 'none' })).toThrow(/GATEWAY_AUTH: .*"keys"\s*\|\s*"open"/);
    const logs: string[] = [];
    const open = await listenStack({ ...w.env, GATEWAY_AUTH: 'open' }, { http: true, worker: false }, captureLogger(logs));
    try {
      expect(logs.join('')).toMatch(/GATEWAY_AUTH=open.*anyone who can reach this port can spend/);
      // Open: today's behaviour, x-customer-id is the tenant.
      const res = await client(open.url, 'anything').chat.completions.create(
        { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] },
        { headers: { 'x-customer-id': 'walk-in' } },
      );
      expect(res.choices).toHaveLength(1);
      await open.stack.meter.flush();
    } finally {
      await open.stop();
    }
    const keysUp = await w.up();
    expect(keysUp.logs.join('')).toMatch(/no valid client key yet: every \/v1 request answers 401/);
  });
});

describe('the tenant comes from the key', () => {
  it("meter events carry the key's tenant; x-customer-id may repeat it, naming another tenant is refused (403)", async () => {
    const { url, stack } = await w.up();
    const { key } = await w.makeKey('acme');
    await ask(url, key);
    await ask(url, key, { 'x-customer-id': 'acme' });
    const other = await refusal(ask(url, key, { 'x-customer-id': 'beta' }));
    expect(other).toMatchObject({ status: 403, code: 'tenant_mismatch' });
    expect(other.message).toMatch(/x-customer-id "beta" does not match this API key's tenant "acme"/);
    // The header is quoted as the characters sent (UTF-8, as curl sends it) and cut short: it came
    // back as its Latin-1 reading ("CrÃ¨me"), up to the 1,000 characters any such header may have.
    const utf8 = Buffer.from(`Crème ${'x'.repeat(900)}`, 'utf8').toString('latin1'); // fetch sends each char as one byte
    const long = await refusal(ask(url, key, { 'x-customer-id': utf8 }));
    expect(long).toMatchObject({ status: 403, code: 'tenant_mismatch' });
    expect(long.message).toBe(
      `x-customer-id "Crème ${'x'.repeat(94)}" does not match this API key's tenant "acme": send the key's tenant or leave the header out`,
    );
    expect(calls()).toBe(2);
    await stack.meter.flush();
    const { readFileSync } = await import('node:fs');
    const [header, ...lines] = readFileSync(w.env.METER_CSV_FILE!, 'utf8').trim().split('\n');
    const col = header.split(',').indexOf('customer_id');
    expect(lines.map((l) => l.split(',')[col])).toEqual(['acme', 'acme']);
  });
});

describe('every OpenAI endpoint takes the key', () => {
  it("responses and embeddings: 401 without a key and no provider call; with it, their events carry the key's tenant", async () => {
    const { writeFileSync, readFileSync } = await import('node:fs');
    const { join } = await import('node:path');
    const routes = join(w.dir, 'routes-embeddings.json');
    const cold = { mode: 'graceful_degrade', queue: 'ai-tasks', notify: [] };
    const hot = [
      { provider: 'openai', model: 'gpt-4o-mini', baseUrl: w.hot.url },
      { provider: 'openai', model: 'text-embedding-3-small', baseUrl: w.hot.url, apis: ['embeddings'] },
    ];
    writeFileSync(routes, JSON.stringify({ hot, warm: [], cold }));
    const { url, stack } = await w.up({ ROUTES_FILE: routes });
    const { key } = await w.makeKey('acme');
    const nokey = client(url, 'sk-not-a-client-key');
    expect(await refusal(nokey.responses.create({ model: 'gpt-4o-mini', input: 'hi' }))).toMatchObject({
      status: 401,
      code: 'invalid_api_key',
    });
    expect(await refusal(nokey.embeddings.create({ model: 'text-embedding-3-small', input: 'hi' }))).toMatchObject({
      status: 401,
      code: 'invalid_api_key',
    });
    expect(calls()).toBe(0);

    const keyed = client(url, key);
    expect((await keyed.responses.create({ model: 'gpt-4o-mini', input: 'hi' })).status).toBe('completed');
    expect((await keyed.embeddings.create({ model: 'text-embedding-3-small', input: 'hi' })).data).toHaveLength(1);
    expect(calls()).toBe(2);
    await stack.meter.flush();
    const [header, ...lines] = readFileSync(w.env.METER_CSV_FILE!, 'utf8').trim().split('\n');
    const cols = header.split(',');
    const rows = lines.map((l) => l.split(','));
    expect(rows.map((r) => [r[cols.indexOf('model')], r[cols.indexOf('customer_id')]])).toEqual([
      ['gpt-4o-mini', 'acme'],
      ['text-embedding-3-small', 'acme'],
    ]);
  });
});

describe("each key's own limits", () => {
  it('a key over its --rpm gets 429 with Retry-After naming the limit; another tenant is unaffected', async () => {
    const { url } = await w.up();
    const a = await w.makeKey('acme', '--rpm', '2');
    const b = await w.makeKey('beta', '--rpm', '2');
    await ask(url, a.key);
    await ask(url, a.key);
    const over = await refusal(ask(url, a.key));
    expect(over).toMatchObject({ status: 429, code: 'key_requests_per_minute' });
    expect(over.message).toContain(`API key ${a.id} is over its limit of 2 requests per minute`);
    expect(Number(over.retryAfter)).toBeGreaterThanOrEqual(1);
    expect(Number(over.retryAfter)).toBeLessThanOrEqual(60);
    expect((await ask(url, b.key)).response.status).toBe(200);
    expect(calls()).toBe(3);
  });

  it('--tpm counts the tokens answers used; --models refuses another model with 403 naming it', async () => {
    const { url } = await w.up();
    const { key, id } = await w.makeKey('acme', '--tpm', '20', '--models', 'gpt-4o-mini,gpt-4o');
    const model = await refusal(ask(url, key, {}, 'o3'));
    expect(model).toMatchObject({ status: 403, code: 'model_not_allowed' });
    expect(model.message).toBe('model "o3" is not allowed for this API key; it may use "gpt-4o-mini", "gpt-4o"');
    expect(calls()).toBe(0);
    await ask(url, key); // 17 tokens (the fake provider's usage): under 20
    await ask(url, key, {}, 'gpt-4o'); // 34 now
    const over = await refusal(ask(url, key));
    expect(over).toMatchObject({ status: 429, code: 'key_tokens_per_minute' });
    expect(over.message).toContain(`API key ${id} has used its limit of 20 tokens per minute`);
    expect(over.retryAfter).toMatch(/^\d+$/);
  });

  it('a request refused for --tpm uses none of the key\'s --rpm: every one after says tokens, never "requests"', async () => {
    const { url } = await w.up();
    const { key, id } = await w.makeKey('acme', '--rpm', '3', '--tpm', '20');
    await ask(url, key); // 17 tokens
    await ask(url, key); // 34: the budget is spent, 2 of the 3 requests used
    const refused = [];
    for (let i = 0; i < 4; i++) refused.push(await refusal(ask(url, key)));
    expect(refused.map((r) => r.code)).toEqual(Array(4).fill('key_tokens_per_minute'));
    expect(refused[3].message).toContain(`API key ${id} has used its limit of 20 tokens per minute`);
    expect(calls()).toBe(2);
  });

  it("a request refused for its tenant's requests per minute uses none of its key's --rpm: every one after says tenant, never the key", async () => {
    const routes = JSON.parse(readFileSync(w.env.ROUTES_FILE!, 'utf8')) as Record<string, unknown>;
    const limited = join(w.dir, 'routes-limited.json');
    writeFileSync(limited, JSON.stringify({ ...routes, limits: { tenant_requests_per_minute: 2 } }));
    const { url } = await w.up({ ROUTES_FILE: limited });
    const { key } = await w.makeKey('acme', '--rpm', '3');
    await ask(url, key);
    await ask(url, key); // the tenant's 2 of the minute, 2 of the key's 3
    const refused = [];
    for (let i = 0; i < 3; i++) refused.push(await refusal(ask(url, key)));
    expect(refused.map((r) => r.code)).toEqual(Array(3).fill('tenant_rate_limited'));
    expect(calls()).toBe(2);
  });

  it("a request refused for the providers' token budgets uses none of its key's --rpm nor its tenant's limit", async () => {
    const routes = JSON.parse(readFileSync(w.env.ROUTES_FILE!, 'utf8')) as Record<string, unknown>;
    const limited = join(w.dir, 'routes-budgeted.json');
    const limits = { tenant_requests_per_minute: 3, provider_tokens_per_minute: { openai: 10, anthropic: 10 } };
    writeFileSync(limited, JSON.stringify({ ...routes, limits }));
    const { url } = await w.up({ ROUTES_FILE: limited });
    const a = await w.makeKey('acme', '--rpm', '3');
    const b = await w.makeKey('acme');
    // Each answer's 17 tokens spend its provider's budget of 10; they are counted off the request path.
    const spent = (provider: string) => async () => (await w.redis.keys(`${w.prefix}:tb:${provider}:*`)).length;
    await ask(url, a.key);
    await until(spent('openai'));
    await ask(url, a.key, {}, 'claude-3-5-haiku-latest'); // 2 of the key's 3, 2 of the tenant's 3
    await until(spent('anthropic'));
    const refused = [];
    for (let i = 0; i < 3; i++) refused.push(await refusal(ask(url, a.key)));
    refused.push(await refusal(ask(url, b.key)));
    expect(refused.map((r) => r.code)).toEqual(Array(4).fill('provider_token_budget'));
    expect(calls()).toBe(2);
  });

  it('models.list offers a key that names its models only those: a picker never offers what answers 403', async () => {
    const { url } = await w.up();
    const { key } = await w.makeKey('acme', '--models', 'gpt-4o-mini');
    const limited = client(url, key);
    const ids = [];
    for await (const m of limited.models.list()) ids.push(m.id);
    expect(ids).toEqual(['gpt-4o-mini']);
    expect((await limited.models.retrieve('gpt-4o-mini')).id).toBe('gpt-4o-mini');
    await expect(limited.models.retrieve('claude-3-5-haiku-latest')).rejects.toMatchObject({ status: 404, code: 'model_not_found' });
    const all = [];
    for await (const m of client(url, (await w.makeKey('acme')).key).models.list()) all.push(m.id);
    expect(all.sort()).toEqual(['claude-3-5-haiku-latest', 'gpt-4o-mini']);
  });

  it('embeddings tell a key that names its models nothing of the others: a model served to other keys and one no route serves get the same 403', async () => {
    const routes = join(w.dir, 'routes-embeddings.json');
    const hot = [
      { provider: 'openai', model: 'text-embedding-3-small', baseUrl: w.hot.url, apis: ['embeddings'] },
      { provider: 'openai', model: 'beta-private-embed', baseUrl: w.hot.url, apis: ['embeddings'] },
    ];
    writeFileSync(routes, JSON.stringify({ hot, warm: [], cold: { mode: 'graceful_degrade', queue: 'ai-tasks', notify: [] } }));
    const { url } = await w.up({ ROUTES_FILE: routes });
    const limited = client(url, (await w.makeKey('acme', '--models', 'text-embedding-3-small,text-embedding-3-large')).key);
    const embed = (model: string) => refusal(limited.embeddings.create({ model, input: 'hi' }));
    // Another tenant's model and one no route serves: the same refusal, naming the key's models only.
    const [served, unserved] = [await embed('beta-private-embed'), await embed('nothing-such')];
    expect([served.status, served.code]).toEqual([403, 'model_not_allowed']);
    expect(served.message).toBe(
      'model "beta-private-embed" is not allowed for this API key; it may use "text-embedding-3-small", "text-embedding-3-large"',
    );
    expect({ ...unserved, message: unserved.message.replace('nothing-such', 'beta-private-embed') }).toEqual(served);
    // One of its own no route serves is told so, with the served ones it may use.
    expect(await embed('text-embedding-3-large')).toMatchObject({
      status: 404,
      code: 'model_not_found',
      message: 'model: no route serves embeddings of "text-embedding-3-large" (served: text-embedding-3-small)',
    });
    expect((await limited.embeddings.create({ model: 'text-embedding-3-small', input: 'hi' })).data).toHaveLength(1);
    expect(calls()).toBe(1);
  });
});

// Client keys: work belongs to its tenant (idempotency, jobs), revocation through the
// CLI reaches running gateways, and two gateways on one Redis agree. Real Redis, real HTTP.
import { execFile } from 'node:child_process';
import { track } from '../children';
import { promisify } from 'node:util';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { keysCli } from '../../gateway/src/keys-cli';
import { ask, client, keysWorld, refusal, until, type KeysWorld } from './keys-harness';
import { listenStack } from './harness';

let w: KeysWorld;
beforeEach(async () => {
  w = await keysWorld('keys-jobs');
});
afterEach(() => w.end());

const getJob = (url: string, id: string, key?: string) =>
  fetch(`${url}/v1/jobs/${id}`, { headers: key ? { authorization: `Bearer ${key}` } : {} });
const jobIdOf = (r: Awaited<ReturnType<typeof ask>>) => (r.data as unknown as { jobId: string }).jobId;
const failAll = () => {
  w.hot.always({ kind: 'status', status: 500 });
  w.warm.always({ kind: 'status', status: 500 });
};

describe('work belongs to its tenant', () => {
  it('the same Idempotency-Key from two tenants makes two jobs and two provider keys; a retry within a tenant makes none', async () => {
    const { url } = await w.up();
    const a = await w.makeKey('acme');
    const b = await w.makeKey('beta');
    failAll();
    const sdk = (key: string) =>
      client(url, key)
        .chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] }, { idempotencyKey: 'order-1001' })
        .withResponse();
    const fromA = await sdk(a.key);
    const fromB = await sdk(b.key);
    const again = await sdk(a.key);
    expect([fromA.response.status, fromB.response.status, again.response.status]).toEqual([202, 202, 202]);
    expect(jobIdOf(fromA)).toMatch(/^llm-[0-9a-f]{40}$/);
    expect(jobIdOf(fromB)).not.toBe(jobIdOf(fromA));
    expect(jobIdOf(again)).toBe(jobIdOf(fromA));
    const outbound = new Set(w.hot.received.map((r) => r.headers['idempotency-key']));
    expect(outbound.size).toBe(2); // one per tenant, the same on every retry within it
    expect(outbound.has('order-1001')).toBe(false);
    expect(await w.redis.llen(`${w.prefix}:ai-tasks:wait`)).toBe(2);
  });

  it('GET /v1/jobs/:id answers only the tenant that queued it: another gets 404 as if absent, no key 401', async () => {
    const { url } = await w.up();
    const a = await w.makeKey('acme');
    const a2 = await w.makeKey('acme'); // a second key of the same tenant (rotation) sees its jobs
    const b = await w.makeKey('beta');
    failAll();
    const id = jobIdOf(await ask(url, a.key));
    const own = await getJob(url, id, a.key);
    expect(own.status).toBe(200);
    expect(await own.json()).toMatchObject({ id, customerId: 'acme', state: 'waiting' });
    expect((await getJob(url, id, a2.key)).status).toBe(200);
    const other = await getJob(url, id, b.key);
    const absent = await getJob(url, `llm-${'0'.repeat(40)}`, b.key);
    expect([other.status, absent.status]).toEqual([404, 404]);
    const [otherBody, absentBody] = (await Promise.all([other.json(), absent.json()])) as Array<{
      error: { message: string; code: string };
    }>;
    expect(otherBody.error.code).toBe('job_not_found');
    expect(otherBody.error.message.replace(id, 'ID')).toBe(absentBody.error.message.replace(`llm-${'0'.repeat(40)}`, 'ID'));
    expect((await getJob(url, id)).status).toBe(401);
  });

  // It was ignored: a backend that believed it polled beta's job was answered acme's, as on no endpoint that takes the header.
  it("GET /v1/jobs/:id with an x-customer-id naming another tenant than the key is a 403 tenant_mismatch, the key's own tenant is answered", async () => {
    const { url } = await w.up();
    const a = await w.makeKey('acme');
    failAll();
    const id = jobIdOf(await ask(url, a.key));
    const poll = (tenant: string) =>
      fetch(`${url}/v1/jobs/${id}`, { headers: { authorization: `Bearer ${a.key}`, 'x-customer-id': tenant } });
    expect((await poll('acme')).status).toBe(200);
    const other = await poll('beta');
    expect(other.status).toBe(403);
    expect(((await other.json()) as { error: unknown }).error).toMatchObject({
      code: 'tenant_mismatch',
      param: 'x-customer-id',
      message: expect.stringMatching(/x-customer-id "beta" does not match this API key's tenant "acme"/),
    });
    const models = await fetch(`${url}/v1/models`, { headers: { authorization: `Bearer ${a.key}`, 'x-customer-id': 'beta' } });
    expect(models.status).toBe(403);
  });

  it("a key's --tpm counts the tokens of its queued jobs too: sending x-time-to-answer-ms: 1 to go through the Cold queue does not escape it", async () => {
    const gw = await listenStack(w.env, { http: true, worker: true });
    try {
      const { key } = await w.makeKey('acme', '--tpm', '20');
      // A time-to-answer no route can meet queues the request; the worker answers it (17 tokens each).
      const viaCold = (n: number) =>
        client(gw.url, key)
          .chat.completions.create(
            { model: 'gpt-4o-mini', messages: [{ role: 'user', content: `essay ${n}` }] },
            { headers: { 'x-time-to-answer-ms': '1' } },
          )
          .withResponse();
      for (const n of [1, 2]) {
        const queued = await viaCold(n);
        expect(queued.response.status).toBe(202);
        await until(async () => ((await (await getJob(gw.url, jobIdOf(queued), key)).json()) as { state: string }).state === 'completed');
      }
      expect(w.hot.received).toHaveLength(2); // 34 tokens: over the key's 20
      expect(await refusal(viaCold(3))).toMatchObject({ status: 429, code: 'key_tokens_per_minute' });
      expect(await refusal(ask(gw.url, key))).toMatchObject({ status: 429, code: 'key_tokens_per_minute' });
      expect(w.hot.received).toHaveLength(2);
    } finally {
      await gw.stop();
    }
  });

  it('ids not of the gateway shape answer 400 in OpenAI shape, never a store error (open and keys)', async () => {
    const open = await listenStack({ ...w.env, GATEWAY_AUTH: 'open' });
    const keyed = await w.up();
    const { key } = await w.makeKey('acme');
    failAll();
    // A queued job makes BullMQ's own keys (events, meta, id, wait) exist: before, their names read as job ids (500 WRONGTYPE).
    expect((await ask(keyed.url, key)).response.status).toBe(202);
    try {
      for (const [url, k] of [
        [open.url, undefined],
        [keyed.url, key],
      ] as const) {
        for (const id of ['events', 'meta', 'id', 'wait', 'completed', 'stalled-check', 'llm-XYZ']) {
          const res = await getJob(url, id, k);
          expect(res.status, `${id}`).toBe(400);
          expect(await res.json()).toEqual({
            error: {
              message: expect.stringContaining('id: expected a job id'),
              type: 'invalid_request_error',
              param: 'id',
              code: 'invalid_job_id',
            },
          });
        }
      }
    } finally {
      await open.stop();
    }
  });
});

const run = promisify(execFile);
/** `npm run keys -- …` as an operator runs it: its own process, the gateway's environment (killed if the test ends first). */
const keysCommand = (args: string[]) => {
  const ran = run(process.execPath, ['--import', 'tsx', 'bin/keys.ts', ...args], { env: { PATH: process.env.PATH, ...w.env } });
  track(ran.child);
  return ran;
};

describe('revocation and several gateways', () => {
  it('a key made and revoked with the CLI is refused by a running gateway within 5 s', async () => {
    const { url } = await w.up();
    const made = await keysCommand(['create', 'acme', '--rpm', '1000']);
    const key = made.stdout.trim().split('\n').at(-1)!;
    expect(key).toMatch(/^gk_/);
    const listed = (await keysCommand(['list'])).stdout.trim().split('\n');
    expect(listed).toHaveLength(1);
    const id = listed[0].split(' ')[0];
    expect(id).toMatch(/^key_[0-9a-f]{8}$/);
    expect(listed[0]).toContain('tenant=acme rpm=1000');
    expect(listed.join('\n')).not.toContain(key);
    expect((await ask(url, key)).response.status).toBe(200); // cached in the gateway from here on
    await keysCommand(['revoke', id]);
    // Within the 5 s the docs promise (gateway.md, client keys): the wait gives up after them.
    const refused = await until(async () => (await refusal(ask(url, key)).catch(() => null)) ?? false, 5000);
    expect(refused).toMatchObject({ status: 401, code: 'invalid_api_key' });
    expect(refused.message).toMatch(/revoked/);
    const after: string[] = [];
    await keysCli(
      ['list'],
      w.env,
      (l) => after.push(l),
      () => undefined,
    );
    expect(after[0]).toMatch(new RegExp(`^${id} .*last_used=\\d{4}-.* revoked=\\d{4}-`));
  }, 60_000); // three CLI processes start (tsx) on a machine that may be busy

  it('two gateways on one Redis agree: the same keys, one rpm count, one revocation, the same jobs', async () => {
    const [one, two] = [await w.up(), await w.up()];
    const a = await w.makeKey('acme', '--rpm', '3');
    const b = await w.makeKey('beta');
    await ask(one.url, a.key);
    await ask(two.url, a.key);
    await ask(one.url, a.key);
    expect(await refusal(ask(two.url, a.key))).toMatchObject({ status: 429, code: 'key_requests_per_minute' });
    failAll();
    const id = jobIdOf(await ask(one.url, b.key));
    expect((await getJob(two.url, id, b.key)).status).toBe(200);
    expect((await getJob(two.url, id, a.key)).status).toBe(404);
    const lines: string[] = [];
    expect(
      await keysCli(
        ['revoke', b.id],
        w.env,
        (l) => lines.push(l),
        (l) => lines.push(l),
      ),
    ).toBe(0);
    // On both, within the 5 s the docs promise: the wait gives up after them.
    await Promise.all([one, two].map((gw) => until(async () => (await getJob(gw.url, id, b.key)).status === 401, 5000)));
  });
});

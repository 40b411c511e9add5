// Stored responses are their tenant's: with client keys, a tenant continues its own responses
// (`previous_response_id`, `item_reference`) on any instance, and another tenant's ids are unknown
// to it, as OpenAI answers an id it does not know. Real Redis, two gateway instances, the official
// `openai` client in front of a provider that speaks the Responses API.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { FakeProvider } from './fake-provider';
import { createStack } from '../../gateway/src/stack';
import { ADMIN, captureLogger, listenStack } from './harness';
import { client, keysWorld, refusal, until, type KeysWorld } from './keys-harness';

let w: KeysWorld;
beforeEach(async () => {
  w = await keysWorld('owners');
});
afterEach(() => w.end());

/**
 * Writes the routing map of these tests: `hot` (openai's chat and Responses route by default) and a
 * Warm route of another provider that offers the Responses API natively too. Returns the file.
 */
function writeTwoNativeMap(otherUrl: string, hot: object = { provider: 'openai', model: 'gpt-4o-mini', baseUrl: w.hot.url }): string {
  const routes = join(w.dir, 'two-native.json');
  const azure = { provider: 'azure-openai', model: 'gpt-4o-mini', baseUrl: otherUrl, apis: ['chat', 'responses'] };
  writeFileSync(routes, JSON.stringify({ hot: [hot], warm: [azure], cold: { mode: 'graceful_degrade', queue: 'ai-tasks', notify: [] } }));
  return routes;
}

/** A Responses request with `key`; by default with a 3 s time-to-answer, so a request with no route is queued in time. */
const postResponses = (url: string, key: string, body: object, headers: Record<string, string> = { 'x-time-to-answer-ms': '3000' }) =>
  fetch(`${url}/v1/responses`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...headers },
    body: JSON.stringify({ model: 'gpt-4o-mini', ...body }),
  });

interface JobView {
  state: string;
  attempts: number;
  lastError: string | null;
  result?: { body: { id: string } };
}

/** A queued job as its tenant reads it, once it has ended (completed or dead-lettered). */
const jobEnded = (url: string, key: string, jobId: string) =>
  until(async () => {
    const view = (await (await fetch(`${url}/v1/jobs/${jobId}`, { headers: { authorization: `Bearer ${key}` } })).json()) as JobView;
    return ['completed', 'dead-lettered'].includes(view.state) ? view : null;
  });

/** The queued job completes, and its response is continued by the tenant that queued it, never by another. */
async function expectTenantsOwn(url: string, owner: string, other: string, jobId: string): Promise<void> {
  const done = await jobEnded(url, owner, jobId);
  expect(done.state).toBe('completed');
  const id = done.result!.body.id;
  await client(url, owner).responses.create({ model: 'gpt-4o-mini', input: 'and?', previous_response_id: id });
  const stolen = await refusal(client(url, other).responses.create({ model: 'gpt-4o-mini', input: 'and?', previous_response_id: id }));
  expect(stolen).toMatchObject({ status: 400, code: 'previous_response_not_found' });
}

const responsesCalls = () => w.hot.received.filter((r) => r.path === '/v1/responses').length;

describe('stored responses and tenants (GATEWAY_AUTH=keys)', () => {
  it("a tenant continues its own responses on any instance; another tenant's are previous_response_not_found, nothing called", async () => {
    const [one, two] = [await w.up(), await w.up()];
    const acme = (await w.makeKey('acme')).key;
    const globex = (await w.makeKey('globex')).key;

    const first = await client(one.url, acme).responses.create({ model: 'gpt-4o-mini', input: 'remember: 42' });
    // The stream's response is the tenant's too, its id known before the stream's end is sent.
    const stream = await client(one.url, acme).responses.create({ model: 'gpt-4o-mini', input: 'and 43', stream: true });
    let streamed = '';
    for await (const event of stream) if (event.type === 'response.completed') streamed = event.response.id;
    expect(streamed).toMatch(/^resp_/);

    for (const id of [first.id, streamed]) {
      const next = await client(two.url, acme).responses.create({ model: 'gpt-4o-mini', input: 'what was it?', previous_response_id: id });
      expect(next.output_text).toBe('native responses from gpt-4o-mini');
      expect(w.hot.received.at(-1)!.body).toMatchObject({ previous_response_id: id });
    }

    // Kept as long as OpenAI keeps a stored response: 30 days.
    expect(await w.redis.ttl(`${w.prefix}:response-owner:${first.id}`)).toBeGreaterThan(29 * 24 * 3600);
    const before = responsesCalls();
    for (const gw of [one, two]) {
      const stolen = await refusal(
        client(gw.url, globex).responses.create({ model: 'gpt-4o-mini', input: 'what was it?', previous_response_id: first.id }),
      );
      expect(stolen).toMatchObject({
        status: 400,
        code: 'previous_response_not_found',
        message: `Previous response with id '${first.id}' not found.`,
      });
    }
    const item = first.output[0].id!;
    const byItem = await refusal(
      client(two.url, globex).responses.create({ model: 'gpt-4o-mini', input: [{ type: 'item_reference', id: item }] }),
    );
    expect(byItem).toMatchObject({ status: 400, code: 'item_not_found', message: `Item with id '${item}' not found.` });
    // An id no tenant was answered through this gateway is no one's either.
    const unknown = await refusal(
      client(one.url, acme).responses.create({ model: 'gpt-4o-mini', input: 'x', previous_response_id: 'resp_never_answered' }),
    );
    expect(unknown).toMatchObject({ status: 400, code: 'previous_response_not_found' });
    expect(responsesCalls()).toBe(before);

    // Its own items, referenced by id, are served.
    await client(one.url, acme).responses.create({ model: 'gpt-4o-mini', input: [{ type: 'item_reference', id: item }] });
    expect(responsesCalls()).toBe(before + 1);
  });

  it("another tenant's reasoning item, given by its id alone (its content read from the store), is item_not_found; one carried whole is served", async () => {
    const { url } = await w.up();
    const acme = (await w.makeKey('acme')).key;
    const globex = (await w.makeKey('globex')).key;
    const reasoning = { id: 'rs_acme', type: 'reasoning', summary: [] };
    const stored = { id: 'resp_thought', object: 'response', store: true, status: 'completed', model: 'gpt-4o-mini', output: [reasoning] };
    w.hot.next({ kind: 'raw-stream', type: 'application/json', pieces: [Buffer.from(JSON.stringify(stored))] });
    await client(url, acme).responses.create({ model: 'gpt-4o-mini', input: 'think about my secret' });
    const ask = (key: string, item: object) =>
      client(url, key).responses.create({
        model: 'gpt-4o-mini',
        input: [item as never, { role: 'user', content: 'what were you thinking?' }],
      });

    const before = responsesCalls();
    const stolen = await refusal(ask(globex, { type: 'reasoning', id: 'rs_acme', summary: [] }));
    expect(stolen).toMatchObject({ status: 400, code: 'item_not_found', message: "Item with id 'rs_acme' not found." });
    expect(responsesCalls()).toBe(before);

    await ask(acme, { type: 'reasoning', id: 'rs_acme', summary: [] });
    // Stateless (`store: false`): the item brings its own encrypted content, nothing is read by id.
    await ask(globex, { type: 'reasoning', id: 'rs_unstored', summary: [], encrypted_content: 'gAAAA' });
    expect(responsesCalls()).toBe(before + 2);
  });

  it("another tenant's item in a shape that carries none of its content (empty encrypted_content, no type and no role or content) is item_not_found too", async () => {
    const { url } = await w.up();
    const acme = (await w.makeKey('acme')).key;
    const globex = (await w.makeKey('globex')).key;
    const item = ((await (await postResponses(url, acme, { input: 'my secret' })).json()) as { output: Array<{ id: string }> }).output[0]
      .id;
    const before = responsesCalls();
    const shapes = [
      { type: 'reasoning', id: item, summary: [], encrypted_content: '' },
      { type: 'reasoning', id: item, summary: [], encrypted_content: 0 },
      { type: 'compaction', id: item },
      { id: item, content: null },
      { id: item, role: null },
      { id: item, role: 'assistant' },
    ];
    for (const shape of shapes) {
      const res = await postResponses(url, globex, { input: [shape, { role: 'user', content: 'what was it?' }] });
      expect({ shape, status: res.status, body: await res.json() }).toMatchObject({
        shape,
        status: 400,
        body: { error: { code: 'item_not_found', param: 'input[0].id' } },
      });
    }
    expect(responsesCalls()).toBe(before);
    // The tenant's own, in the same shapes, is served; so is a message passed back with its id.
    for (const shape of [...shapes, { type: 'message', id: item, role: 'assistant', content: [] }])
      expect((await postResponses(url, acme, { input: [shape, { role: 'user', content: 'what was it?' }] })).status).toBe(200);
  });

  it("another tenant's image passed back by its image_generation_call id alone (OpenAI reads the image from the stored item) is item_not_found", async () => {
    const { url } = await w.up();
    const acme = (await w.makeKey('acme')).key;
    const globex = (await w.makeKey('globex')).key;
    const item = ((await (await postResponses(url, acme, { input: 'draw my secret' })).json()) as { output: Array<{ id: string }> })
      .output[0].id;
    const before = responsesCalls();
    const edit = (call: object) => ({
      input: [{ role: 'user', content: 'make it realistic' }, call],
      tools: [{ type: 'image_generation' }],
    });
    // before: 200 for both, the provider asked to edit acme's image for globex
    for (const call of [
      { type: 'image_generation_call', id: item },
      { type: 'image_generation_call', id: item, result: '' },
    ]) {
      const res = await postResponses(url, globex, edit(call));
      expect({ call, status: res.status, body: await res.json() }).toMatchObject({
        call,
        status: 400,
        body: { error: { code: 'item_not_found', param: 'input[1].id' } },
      });
    }
    expect(responsesCalls()).toBe(before);
    // Its own tenant's is served; so is one that carries its image (the stateless form).
    expect((await postResponses(url, acme, edit({ type: 'image_generation_call', id: item }))).status).toBe(200);
    expect((await postResponses(url, globex, edit({ type: 'image_generation_call', id: item, result: 'iVBORw0KGgo=' }))).status).toBe(200);
  });

  it("a conversation is no tenant's (the gateway creates none): continuing one on the provider key is conversation_not_found, nothing called", async () => {
    const { url } = await w.up();
    const acme = (await w.makeKey('acme')).key;
    const before = responsesCalls();
    for (const conversation of ['conv_operator', { id: 'conv_operator' }]) {
      const refused = await refusal(
        client(url, acme).responses.create({ model: 'gpt-4o-mini', input: 'what was said so far?', conversation }),
      );
      expect(refused).toMatchObject({
        status: 400,
        code: 'conversation_not_found',
        message: "Conversation with id 'conv_operator' not found.",
      });
    }
    expect(responsesCalls()).toBe(before);
  });

  it('an id quoted in a not-found refusal is cut to 100 characters between characters, never inside an emoji', async () => {
    const { url } = await w.up();
    const acme = (await w.makeKey('acme')).key;
    const id = `x${'😀'.repeat(80)}`; // the 100th character: half an emoji
    const quoted = `x${'😀'.repeat(49)}`;
    const byConversation = await refusal(client(url, acme).responses.create({ model: 'gpt-4o-mini', input: 'hi', conversation: id }));
    expect(byConversation).toMatchObject({ status: 400, message: `Conversation with id '${quoted}' not found.` });
    const byPrevious = await refusal(client(url, acme).responses.create({ model: 'gpt-4o-mini', input: 'hi', previous_response_id: id }));
    expect(byPrevious).toMatchObject({ status: 400, message: `Previous response with id '${quoted}' not found.` });
  });

  it("a response its provider sent after a byte-order mark is its tenant's too: the client read it, so it can continue it", async () => {
    const { url } = await w.up();
    const acme = (await w.makeKey('acme')).key;
    const stored = { id: 'resp_bom', object: 'response', store: true, status: 'completed', model: 'gpt-4o-mini', output: [] };
    const answer = Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(JSON.stringify(stored))]);
    w.hot.next({ kind: 'raw-stream', type: 'application/json', pieces: [answer] });
    const first = await client(url, acme).responses.create({ model: 'gpt-4o-mini', input: 'x' });
    expect(first.id).toBe('resp_bom');
    const next = await client(url, acme).responses.create({ model: 'gpt-4o-mini', input: 'y', previous_response_id: first.id });
    expect(next.output_text).toBe('native responses from gpt-4o-mini');
  });

  it('without keys nothing proves a tenant: nothing is checked, and nothing is recorded in Redis', async () => {
    const { url } = await w.up({ GATEWAY_AUTH: 'open' });
    const first = await client(url, 'unused').responses.create({ model: 'gpt-4o-mini', input: 'x' });
    await client(url, 'unused').responses.create({ model: 'gpt-4o-mini', input: 'y', previous_response_id: first.id });
    expect(await w.redis.keys(`${w.prefix}:response-owner:*`)).toEqual([]);
  });

  it('a response asked not to be stored is not recorded: nothing can continue it', async () => {
    const { url } = await w.up();
    const acme = (await w.makeKey('acme')).key;
    const unstored = await client(url, acme).responses.create({ model: 'gpt-4o-mini', input: 'x', store: false });
    expect(await w.redis.keys(`${w.prefix}:response-owner:*`)).toEqual([]);
    const next = await refusal(client(url, acme).responses.create({ model: 'gpt-4o-mini', input: 'y', previous_response_id: unstored.id }));
    expect(next).toMatchObject({ status: 400, code: 'previous_response_not_found' });
  });

  it('a background response is refused with a key: it could never be read back here, and its tokens would escape --tpm and the meter', async () => {
    const { url } = await w.up();
    const acme = (await w.makeKey('acme', '--tpm', '20')).key;
    // What OpenAI answers at once to `background: true`: queued, no output, no usage yet.
    const queued = { id: 'resp_bg', object: 'response', status: 'queued', background: true, output: [], usage: null };
    w.hot.always({ kind: 'status', status: 200, body: queued });
    for (const stream of [false, true]) {
      const body = { model: 'gpt-4o-mini', input: 'a long essay', background: true, stream };
      const res = await postResponses(url, acme, body);
      expect(res.status).toBe(400);
      const { error } = (await res.json()) as { error: { message: string; param: string; code: string } };
      expect(error).toMatchObject({ param: 'background', code: 'unsupported_parameter' });
      expect(error.message).toMatch(/GET \/v1\/responses\/\{id\}, which this gateway does not serve/);
    }
    expect(responsesCalls()).toBe(0);
    w.hot.always({ kind: 'ok' });
    expect((await postResponses(url, acme, { input: 'x', background: false })).status).toBe(200);
  });

  it("a queued request's response is its tenant's once its job has completed", async () => {
    const acme = (await w.makeKey('acme')).key;
    const globex = (await w.makeKey('globex')).key;
    w.hot.always({ kind: 'status', status: 503 });
    w.warm.always({ kind: 'status', status: 503 });
    const { url } = await w.up();
    const queued = await postResponses(url, acme, { input: 'later is fine' }, {});
    expect(queued.status).toBe(202);
    const { jobId } = (await queued.json()) as { jobId: string };
    w.hot.always({ kind: 'ok' });
    const worker = await listenStack({ ...w.env }, { http: true, worker: true });
    try {
      await expectTenantsOwn(url, acme, globex, jobId);
    } finally {
      await worker.stop();
    }
  });

  // `npm run worker` is documented to take no client keys, so it was started without GATEWAY_AUTH:
  // outside production it then ran open, recorded no owner for the responses its jobs got, and the
  // tenant that queued one could not continue it (previous_response_not_found).
  it("a job run by a worker started without GATEWAY_AUTH still makes its response its tenant's", async () => {
    const acme = (await w.makeKey('acme')).key;
    const globex = (await w.makeKey('globex')).key;
    w.hot.always({ kind: 'status', status: 503 });
    w.warm.always({ kind: 'status', status: 503 });
    const { url } = await w.up();
    const queued = await postResponses(url, acme, { input: 'later is fine' }, {});
    expect(queued.status).toBe(202);
    const { jobId } = (await queued.json()) as { jobId: string };
    w.hot.always({ kind: 'ok' });
    const worker = await createStack({ ...w.env, GATEWAY_AUTH: undefined }, captureLogger([]), { http: false, worker: true });
    try {
      await expectTenantsOwn(url, acme, globex, jobId);
    } finally {
      await worker.close();
    }
  });

  // The other way round: gateways run open (nothing recorded), a worker with client keys (production's
  // default) found no owner for the response a queued job continued, and dead-lettered it as not found.
  it('a job queued by an open gateway continues its response on a worker whose GATEWAY_AUTH is keys', async () => {
    const { url } = await w.up({ GATEWAY_AUTH: 'open' });
    const first = await client(url, 'unused').responses.create({ model: 'gpt-4o-mini', input: 'remember: 42' });
    w.hot.always({ kind: 'status', status: 503 });
    w.warm.always({ kind: 'status', status: 503 });
    const queued = await postResponses(url, 'unused', { input: 'and?', previous_response_id: first.id }, {});
    expect(queued.status).toBe(202);
    const { jobId } = (await queued.json()) as { jobId: string };
    w.hot.always({ kind: 'ok' });
    const worker = await createStack({ ...w.env, GATEWAY_AUTH: 'keys' }, captureLogger([]), { http: false, worker: true });
    try {
      const done = await jobEnded(url, 'unused', jobId);
      expect(done).toMatchObject({ state: 'completed', lastError: null });
    } finally {
      await worker.close();
    }
  });

  it('a request continuing a stored response goes only to the provider that keeps it: with its routes down, queued, never sent to another', async () => {
    const other = await new FakeProvider().start();
    try {
      // A Warm route of another provider that offers the Responses API natively too.
      const routes = writeTwoNativeMap(other.url);
      const { url } = await w.up({ ROUTES_FILE: routes });
      const acme = (await w.makeKey('acme')).key;
      const first = await client(url, acme).responses.create({ model: 'gpt-4o-mini', input: 'remember: 42' });
      w.hot.always({ kind: 'status', status: 503 });
      const continued = await postResponses(url, acme, { input: 'what was it?', previous_response_id: first.id });
      // The other provider knows nothing of it: it would answer without the conversation, or not at all.
      expect(continued.status).toBe(202);
      expect(other.received.filter((r) => r.path === '/v1/responses')).toHaveLength(0);

      // Queued, it waits for that provider too: run once its route answers again.
      const { jobId } = (await continued.json()) as { jobId: string };
      w.hot.always({ kind: 'ok' });
      const worker = await listenStack({ ...w.env, ROUTES_FILE: routes }, { http: true, worker: true });
      try {
        expect((await jobEnded(url, acme, jobId)).state).toBe('completed');
        expect(w.hot.received.at(-1)!.body).toMatchObject({ previous_response_id: first.id });
        expect(other.received.filter((r) => r.path === '/v1/responses')).toHaveLength(0);
      } finally {
        await worker.stop();
      }

      // A new conversation fails over as any request does.
      w.hot.next({ kind: 'status', status: 503 }, { kind: 'status', status: 503 }, { kind: 'status', status: 503 });
      const fresh = await client(url, acme).responses.create({ model: 'gpt-4o-mini', input: 'hello' });
      expect(fresh.output_text).toBe('native responses from gpt-4o-mini');
      expect(other.received.filter((r) => r.path === '/v1/responses')).toHaveLength(1);
    } finally {
      await other.stop();
    }
  });

  it('a request continuing a response whose provider a reload removed is refused at once, and its queued job dead-lettered at its next run', async () => {
    const other = await new FakeProvider().start();
    try {
      const routes = writeTwoNativeMap(other.url);
      const env = { ROUTES_FILE: routes, ADMIN_TOKEN: ADMIN, CAPPED_PROVIDER: 'azure-openai' };
      const { url } = await w.up(env);
      const acme = (await w.makeKey('acme')).key;
      const first = await client(url, acme).responses.create({ model: 'gpt-4o-mini', input: 'remember: 42' });
      const follow = () => postResponses(url, acme, { input: 'what was it?', previous_response_id: first.id });
      w.hot.always({ kind: 'status', status: 503 });
      const queued = await follow(); // its provider down: queued, to wait for it
      expect(queued.status).toBe(202);
      const { jobId } = (await queued.json()) as { jobId: string };

      const azureHot = { provider: 'azure-openai', model: 'gpt-4o-mini', baseUrl: other.url, apis: ['chat', 'responses'], id: 'azure-hot' };
      writeTwoNativeMap(other.url, azureHot); // no route of openai any more
      const reloaded = await fetch(`${url}/admin/routes/reload`, { method: 'POST', headers: { authorization: `Bearer ${ADMIN}` } });
      expect(await reloaded.json()).toMatchObject({ removed: [expect.any(String)] });
      const gone = await follow();
      expect(gone.status).toBe(400);
      expect(await gone.json()).toEqual({
        error: {
          message: `Previous response with id '${first.id}' was stored by provider "openai", which no route of the routing map serves any more: start a new conversation without previous_response_id`,
          type: 'invalid_request_error',
          param: 'previous_response_id',
          code: 'previous_response_provider_gone',
        },
      });
      const item = first.output[0].id!;
      const byItem = await refusal(
        client(url, acme).responses.create({ model: 'gpt-4o-mini', input: [{ type: 'item_reference', id: item }] }),
      );
      expect(byItem).toMatchObject({ status: 400, code: 'item_provider_gone' });
      expect(other.received.filter((r) => r.path === '/v1/responses')).toHaveLength(0);

      // The queued job: dead-lettered at its first run, not deferred for 24 h waiting for a route.
      const worker = await listenStack({ ...w.env, ...env }, { http: true, worker: true });
      try {
        const job = await jobEnded(url, acme, jobId);
        expect(job.state).toBe('dead-lettered');
        expect(job.lastError).toContain('no route of the routing map serves any more');
        expect(other.received.filter((r) => r.path === '/v1/responses')).toHaveLength(0);
      } finally {
        await worker.stop();
      }
    } finally {
      await other.stop();
    }
  });

  it('a queued job continuing a response whose owner expired while it waited is dead-lettered at its first run, sent to no other provider', async () => {
    const other = await new FakeProvider().start();
    try {
      const routes = writeTwoNativeMap(other.url);
      const { url } = await w.up({ ROUTES_FILE: routes });
      const acme = (await w.makeKey('acme')).key;
      const first = await client(url, acme).responses.create({ model: 'gpt-4o-mini', input: 'remember: 42' });
      const item = first.output[0].id!;
      w.hot.always({ kind: 'status', status: 503 });
      const queue = async (body: object) => {
        const queued = await postResponses(url, acme, body);
        expect(queued.status).toBe(202);
        return ((await queued.json()) as { jobId: string }).jobId;
      };
      const byPrevious = await queue({ input: 'what was it?', previous_response_id: first.id });
      const byItem = await queue({ input: [{ type: 'item_reference', id: item }] });
      // Their owners' 30 days end while the jobs wait (the provider keeps the responses no longer either).
      expect(await w.redis.del(`${w.prefix}:response-owner:${first.id}`, `${w.prefix}:response-owner:${item}`)).toBe(2);
      const hotCalls = responsesCalls();

      const worker = await listenStack({ ...w.env, ROUTES_FILE: routes }, { http: true, worker: true });
      try {
        const ended = (jobId: string) => jobEnded(url, acme, jobId);
        expect(await ended(byPrevious)).toMatchObject({
          state: 'dead-lettered',
          attempts: 1,
          lastError: `Previous response with id '${first.id}' not found.`,
        });
        expect(await ended(byItem)).toMatchObject({ state: 'dead-lettered', attempts: 1, lastError: `Item with id '${item}' not found.` });
        expect(other.received.filter((r) => r.path === '/v1/responses')).toHaveLength(0);
        expect(responsesCalls()).toBe(hotCalls);
      } finally {
        await worker.stop();
      }
    } finally {
      await other.stop();
    }
  });

  it('a follow-up whose provider is left only a route that cannot serve it (embeddings) is refused as provider_gone, translatable or not', async () => {
    const other = await new FakeProvider().start();
    try {
      const routes = writeTwoNativeMap(other.url);
      const { url } = await w.up({ ROUTES_FILE: routes, ADMIN_TOKEN: ADMIN });
      const acme = (await w.makeKey('acme')).key;
      const first = await client(url, acme).responses.create({ model: 'gpt-4o-mini', input: 'remember: 42' });
      const embeddingsOnly = { provider: 'openai', model: 'text-embedding-3-small', baseUrl: w.hot.url, apis: ['embeddings'] };
      writeTwoNativeMap(other.url, embeddingsOnly);
      const reloaded = await fetch(`${url}/admin/routes/reload`, { method: 'POST', headers: { authorization: `Bearer ${ADMIN}` } });
      expect(reloaded.status).toBe(200);
      const item = first.output[0].id!;
      // A reasoning item given by id only is read from the store, yet the request translates to chat (it is dropped).
      const translatable = await refusal(
        client(url, acme).responses.create({
          model: 'gpt-4o-mini',
          input: [
            { type: 'reasoning', id: item, summary: [] },
            { role: 'user', content: 'what was it?' },
          ],
        }),
      );
      expect(translatable).toMatchObject({ status: 400, code: 'item_provider_gone' });
      const previous = await refusal(
        client(url, acme).responses.create({ model: 'gpt-4o-mini', input: 'what was it?', previous_response_id: first.id }),
      );
      expect(previous).toMatchObject({ status: 400, code: 'previous_response_provider_gone' });
    } finally {
      await other.stop();
    }
  });
});

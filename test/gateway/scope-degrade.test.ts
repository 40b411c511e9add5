// A scope's degrade mode: a smaller model or a shorter context is tried before the queue.
import { afterEach, beforeEach, expect, it } from 'vitest';
import { FakeProvider } from './fake-provider';
import { ADMIN, chat, mapOf, startGateway, type TestGateway } from './harness';

let hot: FakeProvider, warm: FakeProvider;
let gw: TestGateway;
beforeEach(async () => {
  [hot, warm] = await Promise.all([new FakeProvider().start(), new FakeProvider().start()]);
  gw = await startGateway(mapOf([hot.url], [warm.url]), {
    scopes: {
      summary: { time_to_answer_ms: 10_000, degrade: 'smaller_model', smaller_model: 'gpt-4o-nano' },
      chatlog: { time_to_answer_ms: 10_000, degrade: 'shorter_context', keep_last_messages: 2 },
    },
  });
});
afterEach(async () => {
  await gw.close();
  await Promise.all([hot.stop(), warm.stop()]);
});
const fail3 = () => Array(3).fill({ kind: 'status', status: 500 });

it('smaller_model: after Hot and Warm fail, the smaller model is tried before queueing', async () => {
  hot.next(...fail3());
  warm.next(...fail3());
  const res = await chat(gw.url, undefined, { 'x-job-type': 'summary' });
  expect(res.status).toBe(200);
  expect(res.headers.get('x-route-model')).toBe('gpt-4o-nano');
  expect(res.headers.get('x-route-attempts')).toBe('7');
  expect(hot.received.at(-1)!.body.model).toBe('gpt-4o-nano');
});

it('shorter_context: the system message and the last messages are sent again', async () => {
  hot.next(...fail3());
  warm.next(...fail3());
  const messages = [
    { role: 'system', content: 'be brief' },
    ...Array.from({ length: 6 }, (_, i) => ({ role: i % 2 ? 'assistant' : 'user', content: `m${i}` })),
  ];
  const res = await chat(gw.url, { model: 'x', messages }, { 'x-job-type': 'chatlog' });
  expect(res.status).toBe(200);
  expect(hot.received.at(-1)!.body.messages.map((m: { content: string }) => m.content)).toEqual(['be brief', 'm4', 'm5']);
  expect(hot.received[0].body.messages).toHaveLength(7);
});

it('smaller_model never applies to embeddings: another model is not asked, and the request goes on to the fallback', async () => {
  const vectors = await new FakeProvider().start();
  const map = mapOf([hot.url], [warm.url]);
  map.hot.push({ provider: 'openai', model: 'text-embedding-3-small', baseUrl: vectors.url, apis: ['embeddings'] });
  map.hot.push({ provider: 'openai', model: 'text-embedding-3-large', baseUrl: vectors.url, apis: ['embeddings'] });
  const embeddings = await startGateway(map, {
    scopes: { index: { time_to_answer_ms: 10_000, degrade: 'smaller_model', smaller_model: 'text-embedding-3-large' } },
  });
  try {
    vectors.always({ kind: 'status', status: 503 });
    const res = await fetch(`${embeddings.url}/v1/embeddings`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-job-type': 'index' },
      body: JSON.stringify({ model: 'text-embedding-3-small', input: 'a' }),
    });
    expect(res.status).toBe(503);
    expect(vectors.received.map((r) => r.body.model)).toEqual(Array(3).fill('text-embedding-3-small'));
  } finally {
    await embeddings.close();
    await vectors.stop();
  }
});

it('a killed smaller model is not called by the fallback: the request fails as with no variant', async () => {
  hot.next(...fail3());
  warm.next(...fail3());
  const put = await fetch(`${gw.url}/admin/flags`, {
    method: 'PUT',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${ADMIN}` },
    body: JSON.stringify({ killed_models: ['gpt-4o-nano'] }),
  });
  expect(put.status).toBe(200);
  expect(await put.json()).not.toHaveProperty('unmatched_killed_models'); // a smaller model is one a call names
  const res = await chat(gw.url, undefined, { 'x-job-type': 'summary' });
  expect(res.status).toBe(503);
  expect([...hot.received, ...warm.received].map((r) => r.body.model)).not.toContain('gpt-4o-nano');
  // Six calls failed: the client is told no route answered (an outage to look for), not that none could be called.
  expect([res.headers.get('x-route-attempts'), res.json().error.message]).toEqual(['6', 'no route answered (warm-1: HTTP 500)']);
});

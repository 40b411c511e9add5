// The gateway against providers that are real HTTP servers on loopback.
import { gzipSync } from 'node:zlib';
import { calcPrice } from '@pydantic/genai-prices';
import OpenAI from 'openai';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { idempotencyKeyFor } from '../../gateway/src/request-context';
import { asMistral, FakeProvider, refusedUrl, type Behaviour } from './fake-provider';
import { ADMIN, chat, mapOf, startGateway, type TestGateway } from './harness';

let hot1: FakeProvider, hot2: FakeProvider, warmA: FakeProvider, warmB: FakeProvider;
let gw: TestGateway | undefined;
beforeEach(async () => {
  [hot1, hot2, warmA, warmB] = await Promise.all([0, 1, 2, 3].map(() => new FakeProvider().start()));
});
afterEach(async () => {
  await gw?.close();
  gw = undefined;
  await Promise.all([hot1, hot2, warmA, warmB].map((p) => p.stop()));
});
const all = () => mapOf([hot1.url, hot2.url], [warmA.url, warmB.url]);
const client = (url: string) => new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused-by-gateway', maxRetries: 0 });

describe('OpenAI compatibility', () => {
  it('the official openai client works by changing baseURL only, with the route headers', async () => {
    gw = await startGateway(all());
    const { data, response } = await client(gw.url)
      .chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'hi' }] })
      .withResponse();
    expect(data.choices[0].message.content).toBe('hello from gpt-4o-mini'); // the route's model is used
    expect(response.headers.get('x-route-tier')).toBe('hot');
    expect(response.headers.get('x-route-provider')).toBe('openai');
    expect(response.headers.get('x-route-model')).toBe('gpt-4o-mini');
    expect(response.headers.get('x-route-attempts')).toBe('1');
    const [sent] = hot1.received;
    expect(sent.headers.authorization).toBe('Bearer key-hot-openai');
    expect(sent.headers['content-type']).toBe('application/json');
    expect(sent.body.model).toBe('gpt-4o-mini');
  });

  it('a large answer arrives whole: 3 MB read from the provider in many pieces, characters cut between them intact', async () => {
    gw = await startGateway(all());
    const content = 'a€𝄞'.repeat(400_000); // 3.2 MB of UTF-8: reads end inside characters
    hot1.always({ kind: 'ok', content, usage: { prompt_tokens: 7, completion_tokens: 900_000 } });
    const data = await client(gw.url).chat.completions.create({ model: 'x', messages: [{ role: 'user', content: 'long' }] });
    expect(data.choices[0].message.content === content).toBe(true);
    await gw.meter.flush();
    expect(gw.events().map((e) => [e.input_tokens, e.output_tokens])).toEqual([['7', '900000']]);
  });

  it('streams through the openai client; the usage chunk reaches only clients that ask for it', async () => {
    gw = await startGateway(all());
    hot1.always({ kind: 'stream', chunks: 4 });
    const stream = await client(gw.url).chat.completions.create({ model: 'x', messages: [{ role: 'user', content: 'hi' }], stream: true });
    let text = '';
    const chunks = [];
    for await (const chunk of stream) {
      chunks.push(chunk);
      text += chunk.choices[0]?.delta?.content ?? '';
    }
    expect(text).toBe('part0 part1 part2 part3');
    expect(chunks.every((c) => c.choices.length === 1)).toBe(true);
    expect(hot1.received[0].body.stream_options).toEqual({ include_usage: true });

    const withUsage = await client(gw.url).chat.completions.create({
      model: 'x',
      messages: [{ role: 'user', content: 'hi' }],
      stream: true,
      stream_options: { include_usage: true },
    });
    let usage = null;
    for await (const chunk of withUsage) if (chunk.usage) usage = chunk.usage;
    expect(usage).toMatchObject({ prompt_tokens: 20, completion_tokens: 4 });
    await gw.meter.flush();
    expect(gw.events().map((e) => [e.input_tokens, e.output_tokens])).toEqual([
      ['20', '4'],
      ['20', '4'],
    ]);
  });

  it('refuses a body that is not a chat-completions request with 400 in OpenAI shape, calling no provider', async () => {
    gw = await startGateway(all());
    const res = await chat(gw.url, { model: 'x', messages: [] });
    expect(res.status).toBe(400);
    expect(res.json()).toEqual({
      error: { message: expect.stringMatching(/^messages: /), type: 'invalid_request_error', param: 'messages', code: 'invalid_value' },
    });
    expect((await chat(gw.url, { messages: [{ role: 'robot', content: 'x' }], model: 'x' })).json().error.param).toBe('messages[0].role');
    const raw = await fetch(`${gw.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{not json',
    });
    expect(raw.status).toBe(400);
    expect(((await raw.json()) as { error: { type: string } }).error.type).toBe('invalid_request_error');
    await expect(client(gw.url).chat.completions.create({ model: 'x', messages: [] })).rejects.toBeInstanceOf(OpenAI.BadRequestError);
    expect(hot1.received).toHaveLength(0);
  });
});

describe('request bodies (the chat endpoint reads its own)', () => {
  const post = (url: string, body: string | Buffer, headers: Record<string, string>) =>
    fetch(`${url}/v1/chat/completions`, { method: 'POST', headers, body });
  const good = JSON.stringify({ model: 'x', messages: [{ role: 'user', content: 'hi' }] });

  it('refuses a body that is not JSON by type (400), by size (413) or by coding (415), in OpenAI shape, calling no provider', async () => {
    gw = await startGateway(all());
    const text = await post(gw.url, good, { 'content-type': 'text/plain' });
    expect(text.status).toBe(400);
    expect(((await text.json()) as { error: { message: string; type: string } }).error).toMatchObject({
      type: 'invalid_request_error',
      message: expect.stringMatching(/^Content-Type: expected application\/json, got "text\/plain"/),
    });
    const huge = await post(gw.url, JSON.stringify({ model: 'x', messages: [{ role: 'user', content: 'y'.repeat(21 * 1024 * 1024) }] }), {
      'content-type': 'application/json',
    });
    expect(huge.status).toBe(413);
    expect(((await huge.json()) as { error: { message: string } }).error.message).toMatch(/^body: larger than 20971520 bytes/);
    const squeezed = await post(gw.url, Buffer.from('not gzip'), { 'content-type': 'application/json', 'content-encoding': 'gzip' });
    expect(squeezed.status).toBe(400);
    const zipped = await post(gw.url, good, { 'content-type': 'application/json', 'content-encoding': 'zstd' });
    expect(zipped.status).toBe(415);
    expect(((await zipped.json()) as { error: { message: string } }).error.message).toBe(
      'Content-Encoding: expected identity, gzip, deflate or br, got "zstd"',
    );
    expect(hot1.received).toHaveLength(0);
  });

  it('accepts a gzip body, a JSON type with charset, and the path with a query string', async () => {
    gw = await startGateway(all());
    expect((await post(gw.url, gzipSync(good), { 'content-type': 'application/json', 'content-encoding': 'gzip' })).status).toBe(200);
    expect((await post(gw.url, good, { 'content-type': 'application/json; charset=utf-8' })).status).toBe(200);
    const query = await fetch(`${gw.url}/v1/chat/completions?trace=1`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: good,
    });
    expect(query.status).toBe(200);
    expect(query.headers.get('x-route-tier')).toBe('hot');
    expect(hot1.received).toHaveLength(3);
    expect(hot1.received.every((r) => r.body.messages[0].content === 'hi')).toBe(true);
  });
});

/** PUT /admin/flags with the admin token: its status and its JSON. */
const putFlags = (url: string, body: unknown) =>
  fetch(`${url}/admin/flags`, {
    method: 'PUT',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${ADMIN}` },
    body: JSON.stringify(body),
  }).then(async (r) => ({ status: r.status, body: (await r.json()) as Record<string, any> }));

describe('failover', () => {
  it('Hot refusing connections: Warm answers; the same Idempotency-Key on every retry and tier', async () => {
    gw = await startGateway(mapOf([await refusedUrl(), hot2.url], [warmA.url]));
    hot2.always({ kind: 'status', status: 500 });
    const res = await chat(gw.url, undefined, { 'x-user-id': 'u1', 'x-job-id': 'j1' });
    expect(res.status).toBe(200);
    expect(res.headers.get('x-route-tier')).toBe('warm');
    expect(res.headers.get('x-route-provider')).toBe('anthropic');
    expect(res.headers.get('x-route-attempts')).toBe('7'); // 3 + 3 failed, 1 answered
    const key = idempotencyKeyFor('u1', 'j1', [{ role: 'user', content: 'hi' }]);
    expect([...hot2.received, ...warmA.received].map((r) => r.headers['idempotency-key'])).toEqual(Array(4).fill(key));
    expect(warmA.received[0].headers.authorization).toBe('Bearer key-warm-anthropic');
    await gw.meter.flush();
    const codes = gw.events().map((e) => e.error_code);
    expect(codes).toEqual(['PROVIDER_DOWN', 'PROVIDER_DOWN', 'PROVIDER_DOWN', '500', '500', '500', '']);
  });

  it("passes the client's own Idempotency-Key through", async () => {
    gw = await startGateway(all());
    await chat(gw.url, undefined, { 'idempotency-key': 'client-key-1' });
    expect(hot1.received[0].headers['idempotency-key']).toBe('client-key-1');
  });

  it('honours Retry-After when it fits in the time left, and moves on when it does not', async () => {
    gw = await startGateway(all());
    hot1.next({ kind: 'status', status: 429, retryAfter: '1' });
    const waited = await chat(gw.url);
    expect(waited.headers.get('x-route-tier')).toBe('hot');
    expect(hot1.received).toHaveLength(2);
    expect(waited.ms).toBeGreaterThanOrEqual(950);

    hot1.next({ kind: 'status', status: 429, retryAfter: '5' });
    const moved = await chat(gw.url, undefined, { 'x-time-to-answer-ms': '2000' });
    expect(moved.status).toBe(200);
    expect(hot1.received).toHaveLength(3); // no second try on hot1
    expect(hot2.received).toHaveLength(1);
  });

  it('a revoked key (401) is not retried on the same route; the next route answers', async () => {
    gw = await startGateway(all());
    hot1.always({ kind: 'status', status: 401 });
    const res = await chat(gw.url);
    expect(res.status).toBe(200);
    expect(hot1.received).toHaveLength(1);
    expect(res.headers.get('x-route-attempts')).toBe('2');
  });

  it('a malformed request (400 from the provider) goes back as it is, no other route tried', async () => {
    gw = await startGateway(all());
    hot1.always({
      kind: 'status',
      status: 400,
      body: { error: { message: 'bad tool schema', type: 'invalid_request_error', param: 'tools', code: null } },
    });
    const res = await chat(gw.url);
    expect(res.status).toBe(400);
    expect(res.json().error.message).toBe('bad tool schema');
    expect(hot2.received.length + warmA.received.length).toBe(0);
  });

  it("an agent's conversation with OpenAI's tool call ids fails over to a Mistral route: each id it refuses goes as 9 letters and digits, a call and its output alike", async () => {
    const mistral = { provider: 'mistral', model: 'mistral-small-latest', baseUrl: asMistral(warmB).url };
    gw = await startGateway({ ...mapOf([hot1.url]), warm: [mistral] });
    hot1.always({ kind: 'status', status: 503 });
    const call = (id: string, city: string) => ({ id, type: 'function', function: { name: 'weather', arguments: `{"city":"${city}"}` } });
    const messages = [
      { role: 'user', content: 'Weather in Paris, Rome and Oslo?' },
      {
        role: 'assistant',
        content: null,
        tool_calls: [
          call('call_Qm3kX9vPzR2tLwY8nB4cJ7hD', 'Paris'),
          call('call_Zt5uA1sE6gH0jK2lN8pQ4rV3', 'Rome'),
          call('a1B2c3D4e', 'Oslo'),
        ],
      },
      { role: 'tool', tool_call_id: 'call_Qm3kX9vPzR2tLwY8nB4cJ7hD', content: '18C' },
      { role: 'tool', tool_call_id: 'call_Zt5uA1sE6gH0jK2lN8pQ4rV3', content: '24C' },
      { role: 'tool', tool_call_id: 'a1B2c3D4e', content: '9C' },
    ];
    const ask = () => chat(gw!.url, { model: 'gpt-4o-mini', messages }, { 'x-time-to-answer-ms': '8000' });
    const res = await ask();
    expect(res.status).toBe(200);
    expect(res.headers.get('x-route-provider')).toBe('mistral');
    expect(res.json().choices[0].message.content).toBe('hello from mistral-small-latest');

    const sent = warmB.received[0].body.messages;
    const ids = sent[1].tool_calls.map((c: { id: string }) => c.id);
    for (const id of ids) expect(id).toMatch(/^[a-zA-Z0-9]{9}$/);
    expect(ids[2]).toBe('a1B2c3D4e'); // already valid: sent as it is
    expect(new Set(ids).size).toBe(3);
    expect(sent.slice(2).map((m: { tool_call_id: string }) => m.tool_call_id)).toEqual(ids); // each output still answers its call
    expect(sent[1].tool_calls[0].function).toEqual(messages[1].tool_calls![0].function);
    // The OpenAI route got the ids as the client sent them; the same conversation again, the same ids to Mistral.
    expect(hot1.received[0].body.messages).toEqual(messages);
    expect((await ask()).status).toBe(200);
    expect(warmB.received[1].body.messages).toEqual(sent);
  });

  it('a stream that fails over to a Mistral route is answered, without the stream_options Mistral refuses; its usage read from its last chunk', async () => {
    const mistral = { provider: 'mistral', model: 'mistral-small-latest', baseUrl: asMistral(warmB).url };
    gw = await startGateway({ ...mapOf([hot1.url]), warm: [mistral] });
    hot1.always({ kind: 'status', status: 503 });
    // Mistral's stream: the usage comes with the finish, unasked.
    const chunk = (delta: object, extra: object = {}) =>
      `data: ${JSON.stringify({ id: 'm1', object: 'chat.completion.chunk', created: 1, model: 'mistral-small-latest', choices: [{ index: 0, delta, finish_reason: null }], ...extra })}\n\n`;
    const last = `data: ${JSON.stringify({
      id: 'm1',
      object: 'chat.completion.chunk',
      created: 1,
      model: 'mistral-small-latest',
      choices: [{ index: 0, delta: { content: '' }, finish_reason: 'stop' }],
      usage: { prompt_tokens: 31, completion_tokens: 2, total_tokens: 33 },
    })}\n\n`;
    const stream: Behaviour = {
      kind: 'raw-stream',
      pieces: [Buffer.from(chunk({ role: 'assistant', content: 'Bon' }) + chunk({ content: 'jour' }) + last + 'data: [DONE]\n\n')],
    };
    for (const asked of [undefined, { include_usage: true }]) {
      warmB.next(stream);
      const res = await chat(
        gw.url,
        { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }], stream: true, ...(asked ? { stream_options: asked } : {}) },
        { 'x-time-to-answer-ms': '8000' },
      );
      expect(res.status).toBe(200);
      expect(res.headers.get('x-route-provider')).toBe('mistral');
      const events = res.text.split('\n\n').filter(Boolean);
      expect(events.at(-1)).toBe('data: [DONE]');
      const chunks = events.slice(0, -1).map((e) => JSON.parse(e.slice('data: '.length)));
      expect(chunks.map((c) => c.choices[0].delta.content).join('')).toBe('Bonjour');
      expect(chunks.at(-1).usage).toEqual({ prompt_tokens: 31, completion_tokens: 2, total_tokens: 33 });
    }
    expect(warmB.received.map((r) => 'stream_options' in r.body)).toEqual([false, false]);
    expect(hot1.received[0].body.stream_options).toEqual({ include_usage: true }); // other kinds still asked
    await gw.meter.flush();
    expect(
      gw
        .events()
        .filter((e) => e.provider === 'mistral')
        .map((e) => [e.input_tokens, e.output_tokens, e.error_code]),
    ).toEqual([
      ['31', '2', ''],
      ['31', '2', ''],
    ]);
  });

  it("a request with OpenAI's max_completion_tokens fails over to a Mistral route, which refuses that name: sent as max_tokens", async () => {
    const mistral = { provider: 'mistral', model: 'mistral-small-latest', baseUrl: asMistral(warmB).url };
    gw = await startGateway({ ...mapOf([hot1.url]), warm: [mistral] });
    hot1.always({ kind: 'status', status: 503 });
    const limits = [
      { max_completion_tokens: 64 },
      { max_completion_tokens: 64, max_tokens: 100 },
      { max_completion_tokens: 64, max_tokens: 32 },
    ];
    for (const limit of limits) {
      const res = await chat(
        gw.url,
        { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }], ...limit },
        { 'x-time-to-answer-ms': '8000' },
      );
      expect(res.status).toBe(200);
      expect(res.json().choices[0].message.content).toBe('hello from mistral-small-latest');
    }
    expect(warmB.received.map((r) => [r.body.max_tokens, 'max_completion_tokens' in r.body])).toEqual([
      [64, false],
      [64, false], // the lower of the two: both limits kept
      [32, false],
    ]);
    expect(hot1.received[0].body).toMatchObject({ max_completion_tokens: 64 }); // other kinds get it as sent
  });

  it("OpenAI's answer message passed back as the openai client gives it (refusal, annotations) fails over to a Mistral route without the fields Mistral refuses", async () => {
    const mistral = { provider: 'mistral', model: 'mistral-small-latest', baseUrl: asMistral(warmB).url };
    gw = await startGateway({ ...mapOf([hot1.url]), warm: [mistral] });
    hot1.always({ kind: 'status', status: 503 });
    const call = { id: 'a1B2c3D4e', type: 'function', function: { name: 'weather', arguments: '{"city":"Paris"}' } };
    const messages = [
      { role: 'user', content: 'Weather in Paris?' },
      { role: 'assistant', content: null, refusal: null, annotations: [], tool_calls: [call] },
      { role: 'tool', tool_call_id: 'a1B2c3D4e', content: '18C' },
      { role: 'assistant', content: 'It is 18C in Paris.', refusal: null, annotations: [], audio: null, function_call: null },
      { role: 'user', content: 'And tomorrow?' },
    ];
    const res = await chat(gw.url, { model: 'gpt-4o-mini', messages }, { 'x-time-to-answer-ms': '8000' });
    expect(res.status).toBe(200);
    expect(res.json().choices[0].message.content).toBe('hello from mistral-small-latest');
    expect(warmB.received[0].body.messages).toEqual([
      messages[0],
      { role: 'assistant', content: null, tool_calls: [call] },
      messages[2],
      { role: 'assistant', content: 'It is 18C in Paris.' },
      messages[4],
    ]);
    expect(hot1.received[0].body.messages).toEqual(messages); // other kinds get it as sent
  });

  it("a request with the fields of OpenAI's chat API Mistral has not fails over to a Mistral route: sent without them, seed as random_seed", async () => {
    const mistral = { provider: 'mistral', model: 'mistral-small-latest', baseUrl: asMistral(warmB).url };
    gw = await startGateway({ ...mapOf([hot1.url]), warm: [mistral] });
    hot1.always({ kind: 'status', status: 503 });
    const weather = { name: 'weather', description: 'Weather in a city', parameters: { type: 'object', properties: {} }, strict: true };
    const call = { id: 'a1B2c3D4e', type: 'function', function: { name: 'weather', arguments: '{}' } };
    const request = {
      model: 'gpt-4o-mini',
      messages: [
        { role: 'system', content: 'Be brief.', name: 'rules' },
        { role: 'user', content: 'Weather?', name: 'ada' },
        { role: 'assistant', content: null, tool_calls: [call], reasoning_content: 'Asking the tool.' },
        { role: 'tool', tool_call_id: 'a1B2c3D4e', content: '18C' },
      ],
      tools: [{ type: 'function', function: weather }],
      tool_choice: 'auto',
      parallel_tool_calls: false,
      temperature: 0.2,
      seed: 7,
      metadata: { team: 'support' },
      prompt_cache_key: 'support-v1',
      // Mistral has none of these: the answer lacks what they ask for (logprobs, a web search), no more.
      store: false,
      user: 'user-42',
      safety_identifier: 'hash-42',
      service_tier: 'auto',
      logprobs: true,
      top_logprobs: 2,
      logit_bias: { '1234': -100 },
      verbosity: 'low',
      modalities: ['text'],
      web_search_options: {},
    };
    const res = await chat(gw.url, request, { 'x-time-to-answer-ms': '8000' });
    expect(res.status).toBe(200);
    expect(res.headers.get('x-route-provider')).toBe('mistral');
    expect(res.json().choices[0].message.content).toBe('hello from mistral-small-latest');
    expect(warmB.received[0].body).toEqual({
      model: 'mistral-small-latest',
      messages: [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'Weather?' },
        { role: 'assistant', content: null, tool_calls: [call] },
        request.messages[3],
      ],
      tools: [{ type: 'function', function: weather }],
      tool_choice: 'auto',
      parallel_tool_calls: false,
      temperature: 0.2,
      random_seed: 7,
      metadata: { team: 'support' },
      prompt_cache_key: 'support-v1',
    });
    expect(hot1.received[0].body).toEqual({ ...request, model: hot1.received[0].body.model }); // other kinds get it as sent
  });

  it("a conversation with OpenAI's developer message (its reasoning models' system message) fails over to a Mistral route: sent as a system message", async () => {
    const mistral = { provider: 'mistral', model: 'mistral-small-latest', baseUrl: asMistral(warmB).url };
    gw = await startGateway({ ...mapOf([hot1.url]), warm: [mistral] });
    hot1.always({ kind: 'status', status: 503 });
    const messages = [
      { role: 'developer', content: 'Answer in French.', name: 'rules' },
      { role: 'user', content: 'Hello?' },
    ];
    const res = await chat(gw.url, { model: 'gpt-5-mini', messages }, { 'x-time-to-answer-ms': '8000' });
    expect(res.status).toBe(200);
    expect(res.json().choices[0].message.content).toBe('hello from mistral-small-latest');
    expect(warmB.received[0].body.messages).toEqual([{ role: 'system', content: 'Answer in French.' }, messages[1]]);
    expect(hot1.received[0].body.messages).toEqual(messages); // other kinds get it as sent
  });

  it('a function tool without parameters (one that takes none, to OpenAI) fails over to a Mistral route, which requires them: sent with none', async () => {
    const mistral = { provider: 'mistral', model: 'mistral-small-latest', baseUrl: asMistral(warmB).url };
    gw = await startGateway({ ...mapOf([hot1.url]), warm: [mistral] });
    hot1.always({ kind: 'status', status: 503 });
    const tools = [
      { type: 'function', function: { name: 'now', description: 'The time now' } },
      { type: 'function', function: { name: 'weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } },
    ];
    const res = await chat(
      gw.url,
      { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'What time is it?' }], tools },
      { 'x-time-to-answer-ms': '8000' },
    );
    expect(res.status).toBe(200);
    expect(res.json().choices[0].message.content).toBe('hello from mistral-small-latest');
    expect(warmB.received[0].body.tools).toEqual([
      { type: 'function', function: { name: 'now', description: 'The time now', parameters: { type: 'object', properties: {} } } },
      tools[1],
    ]);
    expect(hot1.received[0].body.tools).toEqual(tools); // other kinds get it as sent
  });

  it("a request with OpenAI's reasoning_effort fails over to a Mistral route: answered in text, not in the list of thinking and text parts Mistral's models give when asked to reason", async () => {
    const mistral = { provider: 'mistral', model: 'mistral-small-latest', baseUrl: asMistral(warmB).url };
    gw = await startGateway({ ...mapOf([hot1.url]), warm: [mistral] });
    hot1.always({ kind: 'status', status: 503 });
    // Mistral's answer when asked to reason: its content a list of parts.
    const thinking = [
      { type: 'thinking', thinking: [{ type: 'text', text: 'The user greets me.' }] },
      { type: 'text', text: 'Bonjour !' },
    ];
    warmB.when(
      (body) => body.reasoning_effort !== undefined,
      () => ({
        kind: 'status',
        status: 200,
        body: {
          id: 'm1',
          object: 'chat.completion',
          created: 1,
          model: 'mistral-small-latest',
          choices: [{ index: 0, message: { role: 'assistant', content: thinking }, finish_reason: 'stop' }],
          usage: { prompt_tokens: 9, completion_tokens: 12, total_tokens: 21 },
        },
      }),
    );
    const res = await client(gw.url).chat.completions.create(
      { model: 'gpt-5-mini', messages: [{ role: 'user', content: 'Hello' }], reasoning_effort: 'low' },
      { headers: { 'x-time-to-answer-ms': '8000' } },
    );
    expect(res.choices[0].message.content).toBe('hello from mistral-small-latest');
    expect('reasoning_effort' in warmB.received[0].body).toBe(false);
    expect(hot1.received[0].body.reasoning_effort).toBe('low'); // other kinds get it as sent
  });

  it('never answers later than the time-to-answer, even with every provider hanging', async () => {
    gw = await startGateway(all());
    for (const p of [hot1, hot2, warmA, warmB]) p.always({ kind: 'hang' });
    const res = await chat(gw.url, undefined, { 'x-time-to-answer-ms': '400' });
    expect(res.ms).toBeLessThan(400 + 100); // the deadline plus loopback and scheduling slack
    expect([503, 504]).toContain(res.status);
    expect(res.json().error.code).toBe('time_to_answer');
    expect((await chat(gw.url, undefined, { 'x-time-to-answer-ms': 'soon' })).status).toBe(400);
  });

  it('a last route that used up the time-to-answer is a 504 time_to_answer, not a 503', async () => {
    gw = await startGateway(mapOf([hot1.url]));
    hot1.always({ kind: 'hang' });
    const res = await chat(gw.url, undefined, { 'x-time-to-answer-ms': '300' });
    expect(res.status).toBe(504);
    expect(res.json().error.code).toBe('time_to_answer');
  });

  it('flags: warm fallback off, and a killed model, are honoured and changeable at run time', async () => {
    gw = await startGateway(all());
    hot1.always({ kind: 'status', status: 500 });
    hot2.always({ kind: 'status', status: 500 });
    const put = (body: unknown, token = ADMIN) =>
      fetch(`${gw!.url}/admin/flags`, {
        method: 'PUT',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
        body: JSON.stringify(body),
      });
    expect((await put({ enable_warm_fallback: false }, 'wrong')).status).toBe(401);
    const health = (authorization: string) => fetch(`${gw!.url}/health`, { headers: { authorization } }).then((r) => r.status);
    expect(await health(`bearer ${ADMIN}`)).toBe(200); // the scheme is case-insensitive (RFC 9110), as for client keys
    expect(await health(`Basic ${ADMIN}`)).toBe(401);
    expect((await put({ enable_warm_fallback: 'no' })).status).toBe(400);
    expect((await put({ enable_warm_fallback: false })).status).toBe(200);
    expect((await chat(gw.url, undefined, { 'x-time-to-answer-ms': '3000' })).status).toBe(503);
    expect(warmA.received).toHaveLength(0);
    await put({ enable_warm_fallback: true, killed_models: ['claude-3-5-haiku-latest'] });
    const res = await chat(gw.url, undefined, { 'x-time-to-answer-ms': '5000' });
    expect(res.headers.get('x-route-provider')).toBe('mistral');
    expect(warmA.received).toHaveLength(0);
    const models = (await (await fetch(`${gw.url}/v1/models`)).json()) as { data: Array<{ id: string }> };
    expect(models.data.map((m) => m.id)).not.toContain('claude-3-5-haiku-latest');
    expect((await fetch(`${gw.url}/v1/models/claude-3-5-haiku-latest`)).status).toBe(404);
  });

  it('a killed model no route calls (a typo, another case) is kept as sent, and the answer and the log name it', async () => {
    gw = await startGateway(all());
    const put = (body: unknown) => putFlags(gw!.url, body);
    const typo = await put({ killed_models: ['GPT-4o-mini', 'claude-3-5-haiku-latest', 'mistral-smal'] });
    expect(typo.status).toBe(200);
    expect(typo.body.killed_models).toEqual(['GPT-4o-mini', 'claude-3-5-haiku-latest', 'mistral-smal']);
    expect(typo.body.unmatched_killed_models).toEqual(['GPT-4o-mini', 'mistral-smal']);
    const warned = gw.logs.map((l) => JSON.parse(l) as { level: number; msg: string }).filter((l) => l.level === 40);
    expect(warned.map((l) => l.msg)).toContainEqual(expect.stringContaining('"GPT-4o-mini", "mistral-smal"'));
    // Matching is unchanged: the Hot route's gpt-4o-mini still answers.
    expect((await chat(gw.url)).headers.get('x-route-model')).toBe('gpt-4o-mini');
    const exact = await put({ killed_models: ['claude-3-5-haiku-latest'] });
    expect(exact.body).not.toHaveProperty('unmatched_killed_models');
  });

  it('a kill list is kept once per name and bounded: a name twice is one, too many names or one too long is a 400 naming it, and nothing changes', async () => {
    gw = await startGateway(all());
    const put = (body: unknown) => putFlags(gw!.url, body);
    const twice = await put({ killed_models: ['claude-3-5-haiku-latest', 'claude-3-5-haiku-latest'] });
    expect(twice.body.killed_models).toEqual(['claude-3-5-haiku-latest']);
    const many = await put({ killed_models: Array.from({ length: 1001 }, (_, i) => `model-${i}`) });
    expect([many.status, many.body.error]).toEqual([400, 'killed_models: expected at most 1000 names']);
    const long = await put({ killed_models: ['x'.repeat(1001)] });
    expect(long.status).toBe(400);
    expect(long.body.error).toMatch(/^killed_models\.0: /);
    expect(
      ((await (await fetch(`${gw.url}/admin/flags`, { headers: { authorization: `Bearer ${ADMIN}` } })).json()) as any).killed_models,
    ).toEqual(['claude-3-5-haiku-latest']);
  });
});

describe('a client that goes away', () => {
  it('cancels the provider call, tries no other route, and does not count against the route', async () => {
    gw = await startGateway(all());
    hot1.always({ kind: 'hang' });
    for (let i = 0; i < 6; i++) {
      await expect(
        fetch(`${gw.url}/v1/chat/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ model: 'x', messages: [{ role: 'user', content: `q${i}` }] }),
          signal: AbortSignal.timeout(100),
        }),
      ).rejects.toThrow();
    }
    await expect.poll(() => hot1.cancelled, { timeout: 2000 }).toBe(6);
    expect(hot2.received.length + warmA.received.length + warmB.received.length).toBe(0);
    // Six hang-ups are not six provider failures: the breaker stays closed.
    expect(gw.gateway.path.failover.routes[0].breaker.state()).toBe('closed');
    await gw.meter.flush();
    // Each was received by the provider, which bills its prompt: an estimate, marked (cut-stream-metering.test.ts).
    expect(gw.events().map((e) => e.error_code)).toEqual(Array(6).fill('CLIENT_CLOSED|ESTIMATED'));
  });

  it('mid-stream: the provider stream is cancelled and the hang-up is not a stream failure of the route', async () => {
    gw = await startGateway(all(), { breaker: { failureThreshold: 1 } });
    hot1.always({ kind: 'stream', chunks: 50, delayMs: 20 });
    const controller = new AbortController();
    const res = await fetch(`${gw.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'x', messages: [{ role: 'user', content: 'hi' }], stream: true }),
      signal: controller.signal,
    });
    const reader = res.body!.getReader();
    expect(new TextDecoder().decode((await reader.read()).value)).toContain('part0');
    controller.abort();
    await expect.poll(() => hot1.cancelled, { timeout: 2000 }).toBe(1);
    await gw.meter.flush();
    // The provider billed what it generated: an estimate, marked (cut-stream-metering.test.ts has the rule).
    await expect.poll(() => gw!.events().map((e) => e.error_code), { timeout: 2000 }).toEqual(['CLIENT_CLOSED|ESTIMATED']);
    // With a threshold of 1, one counted failure would have opened it.
    expect(gw.gateway.path.failover.routes[0].breaker.state()).toBe('closed');
  });
});

describe('streaming failures', () => {
  it('fails over before the first byte; a provider dying mid-stream ends the client stream with an error event', async () => {
    gw = await startGateway(all());
    hot1.always({ kind: 'stream', cutAfter: 0 }); // dies before its first byte: retried, then the next route
    hot2.always({ kind: 'stream', chunks: 5, cutAfter: 2, delayMs: 20 }); // dies after two chunks
    const res = await chat(gw.url, { model: 'x', messages: [{ role: 'user', content: 'hi' }], stream: true });
    expect(res.status).toBe(200);
    expect(res.headers.get('x-route-attempts')).toBe('4');
    expect(hot1.received).toHaveLength(3);
    expect(hot2.received).toHaveLength(1);
    expect(res.text).toContain('part0');
    expect(res.text).toContain('"code":"stream_interrupted"');
    expect(res.text).not.toContain('[DONE]');
    await gw.meter.flush();
    expect(gw.events().at(-1)!.error_code).toBe('STREAM_INTERRUPTED');
  });
});

describe('meter events', () => {
  it('one event per provider call with usage, latency, cost, job and customer; unpriced models leave cost empty and are flagged', async () => {
    gw = await startGateway(mapOf([hot1.url], [warmA.url], { warm: [{ provider: 'acme', model: 'acme-private-1', baseUrl: warmA.url }] }));
    hot1.next({ kind: 'status', status: 503 }, { kind: 'status', status: 503 }, { kind: 'status', status: 503 });
    await chat(gw.url, undefined, { 'x-job-id': 'job-9', 'x-customer-id': 'cust-3' });
    await chat(gw.url, undefined, { 'x-job-id': 'job-10', 'x-customer-id': 'cust-3' });
    await gw.meter.flush();
    const events = gw.events();
    expect(events).toHaveLength(5);
    const unpriced = events[3];
    expect(unpriced).toMatchObject({
      provider: 'acme',
      model: 'acme-private-1',
      input_tokens: '12',
      output_tokens: '5',
      cost_usd: '',
      job_id: 'job-9',
      customer_id: 'cust-3',
      actor_type: 'agent',
      error_code: 'UNPRICED', // flagged, never a silent $0: the meter counts these
    });
    expect(gw.logs.join('')).toContain('no price known for acme/acme-private-1');
    const priced = events[4];
    expect(priced).toMatchObject({ provider: 'openai', model: 'gpt-4o-mini', job_id: 'job-10', input_tokens: '12', output_tokens: '5' });
    const listed = calcPrice({ input_tokens: 12, output_tokens: 5 }, 'gpt-4o-mini', { providerId: 'openai' })!;
    expect(listed.total_price).toBeGreaterThan(0);
    expect(Number(priced.cost_usd)).toBe(listed.total_price);
    expect(new Set(events.map((e) => e.event_id)).size).toBe(5);
    // A route without a region says so with the record's word for "unknown".
    expect(new Set(events.map((e) => e.region))).toEqual(new Set(['global']));
  });
});

describe('meter event costs', () => {
  it('a computed cost is written as the decimal it is, not with the float arithmetic tail (11 tokens at $0.15/M is 0.00000165)', async () => {
    gw = await startGateway(mapOf([hot1.url]));
    hot1.always({ kind: 'ok', usage: { prompt_tokens: 11, completion_tokens: 0 } });
    expect((await chat(gw.url)).status).toBe(200);
    await gw.meter.flush();
    // before: 0.0000016499999999999999 (the price table's arithmetic in binary floating point)
    expect(gw.events().at(-1)).toMatchObject({ model: 'gpt-4o-mini', input_tokens: '11', cost_usd: '0.00000165' });
  });
});

describe('operator endpoints', () => {
  it('/health and /metrics need the admin token and show breaker, latency and the last-20 score', async () => {
    gw = await startGateway(all());
    await chat(gw.url);
    expect((await fetch(`${gw.url}/health`)).status).toBe(401);
    const health = (await (await fetch(`${gw.url}/health`, { headers: { authorization: `Bearer ${ADMIN}` } })).json()) as {
      routes: Array<Record<string, any>>;
    };
    expect(health.routes[0]).toMatchObject({
      tier: 'hot',
      provider: 'openai',
      model: 'gpt-4o-mini',
      breaker: 'closed',
      error_rate: 0,
      last_20: [1],
    });
    expect(health.routes[0].latency_p50_ms).toBeGreaterThanOrEqual(0);
    const metrics = await (await fetch(`${gw.url}/metrics`, { headers: { authorization: `Bearer ${ADMIN}` } })).text();
    // Each route by its id: the two Hot routes share provider and model and are still told apart.
    expect(metrics).toContain('gateway_route_calls_total{route="hot-1",outcome="ok"} 1');
    expect(metrics).toContain('gateway_breaker_state{route="hot-1"} 0');
    expect(metrics).toContain('gateway_breaker_state{route="hot-2"} 0');
    // A total that only grows is a counter, as its `_total` says: typed a gauge, promtool and
    // OpenMetrics scrapers refuse the name.
    expect(metrics).toContain('# TYPE gateway_breaker_open_seconds_total counter');
    expect(metrics).toContain('gateway_breaker_open_seconds_total{route="hot-1"} 0');
    // Counted for every OpenAI endpoint on the pipeline, and said so: not chat completions alone.
    expect(metrics).toMatch(/# HELP gateway_requests_total .*chat completions, responses and embeddings/);
  });

  it('the time a breaker was open is its open periods, not until the next request or scrape found it half-open', async () => {
    gw = await startGateway(mapOf([hot1.url]), { breaker: { failureThreshold: 1 } });
    hot1.always({ kind: 'status', status: 500 });
    const admin = { headers: { authorization: `Bearer ${ADMIN}` } };
    const openSeconds = async () => {
      const health = (await (await fetch(`${gw!.url}/health`, admin)).json()) as { routes: Array<Record<string, any>> };
      const metrics = await (await fetch(`${gw!.url}/metrics`, admin)).text();
      const gauge = /gateway_breaker_open_seconds_total\{route="hot-1"\} (\S+)/.exec(metrics)?.[1];
      return { state: health.routes[0].breaker, health: health.routes[0].breaker_open_seconds, gauge: Number(gauge) };
    };
    expect((await chat(gw.url)).status).toBe(503); // opens the breaker for 30 s
    gw.clock.ms += 10_000;
    expect(await openSeconds()).toEqual({ state: 'open', health: 10, gauge: 10 });
    gw.clock.ms += 290_000; // a quiet night: nothing read the breaker when its 30 s were up
    // before: 300 seconds open, though the route had been half-open (ready for a probe) for 270 of them
    expect(await openSeconds()).toEqual({ state: 'half-open', health: 30, gauge: 30 });
    expect((await chat(gw.url)).status).toBe(503); // the probe fails: open for another 30 s
    gw.clock.ms += 600_000;
    expect(await openSeconds()).toEqual({ state: 'half-open', health: 60, gauge: 60 });
  });
});

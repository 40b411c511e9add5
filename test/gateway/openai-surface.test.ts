// The rest of the OpenAI surface through the official client: Responses (native and translated),
// embeddings (failover only to the same model), models, and JSON errors on every path and method.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { keysCli } from '../../gateway/src/keys-cli';
import { NONE_CALLED } from '../../gateway/src/outcome';
import { rawExchange } from '../raw-http';
import { asMistral, FakeProvider } from './fake-provider';
import { ADMIN, listenStack, mapOf, startGateway, type TestGateway } from './harness';
import { until } from './keys-harness';

let hot: FakeProvider, warm: FakeProvider, embedA: FakeProvider, embedB: FakeProvider, other: FakeProvider;
let gw: TestGateway;
beforeEach(async () => {
  [hot, warm, embedA, embedB, other] = await Promise.all([0, 1, 2, 3, 4].map(() => new FakeProvider().start()));
  const map = mapOf([hot.url], [warm.url]);
  map.hot.push({ provider: 'openai', model: 'text-embedding-3-small', baseUrl: embedA.url, apis: ['embeddings'] });
  map.hot.push({ provider: 'openai', model: 'text-embedding-3-large', baseUrl: other.url, apis: ['embeddings'] });
  map.warm.push({ provider: 'azure', model: 'text-embedding-3-small', baseUrl: embedB.url, apis: ['embeddings'] });
  gw = await startGateway(map);
});
afterEach(async () => {
  await gw.close();
  await Promise.all([hot, warm, embedA, embedB, other].map((p) => p.stop()));
});
const client = () => new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: 'unused', maxRetries: 0 });
const chatCalls = (p: FakeProvider) => p.received.filter((r) => r.path.endsWith('/chat/completions'));

describe("the provider's request id", () => {
  it('is passed on as x-request-id, which the SDK gives as _request_id: whole, streamed, refused, and from the route that answered', async () => {
    const whole = await client().chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] });
    expect(whole._request_id).toBe('req_1');
    hot.next({ kind: 'status', status: 503 });
    warm.next({ kind: 'stream', chunks: 2 });
    const streamed = await client()
      .chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }], stream: true })
      .withResponse();
    expect([streamed.response.headers.get('x-route-tier'), streamed.request_id]).toEqual(['warm', 'req_1']);
    for await (const _ of streamed.data); // read to its end
    hot.next({ kind: 'status', status: 400 });
    const refused = await client()
      .chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] })
      .catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(OpenAI.BadRequestError);
    expect((refused as InstanceType<typeof OpenAI.BadRequestError>).requestID).toBe(`req_${hot.received.length}`);
  });
});

describe('POST /v1/responses', () => {
  it('passes through to a Hot route that offers the Responses API, whole and streamed, and meters its usage', async () => {
    const whole = await client().responses.create({ model: 'gpt-4o-mini', input: 'hello', instructions: 'be brief' });
    expect(whole.output_text).toBe('native responses from gpt-4o-mini');
    expect(hot.received.at(-1)).toMatchObject({ path: '/v1/responses', body: { input: 'hello', instructions: 'be brief' } });
    const stream = client().responses.stream({ model: 'gpt-4o-mini', input: 'hello' });
    const final = await stream.finalResponse();
    expect(final.output_text).toBe('native responses from gpt-4o-mini');
    await gw.meter.flush();
    expect(gw.events().map((e) => [e.provider, e.input_tokens, e.output_tokens, e.error_code])).toEqual([
      ['openai', '30', '6', ''],
      ['openai', '30', '6', ''],
    ]);
  });

  it('with Hot down, a Warm chat-only route answers translated: the client cannot tell, whole or streamed', async () => {
    hot.always({ kind: 'status', status: 503 });
    warm.always({ kind: 'ok', content: 'translated answer', usage: { prompt_tokens: 11, completion_tokens: 3 } });
    const raw = await client().responses.create({ model: 'gpt-4o-mini', input: 'hello', instructions: 'be brief' }).withResponse();
    expect(raw.response.headers.get('x-route-tier')).toBe('warm');
    expect(raw.data.object).toBe('response');
    expect(raw.data.output_text).toBe('translated answer');
    expect(raw.data.usage).toMatchObject({ input_tokens: 11, output_tokens: 3 });
    const sent = chatCalls(warm).at(-1)!.body;
    expect(sent.messages).toEqual([
      { role: 'system', content: 'be brief' },
      { role: 'user', content: 'hello' },
    ]);

    warm.always({ kind: 'stream', chunks: 3 });
    const events: string[] = [];
    const stream = client().responses.stream({ model: 'gpt-4o-mini', input: 'hello' });
    stream.on('event', (e) => events.push(e.type));
    const final = await stream.finalResponse();
    expect(final.output_text).toBe('part0 part1 part2');
    expect(events[0]).toBe('response.created');
    expect(events).toContain('response.output_text.delta');
    expect(events.at(-1)).toBe('response.completed');
    await gw.meter.flush();
    const warmEvents = gw.events().filter((e) => e.provider === 'anthropic');
    expect(warmEvents.map((e) => [e.input_tokens, e.output_tokens, e.error_code])).toEqual([
      ['11', '3', ''],
      ['20', '3', ''],
    ]);
  });

  it('function calling works through the translation, both ways', async () => {
    hot.always({ kind: 'status', status: 503 });
    warm.next({ kind: 'ok', toolCall: { name: 'get_weather', arguments: '{"city":"Lisbon"}' } });
    const tools: OpenAI.Responses.Tool[] = [
      {
        type: 'function',
        name: 'get_weather',
        description: 'weather',
        parameters: { type: 'object', properties: { city: { type: 'string' } } },
        strict: false,
      },
    ];
    const first = await client().responses.create({ model: 'gpt-4o-mini', input: 'weather in Lisbon?', tools });
    const call = first.output.find((o) => o.type === 'function_call');
    expect(call).toMatchObject({ type: 'function_call', name: 'get_weather', arguments: '{"city":"Lisbon"}', call_id: 'call_1' });
    expect(chatCalls(warm).at(-1)!.body.tools[0]).toMatchObject({ type: 'function', function: { name: 'get_weather' } });

    warm.next({ kind: 'ok', content: 'sunny' });
    const second = await client().responses.create({
      model: 'gpt-4o-mini',
      tools,
      input: [
        { role: 'user', content: 'weather in Lisbon?' },
        { type: 'function_call', call_id: 'call_1', name: 'get_weather', arguments: '{"city":"Lisbon"}' },
        { type: 'function_call_output', call_id: 'call_1', output: '{"sky":"clear"}' },
      ],
    });
    expect(second.output_text).toBe('sunny');
    const messages = chatCalls(warm).at(-1)!.body.messages;
    expect(messages[1]).toMatchObject({ role: 'assistant', tool_calls: [{ id: 'call_1', function: { name: 'get_weather' } }] });
    expect(messages[2]).toEqual({ role: 'tool', tool_call_id: 'call_1', content: '{"sky":"clear"}' });
  });

  it('a native stream cut mid-way ends with an error event numbered after the last event, as every Responses event is', async () => {
    const event = (type: string, n: number) =>
      `event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: n, response: { id: 'resp_1', object: 'response', status: 'in_progress', output: [] } })}\n\n`;
    hot.next({ kind: 'raw-stream', pieces: [Buffer.from(event('response.created', 0) + event('response.in_progress', 1))], reset: true });
    const res = await fetch(`${gw.url}/v1/responses`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'gpt-4o-mini', input: 'hello', stream: true }),
    });
    const events = (await res.text())
      .split('\n\n')
      .filter(Boolean)
      .map(
        (e) =>
          JSON.parse(
            e
              .split('\n')
              .find((l) => l.startsWith('data: '))!
              .slice(6),
          ) as { type: string; sequence_number: number },
      );
    expect(events.map((e) => [e.type, e.sequence_number])).toEqual([
      ['response.created', 0],
      ['response.in_progress', 1],
      ['error', 2],
    ]);
    expect(events.at(-1)).toMatchObject({ code: 'stream_interrupted' });
  });

  it('a native stream cut mid-way raises an APIError in the SDK, read event by event or through its stream helper, rather than ending as a half answer', async () => {
    const item = { id: 'msg_1', type: 'message', role: 'assistant', status: 'in_progress', content: [] };
    const part = { type: 'output_text', text: '', annotations: [] };
    const events = [
      { type: 'response.created', response: { id: 'resp_1', object: 'response', status: 'in_progress', output: [] } },
      { type: 'response.output_item.added', output_index: 0, item },
      { type: 'response.content_part.added', item_id: 'msg_1', output_index: 0, content_index: 0, part },
      { type: 'response.output_text.delta', item_id: 'msg_1', output_index: 0, content_index: 0, delta: 'The answer is', logprobs: [] },
    ];
    const sse = events.map((e, n) => `event: ${e.type}\ndata: ${JSON.stringify({ ...e, sequence_number: n })}\n\n`).join('');
    hot.next({ kind: 'raw-stream', pieces: [Buffer.from(sse)], reset: true });
    let text = '';
    const read = async () => {
      const stream = await client().responses.create({ model: 'gpt-4o-mini', input: 'hello', stream: true });
      for await (const event of stream) if (event.type === 'response.output_text.delta') text += event.delta;
    };
    const raised = await read().then(
      () => `ended as if whole: "${text}"`, // what it did: the client took half an answer for all of it
      (error: unknown) => error,
    );
    expect(raised).toBeInstanceOf(OpenAI.APIError);
    expect(raised).toMatchObject({ code: 'stream_interrupted' });

    hot.next({ kind: 'raw-stream', pieces: [Buffer.from(sse)], reset: true });
    const helper = await client()
      .responses.stream({ model: 'gpt-4o-mini', input: 'hello' })
      .finalResponse()
      .catch((error: unknown) => error);
    expect(helper).toBeInstanceOf(OpenAI.APIError); // was the event's plain object
    expect(helper).toMatchObject({ code: 'stream_interrupted' });
  });

  it("a native stream whose provider reported its own error event ends with that one, not a second of the gateway's", async () => {
    const created = {
      type: 'response.created',
      sequence_number: 0,
      response: { id: 'resp_1', object: 'response', status: 'in_progress', output: [] },
    };
    const error = { type: 'error', code: 'server_error', message: 'the model failed', param: null, sequence_number: 1 };
    const events = [created, error].map((e) => `event: ${e.type}\ndata: ${JSON.stringify(e)}\n\n`).join('');
    hot.next({ kind: 'raw-stream', pieces: [Buffer.from(events)], reset: true });
    const res = await fetch(`${gw.url}/v1/responses`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'gpt-4o-mini', input: 'hello', stream: true }),
    });
    const types = [...(await res.text()).matchAll(/^event: (.*)$/gm)].map((m) => m[1]);
    expect(types).toEqual(['response.created', 'error']);
  });

  it('what cannot be translated goes only to native routes, and is a 400 naming the parameter when there are none', async () => {
    hot.always({ kind: 'status', status: 503 });
    const stateful = { model: 'gpt-4o-mini', input: 'and then?', previous_response_id: 'resp_123' } as const;
    await expect(client().responses.create(stateful)).rejects.toBeInstanceOf(OpenAI.APIError); // the native route is down
    expect(hot.received.filter((r) => r.path === '/v1/responses')).toHaveLength(3);
    expect(chatCalls(warm)).toHaveLength(0); // never sent translated: the state lives with the other provider

    const chatOnly = await startGateway({
      ...mapOf([]),
      hot: [{ provider: 'anthropic', model: 'claude-3-5-haiku-latest', baseUrl: warm.url }],
    });
    try {
      const c = new OpenAI({ baseURL: `${chatOnly.url}/v1`, apiKey: 'unused', maxRetries: 0 });
      const refused = (await c.responses.create(stateful).catch((e: unknown) => e)) as InstanceType<typeof OpenAI.BadRequestError>;
      expect(refused).toBeInstanceOf(OpenAI.BadRequestError);
      expect(refused.param).toBe('previous_response_id');
      expect(refused.message).toMatch(/previous_response_id/);
      const builtIn = (await c.responses
        .create({ model: 'x', input: 'hi', tools: [{ type: 'web_search' }] })
        .catch((e: unknown) => e)) as InstanceType<typeof OpenAI.BadRequestError>;
      expect(builtIn).toBeInstanceOf(OpenAI.BadRequestError);
      expect(builtIn.param).toMatch(/^tools/);
      expect(chatCalls(warm)).toHaveLength(0);
    } finally {
      await chatOnly.close();
    }
  });

  // Refused by the translation, such a request went only to the native routes: with those down, the
  // SDK got 503 all_routes_failed (and retried it twice) for what OpenAI answers 400 at once.
  it('a parameter of the wrong type is a 400 naming it while the native routes are down, not a 503; nothing is called', async () => {
    hot.always({ kind: 'status', status: 503 });
    for (const [param, value, code] of [
      ['temperature', 'hot', 'invalid_type'],
      ['max_output_tokens', 0, 'invalid_value'],
      ['parallel_tool_calls', 'yes', 'invalid_type'],
    ] as const) {
      const refused = await client()
        .responses.create({ model: 'gpt-4o-mini', input: 'hi', [param]: value } as never)
        .catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(OpenAI.BadRequestError);
      expect(refused).toMatchObject({ status: 400, param, code }); // as chat's own refusal codes it
    }
    expect(hot.received).toHaveLength(0);
    expect(chatCalls(warm)).toHaveLength(0);
  });

  // Only their type was checked: temperature 5 reached the provider, and a chat provider that takes
  // any value (vLLM, Ollama) answered it where OpenAI and the gateway's own chat endpoint refuse it.
  it('a value out of range (temperature, top_p, top_logprobs) is a 400 naming it, as chat and OpenAI refuse it; nothing is called', async () => {
    for (const [param, value] of [
      ['temperature', 5],
      ['temperature', -0.5],
      ['top_p', 1.5],
      ['top_logprobs', 21],
    ] as const) {
      const refused = await client()
        .responses.create({ model: 'gpt-4o-mini', input: 'hi', [param]: value } as never)
        .catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(OpenAI.BadRequestError);
      expect(refused).toMatchObject({ status: 400, param, code: 'invalid_value' });
    }
    const edge = await client().responses.create({ model: 'gpt-4o-mini', input: 'hi', temperature: 2, top_p: 0, top_logprobs: 20 });
    expect(edge.status).toBe('completed');
    expect(hot.received).toHaveLength(1);
    expect(chatCalls(warm)).toHaveLength(0);
  });

  it('a stored prompt without input goes to a native route; the default Idempotency-Key tells conversations apart', async () => {
    const stored = await client().responses.create({ model: 'gpt-4o-mini', prompt: { id: 'pmpt_123', variables: { city: 'Lisbon' } } });
    expect(stored.output_text).toBe('native responses from gpt-4o-mini');
    expect(hot.received.at(-1)!.body).toEqual({ model: 'gpt-4o-mini', prompt: { id: 'pmpt_123', variables: { city: 'Lisbon' } } });
    // The same answer in two conversations: two requests, two keys (one key would let a provider replay the first).
    for (const previous of ['resp_a', 'resp_b'])
      await client().responses.create({ model: 'gpt-4o-mini', input: 'yes', previous_response_id: previous });
    const [a, b] = hot.received.slice(-2).map((r) => r.headers['idempotency-key']);
    expect(a).not.toBe(b);
    await expect(client().responses.create({ model: 'gpt-4o-mini', input: 42 as never })).rejects.toThrow(
      /^400 input: expected a string or an array of input items$/,
    );
  });

  it('a native route the flags switch off serves nothing: the request is the same 400, not a 503', async () => {
    const map = mapOf([], [other.url]);
    map.hot = [{ provider: 'anthropic', model: 'claude-3-5-haiku-latest', baseUrl: warm.url }];
    map.warm = [{ provider: 'openai', model: 'gpt-4o-mini', baseUrl: other.url }];
    map.flags = { enable_warm_fallback: false, enable_cold_queue: true, killed_models: [] };
    const warmOff = await startGateway(map);
    try {
      const c = new OpenAI({ baseURL: `${warmOff.url}/v1`, apiKey: 'unused', maxRetries: 0 });
      const stateful = { model: 'gpt-4o-mini', input: 'and then?', previous_response_id: 'resp_123' } as const;
      const refused = await c.responses.create(stateful).catch((e: unknown) => e);
      expect(refused).toMatchObject({ status: 400, param: 'previous_response_id' });
      expect(other.received.length + warm.received.length).toBe(0);
    } finally {
      await warmOff.close();
    }
  });
});

describe('POST /v1/embeddings', () => {
  it('fails over only to a route of the same model, and meters the usage', async () => {
    embedA.always({ kind: 'status', status: 503 });
    const raw = await client()
      .embeddings.create({ model: 'text-embedding-3-small', input: ['a', 'b'] })
      .withResponse();
    expect(raw.data.data).toHaveLength(2);
    expect(raw.response.headers.get('x-route-provider')).toBe('azure');
    expect(embedA.received).toHaveLength(3); // retried on its route first
    expect(other.received).toHaveLength(0); // another model's vectors are never an answer
    expect(hot.received.concat(warm.received)).toHaveLength(0);
    await gw.meter.flush();
    expect(gw.events().at(-1)).toMatchObject({ provider: 'azure', model: 'text-embedding-3-small', input_tokens: '14', error_code: '' });
  });

  it("vectors come in the encoding asked for, whatever the provider's: floats given for base64 (the SDK's default) or base64 for floats", async () => {
    // FakeProvider answers floats whatever was asked ([0.1, 0.2, index]); the SDK asks base64 and decodes it itself.
    // OpenAI's base64 is float32, little-endian (as Float32Array is here).
    const float32 = (vector: number[]) => Array.from(new Float32Array(vector));
    const base64 = (vector: number[]) => Buffer.from(new Float32Array(vector).buffer).toString('base64');
    const decoded = await client().embeddings.create({ model: 'text-embedding-3-small', input: ['a', 'b'] });
    expect(embedA.received.at(-1)!.body).toMatchObject({ encoding_format: 'base64' });
    expect(decoded.data.map((d) => d.embedding)).toEqual([float32([0.1, 0.2, 0]), float32([0.1, 0.2, 1])]);
    const asked = await client().embeddings.create({ model: 'text-embedding-3-small', input: 'a', encoding_format: 'base64' });
    expect(asked.data[0].embedding).toBe(base64([0.1, 0.2, 0]));

    // A provider that answers base64 when floats were asked for: floats, as asked.
    const data = [{ object: 'embedding', index: 0, embedding: base64([0.5, -1, 2]) }];
    const answer = { object: 'list', model: 'text-embedding-3-small', data };
    embedA.next({ kind: 'status', status: 200, body: { ...answer, usage: { prompt_tokens: 1, total_tokens: 1 } } });
    const floats = await client().embeddings.create({ model: 'text-embedding-3-small', input: 'b', encoding_format: 'float' });
    expect(floats.data[0].embedding).toEqual([0.5, -1, 2]);
    // Given as asked, it is passed on as it came.
    embedA.next({ kind: 'status', status: 200, body: { ...answer, usage: { prompt_tokens: 1, total_tokens: 1 } } });
    expect((await client().embeddings.create({ model: 'text-embedding-3-small', input: 'b' })).data[0].embedding).toEqual([0.5, -1, 2]);
  });

  it('an answer that cannot be re-encoded (JSON nested too deep to serialize again) is passed on as it came and metered, not a 500', async () => {
    const deep = '['.repeat(100_000) + ']'.repeat(100_000);
    const vector = Buffer.from(new Float32Array([0.5]).buffer).toString('base64');
    const answer = `{"object":"list","model":"text-embedding-3-small","data":[{"object":"embedding","index":0,"embedding":"${vector}"}],"extra":${deep},"usage":{"prompt_tokens":7,"total_tokens":7}}`;
    embedA.next({ kind: 'raw-stream', type: 'application/json', pieces: [Buffer.from(answer)] });
    const raw = await client().embeddings.create({ model: 'text-embedding-3-small', input: 'a', encoding_format: 'float' }).asResponse();
    expect(raw.status).toBe(200);
    expect(await raw.text()).toBe(answer);
    await gw.meter.flush();
    expect(gw.events().at(-1)).toMatchObject({ provider: 'openai', input_tokens: '7', error_code: '' });
  });

  it("a Mistral route is sent OpenAI's dimensions as its output_dimension and no user, which its embeddings API refuses", async () => {
    const mistral = asMistral(await new FakeProvider().start());
    const map = mapOf([hot.url]);
    map.warm.push({ provider: 'mistral', model: 'codestral-embed', baseUrl: mistral.url, apis: ['embeddings'] });
    const own = await startGateway(map);
    try {
      const via = new OpenAI({ baseURL: `${own.url}/v1`, apiKey: 'unused', maxRetries: 0 });
      const res = await via.embeddings.create({ model: 'codestral-embed', input: ['a', 'b'], dimensions: 256, user: 'user-42' });
      expect(res.data.map((d) => d.index)).toEqual([0, 1]);
      expect(mistral.received[0].body).toEqual({
        model: 'codestral-embed',
        input: ['a', 'b'],
        encoding_format: 'base64',
        output_dimension: 256,
      });
    } finally {
      await own.close();
      await mistral.stop();
    }
  });

  it("usage given only as total_tokens (Voyage AI's embeddings answer) is the input's tokens, priced, not an unpriced call of 0 tokens", async () => {
    const vector = Buffer.from(new Float32Array([0.5]).buffer).toString('base64');
    const data = [{ object: 'embedding', index: 0, embedding: vector }];
    embedA.next({
      kind: 'status',
      status: 200,
      body: { object: 'list', model: 'text-embedding-3-small', data, usage: { total_tokens: 9 } },
    });
    await client().embeddings.create({ model: 'text-embedding-3-small', input: 'a' });
    await gw.meter.flush();
    const event = gw.events().at(-1)!;
    expect(event).toMatchObject({ provider: 'openai', input_tokens: '9', output_tokens: '0', error_code: '' });
    expect(Number(event.cost_usd)).toBeGreaterThan(0);
  });

  it('a 200 whose body is an error is a failure of the route, not vectors: the same model elsewhere answers', async () => {
    embedA.always({ kind: 'status', status: 200, body: { error: { message: 'model overloaded', type: 'server_error' } } });
    const raw = await client().embeddings.create({ model: 'text-embedding-3-small', input: 'a', encoding_format: 'float' }).withResponse();
    expect(raw.data.data[0].embedding).toEqual([0.1, 0.2, 0]);
    expect(raw.response.headers.get('x-route-provider')).toBe('azure');
    await gw.meter.flush();
    expect(gw.events()[0]).toMatchObject({ provider: 'openai', error_code: 'PROVIDER_ERROR' });
  });

  // The Python SDK says its timeout as x-stainless-read-timeout (its read timeout, in seconds, "5.0"),
  // not as x-stainless-timeout (the Node SDK's): the gateway went on for its 30 s, long after the
  // client had given up and sent its retry.
  it("the Python openai client's read timeout shortens the time-to-answer, as the Node client's timeout does", async () => {
    embedA.always({ kind: 'hang' });
    embedB.always({ kind: 'hang' });
    const started = performance.now();
    const res = await fetch(`${gw.url}/v1/embeddings`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-stainless-read-timeout': '1.0' },
      body: JSON.stringify({ model: 'text-embedding-3-small', input: 'a', encoding_format: 'base64' }),
    });
    expect(res.status).toBeGreaterThanOrEqual(500);
    expect(performance.now() - started).toBeLessThan(1000);
  });

  it('the 404 for a model no route serves names, to a client key that names its models, only those of them served', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'embed-keys-'));
    const routes = join(dir, 'routes.json');
    const hotRoutes = [
      { provider: 'openai', model: 'gpt-4o-mini', baseUrl: hot.url },
      { provider: 'openai', model: 'text-embedding-3-small', baseUrl: embedA.url, apis: ['embeddings'] },
      { provider: 'openai', model: 'acme-private-embed', baseUrl: other.url, apis: ['embeddings'] },
    ];
    writeFileSync(routes, JSON.stringify({ hot: hotRoutes, warm: [], cold: { mode: 'graceful_degrade', queue: 'ai-tasks', notify: [] } }));
    const env = {
      ROUTES_FILE: routes,
      GATEWAY_AUTH: 'keys',
      CLIENT_KEYS_FILE: join(dir, 'keys.json'),
      SCOPES_FILE: join(dir, 'none.yaml'),
    };
    const output: string[] = [];
    expect(
      await keysCli(
        ['create', 'beta', '--models', 'text-embedding-3-small,text-embedding-3-large'],
        env,
        (l) => output.push(l),
        (l) => output.push(l),
      ),
    ).toBe(0);
    const stack = await listenStack({ ...env, METER_CSV_FILE: join(dir, 'e.csv') });
    try {
      const keyed = new OpenAI({ baseURL: `${stack.url}/v1`, apiKey: output.at(-1)!, maxRetries: 0 });
      const error = await keyed.embeddings.create({ model: 'text-embedding-3-large', input: 'a' }).catch((e: unknown) => e);
      expect(error).toMatchObject({ status: 404, code: 'model_not_found' });
      const { message } = (error as InstanceType<typeof OpenAI.APIError>).error as { message: string };
      expect(message).toBe('model: no route serves embeddings of "text-embedding-3-large" (served: text-embedding-3-small)');
      // Another tenant's model stays unnamed, as GET /v1/models does not list it to this key.
      expect(message).not.toContain('acme-private-embed');
    } finally {
      await stack.stop();
    }
  });

  // The shipped maps hold chat and embeddings routes side by side. A route that cannot serve the
  // request (an embeddings route, to a chat request; another model's, to embeddings) was taken for
  // one not switched off, so with its model killed the client was told "no route answered": an
  // outage to look for where there is none.
  it('its model killed, the client is told no route could be called, though routes of other APIs and models are in the map; chat alike', async () => {
    const message = async (path: string, body: object) => {
      const res = await fetch(`${gw.url}/v1/${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
      return [res.status, ((await res.json()) as { error: { message: string } }).error.message];
    };
    const flags = (killed: string[]) =>
      fetch(`${gw.url}/admin/flags`, {
        method: 'PUT',
        headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
        body: JSON.stringify({ killed_models: killed }),
      });
    expect((await flags(['text-embedding-3-small'])).status).toBe(200);
    expect(await message('embeddings', { model: 'text-embedding-3-small', input: 'a' })).toEqual([503, NONE_CALLED]);
    expect((await flags(['gpt-4o-mini', 'claude-3-5-haiku-latest'])).status).toBe(200);
    expect(await message('chat/completions', { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] })).toEqual([
      503,
      NONE_CALLED,
    ]);
    expect(hot.received.length + warm.received.length + embedA.received.length + embedB.received.length + other.received.length).toBe(0);
  });

  it('a model no route serves is a 404 naming it; nothing is called', async () => {
    const error = await client()
      .embeddings.create({ model: 'nomic-embed', input: 'a' })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OpenAI.NotFoundError);
    expect((error as InstanceType<typeof OpenAI.NotFoundError>).code).toBe('model_not_found');
    expect(embedA.received.length + embedB.received.length + other.received.length).toBe(0);
  });
});

describe("a provider's refusal as the SDK sees it", () => {
  it("one in another shape than OpenAI's (Mistral's and vLLM's top-level message, Mistral's validation errors, a bare error string, FastAPI's detail, Gemini's list) reaches the SDK with its message, type and code", async () => {
    // Mistral's refusal: the fields OpenAI nests in `error` are at the top level.
    const mistral = {
      object: 'error',
      message: 'Extra inputs are not permitted',
      type: 'invalid_request_error',
      param: 'stop',
      code: '1000',
    };
    hot.next({ kind: 'status', status: 422, body: mistral });
    const refused = (await client()
      .chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] })
      .catch((e: unknown) => e)) as InstanceType<typeof OpenAI.UnprocessableEntityError>;
    expect(refused).toBeInstanceOf(OpenAI.UnprocessableEntityError);
    expect(refused.message).toBe('422 Extra inputs are not permitted'); // was "422 status code (no body)"
    expect([refused.type, refused.param, refused.code]).toEqual(['invalid_request_error', 'stop', '1000']);
    // Mistral's refusal of a field it does not know: the validation errors as the message, in an object.
    const unknown = [{ type: 'extra_forbidden', loc: ['body', 'store'], msg: 'Extra inputs are not permitted', input: false }];
    hot.next({ kind: 'status', status: 422, body: { ...mistral, message: { detail: unknown }, param: null, code: null } });
    const validation = (await client()
      .chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }], store: false })
      .catch((e: unknown) => e)) as InstanceType<typeof OpenAI.UnprocessableEntityError>;
    expect(validation).toBeInstanceOf(OpenAI.UnprocessableEntityError);
    expect(validation.message).toBe(`422 ${JSON.stringify(unknown)}`); // was "422 status code (no body)"
    expect(validation.type).toBe('invalid_request_error');
    // Ollama's and TGI's: the error is a string.
    hot.next({ kind: 'status', status: 404, body: { error: "model 'gpt-4o-mini' not found" } });
    const missing = (await client()
      .chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] })
      .catch((e: unknown) => e)) as InstanceType<typeof OpenAI.NotFoundError>;
    expect(missing).toBeInstanceOf(OpenAI.NotFoundError);
    expect(missing.message).toBe("404 model 'gpt-4o-mini' not found");
    expect(missing.error).toMatchObject({ message: "model 'gpt-4o-mini' not found", param: null, code: null });
    // A server built on FastAPI: its `detail`, a string or the validation errors.
    const detail = [{ loc: ['body', 'messages'], msg: 'field required', type: 'missing' }];
    hot.next({ kind: 'status', status: 422, body: { detail } });
    const invalid = (await client()
      .chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] })
      .catch((e: unknown) => e)) as InstanceType<typeof OpenAI.UnprocessableEntityError>;
    expect(invalid.message).toBe(`422 ${JSON.stringify(detail)}`);
    // Gemini's OpenAI-compatible endpoint: its error object in a list of one.
    const gemini = { code: 400, message: 'Unknown name "reasoning": Cannot find field.', status: 'INVALID_ARGUMENT' };
    hot.next({ kind: 'status', status: 400, body: [{ error: gemini }] });
    const listed = (await client()
      .chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] })
      .catch((e: unknown) => e)) as InstanceType<typeof OpenAI.BadRequestError>;
    expect(listed).toBeInstanceOf(OpenAI.BadRequestError);
    expect([listed.message, listed.code]).toEqual([`400 ${gemini.message}`, 'INVALID_ARGUMENT']);
    // Translated for a Responses client on a chat-only route: the same, and the parameter named as the client sent it.
    hot.always({ kind: 'status', status: 503 });
    warm.next({ kind: 'status', status: 400, body: { ...mistral, message: "'max_tokens' is too large", param: 'max_tokens', code: null } });
    const translated = (await client()
      .responses.create({ model: 'gpt-4o-mini', input: 'hi', max_output_tokens: 1_000_000 })
      .catch((e: unknown) => e)) as InstanceType<typeof OpenAI.BadRequestError>;
    expect(translated).toBeInstanceOf(OpenAI.BadRequestError);
    expect([translated.message, translated.param]).toEqual(["400 'max_output_tokens' is too large", 'max_output_tokens']);
    // OpenAI's own shape is passed on as it came.
    const openai = { error: { message: 'bad', type: 'invalid_request_error', param: 'messages', code: 'x' }, extra: 1 };
    hot.next({ kind: 'status', status: 400, body: openai });
    const raw = await fetch(`${gw.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] }),
    });
    expect(await raw.json()).toEqual(openai);
  });
});

describe('a chat stream whose provider reports an error inside it, read by the SDK', () => {
  it('is a failure of the route, metered STREAM_INTERRUPTED, though the SDK hangs up as it raises the error', async () => {
    const chunk = (fields: object) =>
      Buffer.from(`data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'm', ...fields })}\n\n`);
    // OpenRouter's way: the error beside a choice finished with "error"; the provider then keeps its connection open.
    const failing = [
      chunk({ choices: [{ index: 0, delta: { role: 'assistant', content: 'Hel' }, finish_reason: null }] }),
      chunk({ error: { message: 'Upstream overloaded', code: 502 }, choices: [{ index: 0, delta: {}, finish_reason: 'error' }] }),
    ];
    hot.always({ kind: 'raw-stream', pieces: failing, hold: true });
    warm.always({ kind: 'stream', chunks: 2 });
    const ask = { model: 'gpt-4o-mini', messages: [{ role: 'user' as const, content: 'hi' }], stream: true as const };
    for (let i = 1; i <= 5; i++) {
      const error = await (async () => {
        for await (const _ of await client().chat.completions.create(ask));
      })().catch((e: unknown) => e);
      expect((error as Error).message).toBe('Upstream overloaded');
      await until(async () => (await gw.meter.flush(), gw.events().length === i));
    }
    // Before, each was metered CLIENT_CLOSED (the SDK's hang-up), counted neither for nor against the
    // route: the failing route stayed closed however often it failed.
    expect(gw.events().map((e) => e.error_code.split('|')[0])).toEqual(Array(5).fill('STREAM_INTERRUPTED'));
    const next = await client().chat.completions.create(ask).withResponse();
    for await (const _ of next.data);
    expect(next.response.headers.get('x-route-tier')).toBe('warm'); // five failures opened the Hot route's breaker
    expect(hot.received.length).toBe(5);
  });
});

describe('a chat stream the provider ends with a failed choice', () => {
  it("raises an APIError in the SDK when the choice finished with vLLM's abort or an error and nothing the SDK raises came with it", async () => {
    const chunk = (delta: object, finish: string | null = null) =>
      `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
    const ask = { model: 'gpt-4o-mini', messages: [{ role: 'user' as const, content: 'hi' }] };
    const cases: Array<[string, string]> = [
      [chunk({ role: 'assistant', content: 'Hel' }) + chunk({}, 'abort') + 'data: [DONE]\n\n', 'the provider aborted the answer'],
      [chunk({ role: 'assistant', content: 'Hel' }) + chunk({}, 'error'), 'the provider reported an error'],
    ];
    for (const [stream, message] of cases) {
      hot.next({ kind: 'raw-stream', pieces: [Buffer.from(stream)] });
      const read: string[] = [];
      const error = await (async () => {
        for await (const c of await client().chat.completions.create({ ...ask, stream: true }))
          read.push(c.choices[0]?.delta.content ?? '');
      })().catch((e: unknown) => e);
      // Before, the stream ended quietly and "Hel" was the whole answer.
      expect(error).toBeInstanceOf(OpenAI.APIError);
      expect([(error as InstanceType<typeof OpenAI.APIError>).code, (error as Error).message]).toEqual(['stream_interrupted', message]);
      expect(read.join('')).toBe('Hel');
      hot.next({ kind: 'raw-stream', pieces: [Buffer.from(stream)] });
      const helper = await client()
        .chat.completions.stream(ask)
        .finalChatCompletion()
        .catch((e: unknown) => e);
      expect(helper).toBeInstanceOf(OpenAI.APIError);
    }
    // OpenRouter's way, its error beside the failed choice: the SDK raises that one, nothing is added.
    const openRouter = `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'm', error: { message: 'Upstream overloaded', code: 502 }, choices: [{ index: 0, delta: {}, finish_reason: 'error' }] })}\n\n`;
    const sent = chunk({ role: 'assistant', content: 'Hel' }) + openRouter + 'data: [DONE]\n\n';
    hot.next({ kind: 'raw-stream', pieces: [Buffer.from(sent)] });
    const raw = await fetch(`${gw.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ ...ask, stream: true }),
    });
    expect(await raw.text()).toBe(sent);
    await until(async () => (await gw.meter.flush(), gw.events().length === 5));
    // The SDK hangs up as it raises: a call whose usage had not come is estimated.
    expect(gw.events().map((e) => e.error_code.split('|')[0])).toEqual(Array(5).fill('STREAM_INTERRUPTED'));
  });
});

describe('a whole answer the provider labelled as something else than JSON', () => {
  it('reaches the SDK as the object it is, chat and embeddings alike, not as a string', async () => {
    // A provider (or a proxy before it) that labels its JSON text/plain: the SDK reads a body as JSON only when its type says so.
    const completion = { id: 'chatcmpl-1', object: 'chat.completion', created: 1, model: 'gpt-4o-mini' };
    const choices = [{ index: 0, message: { role: 'assistant', content: 'labelled' }, finish_reason: 'stop' }];
    const chatBody = Buffer.from(
      JSON.stringify({ ...completion, choices, usage: { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 } }),
    );
    for (const type of ['text/plain; charset=utf-8', 'text/html', 'application/octet-stream']) {
      hot.next({ kind: 'raw-stream', pieces: [chatBody], type });
      const { data, response } = await client()
        .chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] })
        .withResponse();
      expect([typeof data, data.choices?.[0].message.content, response.headers.get('content-type')]).toEqual([
        'object',
        'labelled',
        'application/json',
      ]);
    }
    const vectors = { object: 'list', data: [{ object: 'embedding', index: 0, embedding: 'AACAPw==' }], model: 'text-embedding-3-small' };
    embedA.next({
      kind: 'raw-stream',
      pieces: [Buffer.from(JSON.stringify({ ...vectors, usage: { prompt_tokens: 1, total_tokens: 1 } }))],
      type: 'text/plain',
    });
    const embedded = await client().embeddings.create({ model: 'text-embedding-3-small', input: 'a' });
    expect(embedded.data?.[0].embedding).toEqual([1]);
    // A JSON type the provider gave is kept as it was.
    hot.next({ kind: 'raw-stream', pieces: [chatBody], type: 'application/json; charset=utf-8' });
    const kept = await client()
      .chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] })
      .withResponse();
    expect(kept.response.headers.get('content-type')).toBe('application/json; charset=utf-8');
  });
});

describe('GET /v1/models and errors', () => {
  it('lists the models the routing map serves', async () => {
    const ids = [];
    for await (const m of client().models.list()) ids.push(m.id);
    expect(ids.sort()).toEqual(['claude-3-5-haiku-latest', 'gpt-4o-mini', 'text-embedding-3-large', 'text-embedding-3-small']);
  });

  it('retrieves a model whose id has a slash, with the slash sent as it is or encoded', async () => {
    const slashed = await startGateway({
      ...mapOf([]),
      hot: [{ provider: 'openrouter', model: 'meta-llama/llama-3.1-8b-instruct', baseUrl: hot.url }],
    });
    try {
      for (const path of ['meta-llama/llama-3.1-8b-instruct', 'meta-llama%2Fllama-3.1-8b-instruct']) {
        const res = await fetch(`${slashed.url}/v1/models/${path}`);
        expect([res.status, ((await res.json()) as { id?: string }).id]).toEqual([200, 'meta-llama/llama-3.1-8b-instruct']);
      }
      // A trailing slash, as every other path takes one (Express's routing), is not part of the id.
      for (const path of ['meta-llama/llama-3.1-8b-instruct/', 'meta-llama%2Fllama-3.1-8b-instruct/?x=1']) {
        const res = await fetch(`${slashed.url}/v1/models/${path}`);
        expect([res.status, ((await res.json()) as { id?: string }).id]).toEqual([200, 'meta-llama/llama-3.1-8b-instruct']);
      }
      const missing = await fetch(`${slashed.url}/v1/models/meta-llama/other`);
      expect([missing.status, ((await missing.json()) as { error: { code: string } }).error.code]).toEqual([404, 'model_not_found']);
    } finally {
      await slashed.close();
    }
  });

  // curl --http2 and Java's HttpClient offer h2c on every http:// request (Upgrade: h2c); node hands
  // any request with an Upgrade to the server's 'upgrade' listener, which closed the connection
  // unanswered ("Empty reply from server") on every path but the phone bridge's media stream.
  it('a request that offers to upgrade is answered over HTTP/1.1 as it would be without the offer, its body read', async () => {
    const exchange = (...pieces: string[]) => rawExchange(gw.url, ...pieces);
    const h2c = 'Connection: Upgrade, HTTP2-Settings, close\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n';
    const listed = await exchange(`GET /v1/models HTTP/1.1\r\nHost: gw\r\n${h2c}\r\n`);
    expect(listed.status).toBe(200);
    expect((JSON.parse(listed.body) as { data: unknown[] }).data).toHaveLength(4);
    const body = JSON.stringify({ model: 'text-embedding-3-small', input: 'a', encoding_format: 'float' });
    const headers = `POST /v1/embeddings HTTP/1.1\r\nHost: gw\r\n${h2c}Content-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n`;
    for (const sent of [[headers + body], [headers, body.slice(0, 10), body.slice(10)]]) {
      const embedded = await exchange(...sent);
      expect([embedded.status, (JSON.parse(embedded.body) as { data: Array<{ embedding: number[] }> }).data[0].embedding]).toEqual([
        200,
        [0.1, 0.2, 0],
      ]);
    }
    expect(embedA.received.map((r) => r.body.input)).toEqual(['a', 'a']);
    // A WebSocket asked for where none is served: the JSON 404 of the path.
    const ws = await exchange(
      'GET /v1/realtime HTTP/1.1\r\nHost: gw\r\nConnection: Upgrade, close\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n',
    );
    expect([ws.status, (JSON.parse(ws.body) as { error: { code: string } }).error.code]).toEqual([404, 'not_found']);
  });

  // node's reader of the connection hands the offer over at once, the answer before it still being
  // written: the offer's answer was queued behind it where nothing took it off, and never came.
  it('an offer pipelined behind a request still being answered is answered after it', { timeout: 5000 }, async () => {
    const chat = JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] });
    const { text: got } = await rawExchange(
      gw.url,
      `POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: ${chat.length}\r\n\r\n${chat}` +
        'GET /v1/models HTTP/1.1\r\nHost: gw\r\nConnection: Upgrade, close\r\nUpgrade: h2c\r\n\r\n',
    );
    const answers = got.split(/(?=HTTP\/1\.1 )/);
    expect(answers.map((a) => a.split('\r\n')[0])).toEqual(['HTTP/1.1 200 OK', 'HTTP/1.1 200 OK']);
    expect(answers[0]).toContain('hello from gpt-4o-mini');
    expect(answers[1]).toContain('"object":"list"');
  });

  it('answers JSON in OpenAI shape on unknown paths, wrong methods and bad bodies', async () => {
    const unknown = await fetch(`${gw.url}/v1/completions/legacy`, { method: 'POST' });
    expect(unknown.status).toBe(404);
    expect(await unknown.json()).toMatchObject({ error: { type: 'invalid_request_error', code: 'not_found' } });
    const wrong = await fetch(`${gw.url}/v1/chat/completions`);
    expect(wrong.status).toBe(405);
    expect(wrong.headers.get('allow')).toBe('POST');
    expect(await wrong.json()).toMatchObject({ error: { code: 'method_not_allowed' } });
    // A path with the caller's own id in it is quoted short, as a 404's is, not echoed whole.
    const long = await fetch(`${gw.url}/v1/models/${'m'.repeat(5000)}`, { method: 'DELETE' });
    expect(long.status).toBe(405);
    // What is served to GET is served to HEAD too (Express answers it), and Allow says so.
    expect(long.headers.get('allow')).toBe('GET, HEAD');
    expect((await fetch(`${gw.url}/v1/models`, { method: 'HEAD' })).status).toBe(200);
    expect(((await long.json()) as { error: { message: string } }).error.message.length).toBeLessThan(300);
    // So is one Express cannot decode (a stray %), not echoed whole in its error.
    const undecodable = await fetch(`${gw.url}/v1/models/%ZZ${'m'.repeat(5000)}`);
    expect(undecodable.status).toBe(400);
    const { error } = (await undecodable.json()) as { error: { message: string; type: string } };
    expect([error.type, error.message.length < 300]).toEqual(['invalid_request_error', true]);
    const bad = await fetch(`${gw.url}/v1/responses`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{"model":',
    });
    expect(bad.status).toBe(400);
    expect(await bad.json()).toMatchObject({ error: { type: 'invalid_request_error' } });
    const operator = await fetch(`${gw.url}/nothing-here`);
    expect(operator.headers.get('content-type')).toMatch(/json/);
    // A body is read only for a caller let in: an unknown path is a 404 and a wrong token a 401, whatever the body.
    const junk = { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"not json' };
    expect((await fetch(`${gw.url}/nothing-here`, junk)).status).toBe(404);
    expect((await fetch(`${gw.url}/admin/flags`, { ...junk, method: 'PUT' })).status).toBe(401);
  });
});

describe("an operator endpoint's body of another type than JSON", () => {
  // curl's -d sends a form's Content-Type, Python's requests with data= none: the body was skipped
  // unread and the operator told, in the endpoint's own short shape, that none had come.
  it('is a 400 in OpenAI shape naming the Content-Type, as on /v1; one without a Content-Type is read as JSON', async () => {
    const put = (headers: Record<string, string>) =>
      fetch(`${gw.url}/admin/flags`, {
        method: 'PUT',
        headers: { authorization: `Bearer ${ADMIN}`, ...headers },
        body: Buffer.from(JSON.stringify({ killed_models: ['gpt-4o-mini'] })), // a Buffer: fetch adds no Content-Type
      });
    const form = await put({ 'content-type': 'application/x-www-form-urlencoded' });
    expect(form.status).toBe(400);
    expect(await form.json()).toEqual({
      error: {
        message: 'Content-Type: expected application/json, got "application/x-www-form-urlencoded"',
        type: 'invalid_request_error',
        param: null,
        code: null,
      },
    });
    const untyped = await put({});
    expect([untyped.status, ((await untyped.json()) as { killed_models: string[] }).killed_models]).toEqual([200, ['gpt-4o-mini']]);
    // A request with no body is unchanged: the endpoint says what it needs.
    const empty = await fetch(`${gw.url}/admin/flags`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'text/plain' },
    });
    expect(empty.status).toBe(400);
  });
});

// The gateway's own 400s for a body it does not accept carried code null where OpenAI gives a code
// a client can act on without reading the message.
describe("a body the gateway refuses carries OpenAI's code", () => {
  it('missing_required_parameter, invalid_type, invalid_value on chat, responses and embeddings; nothing is called', async () => {
    const refusal = async (path: string, body: object) => {
      const res = await fetch(`${gw.url}/v1/${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
      expect(res.status).toBe(400);
      const { error } = (await res.json()) as { error: { message: string; param: string; code: string } };
      return [error.param, error.code, error.message.startsWith(`${error.param}: `)];
    };
    const chat = { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] };
    expect(await refusal('chat/completions', { model: 'gpt-4o-mini' })).toEqual(['messages', 'missing_required_parameter', true]);
    expect(await refusal('chat/completions', { ...chat, temperature: 'hot' })).toEqual(['temperature', 'invalid_type', true]);
    expect(await refusal('chat/completions', { ...chat, temperature: 5 })).toEqual(['temperature', 'invalid_value', true]);
    // A decimal where an integer is taken is of the wrong type for OpenAI; a negative integer out of range.
    expect(await refusal('chat/completions', { ...chat, max_tokens: 1.5 })).toEqual(['max_tokens', 'invalid_type', true]);
    expect(await refusal('chat/completions', { ...chat, seed: 0.5 })).toEqual(['seed', 'invalid_type', true]);
    expect(await refusal('chat/completions', { ...chat, max_tokens: -1 })).toEqual(['max_tokens', 'invalid_value', true]);
    expect(await refusal('responses', { model: 'gpt-4o-mini', input: 'hi', max_output_tokens: 1.5 })).toEqual([
      'max_output_tokens',
      'invalid_type',
      false,
    ]);
    expect(await refusal('chat/completions', { ...chat, stream: 'yes' })).toEqual(['stream', 'invalid_type', true]);
    expect(await refusal('chat/completions', { ...chat, messages: [{ content: 'hi' }] })).toEqual([
      'messages[0].role',
      'missing_required_parameter',
      true,
    ]);
    expect(await refusal('chat/completions', { ...chat, messages: [{ role: 'robot' }] })).toEqual([
      'messages[0].role',
      'invalid_value',
      true,
    ]);
    expect(await refusal('responses', { input: 'hi' })).toEqual(['model', 'missing_required_parameter', true]);
    expect(await refusal('responses', { model: 'gpt-4o-mini', input: 42 })).toEqual(['input', 'invalid_type', true]);
    expect(await refusal('responses', { model: 'gpt-4o-mini', input: 'hi', stream: 'yes' })).toEqual(['stream', 'invalid_type', true]);
    const embed = { model: 'text-embedding-3-small' };
    expect(await refusal('embeddings', embed)).toEqual(['input', 'missing_required_parameter', true]);
    expect(await refusal('embeddings', { ...embed, input: 5 })).toEqual(['input', 'invalid_type', true]);
    expect(await refusal('embeddings', { ...embed, input: [[1], 'a'] })).toEqual(['input', 'invalid_type', true]);
    expect(await refusal('embeddings', { ...embed, input: ['a', ''] })).toEqual(['input[1]', 'invalid_value', true]);
    expect(await refusal('embeddings', { ...embed, input: [1, -1] })).toEqual(['input[1]', 'invalid_value', true]);
    expect(await refusal('embeddings', { ...embed, input: 'a', dimensions: 'many' })).toEqual(['dimensions', 'invalid_type', true]);
    expect(await refusal('embeddings', { ...embed, input: 'a', dimensions: -1 })).toEqual(['dimensions', 'invalid_value', true]);
    expect(await refusal('embeddings', { ...embed, input: 'a', encoding_format: 'hex' })).toEqual([
      'encoding_format',
      'invalid_value',
      true,
    ]);
    expect(hot.received.length + warm.received.length + embedA.received.length + embedB.received.length).toBe(0);
  });
});

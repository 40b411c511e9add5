// Bodies a careless or hostile client sends to the /v1 endpoints: other charsets, a byte-order
// mark, deep nesting, broken Unicode in the model, out-of-range numbers. Each is a 4xx in OpenAI's
// shape naming what was wrong, before any provider is called or any event metered; never a 500.
import { connect, type Socket } from 'node:net';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { rawExchange } from '../raw-http';
import { FakeProvider } from './fake-provider';
import { mapOf, startGateway, type TestGateway } from './harness';

let hot: FakeProvider, embed: FakeProvider;
let gw: TestGateway;
beforeEach(async () => {
  [hot, embed] = await Promise.all([0, 1].map(() => new FakeProvider().start()));
  const map = mapOf([hot.url]);
  map.hot.push({ provider: 'openai', model: 'text-embedding-3-small', baseUrl: embed.url, apis: ['embeddings'] });
  gw = await startGateway(map);
});
afterEach(async () => {
  await gw.close();
  await Promise.all([hot, embed].map((p) => p.stop()));
});

type Endpoint = 'chat/completions' | 'embeddings' | 'responses';
async function post(path: Endpoint, body: string | Buffer, type = 'application/json', headers: Record<string, string> = {}) {
  const res = await fetch(`${gw.url}/v1/${path}`, { method: 'POST', headers: { 'content-type': type, ...headers }, body });
  const text = await res.text();
  return { status: res.status, headers: res.headers, json: () => JSON.parse(text) as { error: Record<string, unknown> }, text };
}
const CHAT = (content: unknown, extra: object = {}) =>
  JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content }], ...extra });
const BODIES: Record<Endpoint, (text: string) => string> = {
  'chat/completions': (text) => CHAT(text),
  embeddings: (text) => JSON.stringify({ model: 'text-embedding-3-small', input: text }),
  responses: (text) => JSON.stringify({ model: 'gpt-4o-mini', input: text }),
};
const openAiErrorShape = (message: string) => ({ error: { message, type: 'invalid_request_error', param: null, code: null } });
const calls = () => hot.received.length + embed.received.length;
async function nothingMetered() {
  await gw.meter.flush();
  expect(gw.events()).toEqual([]);
  expect(gw.logs.join('')).not.toContain('request failed');
}
/** The error a refused request answers, checked to be in OpenAI's shape. */
async function refusedWith(answer: ReturnType<typeof post>, status: number) {
  const got = await answer;
  expect(got.status, got.text).toBe(status);
  const { error } = got.json();
  expect(error).toMatchObject({ type: 'invalid_request_error', message: expect.any(String) });
  expect(Object.keys(error).sort()).toEqual(['code', 'message', 'param', 'type']);
  return error;
}

describe('the body charset', () => {
  it('anything but UTF-8 is a 415 naming the charset on every /v1 endpoint; nothing is called', async () => {
    for (const path of Object.keys(BODIES) as Endpoint[]) {
      const latin1 = Buffer.from(BODIES[path]('h\u00e9llo'), 'latin1'); // é is the single byte 0xE9
      const error = await refusedWith(post(path, latin1, 'application/json; charset=latin1'), 415);
      expect(error.message).toBe('Content-Type: unsupported charset "latin1" (expected utf-8)');
      const utf16 = Buffer.from(BODIES[path]('hi'), 'utf16le');
      expect((await refusedWith(post(path, utf16, 'application/json; charset="utf-16"'), 415)).message).toMatch(/"utf-16"/);
    }
    expect(calls()).toBe(0);
    await nothingMetered();
  });

  it('utf-8 in any case, quoted or not, is read as it is: the provider gets every character', async () => {
    for (const type of ['application/json; charset=UTF-8', 'application/json;charset="utf-8"', 'application/json; Charset=Utf-8; x=1']) {
      expect((await post('chat/completions', CHAT('h\u00e9llo \ud83d\ude00'), type)).status).toBe(200);
    }
    expect(hot.received.map((r) => r.body.messages[0].content)).toEqual(Array(3).fill('h\u00e9llo \ud83d\ude00'));
  });

  it('a UTF-8 byte-order mark before the JSON is read past, as the Express paths do', async () => {
    const bom = Buffer.from([0xef, 0xbb, 0xbf]);
    for (const path of Object.keys(BODIES) as Endpoint[]) {
      const answer = await post(path, Buffer.concat([bom, Buffer.from(BODIES[path]('h\u00e9llo'))]));
      expect(answer.status, answer.text).toBe(200);
    }
    expect(hot.received[0].body.messages[0].content).toBe('h\u00e9llo');
    expect(embed.received[0].body.input).toBe('h\u00e9llo');
  });
});

describe('the body encoding', () => {
  it('a Content-Encoding named like what every object has (constructor, __proto__) is a 415 naming it on every /v1 endpoint, not a 500', async () => {
    for (const path of Object.keys(BODIES) as Endpoint[]) {
      for (const encoding of ['constructor', '__proto__']) {
        const answer = post(path, BODIES[path]('hi'), 'application/json', { 'content-encoding': encoding });
        const error = await refusedWith(answer, 415);
        expect(error.message).toBe(`Content-Encoding: expected identity, gzip, deflate or br, got "${encoding}"`);
      }
    }
    expect(calls()).toBe(0);
    await nothingMetered();
  });
});

describe('deep nesting', () => {
  it('a small body nested thousands deep is a 400 naming the body, before anything runs', async () => {
    const deep = `{"model":"gpt-4o-mini","messages":[{"role":"user","content":${'['.repeat(5000)}${']'.repeat(5000)}}]}`;
    expect(deep.length).toBeLessThan(11_000);
    for (const path of Object.keys(BODIES) as Endpoint[]) {
      const error = await refusedWith(post(path, deep), 400);
      expect(error).toMatchObject({ message: 'body: nested deeper than 128 levels', param: null });
    }
    expect(calls()).toBe(0);
    await nothingMetered();
  });

  it('a tool whose JSON schema nests 50 levels still goes through untouched', async () => {
    let schema: Record<string, unknown> = { type: 'string' };
    for (let i = 0; i < 50; i++) schema = { type: 'object', properties: { inner: schema } };
    const tools = [{ type: 'function', function: { name: 'f', parameters: schema } }];
    expect((await post('chat/completions', CHAT('hi', { tools }))).status).toBe(200);
    expect(hot.received[0].body.tools).toEqual(tools);
  });
});

describe('the model name', () => {
  it('a lone surrogate in the model is a 400 naming model on chat, embeddings and responses; nothing is called or metered', async () => {
    const broken = JSON.stringify('gpt-\ud800'); // sent as the JSON escape "\ud800"
    expect(broken).toContain('\\ud800');
    const bodies: Array<[Endpoint, string]> = [
      ['chat/completions', `{"model":${broken},"messages":[{"role":"user","content":"hi"}]}`],
      ['embeddings', `{"model":${broken},"input":"hi"}`],
      ['responses', `{"model":${broken},"input":"hi"}`],
    ];
    for (const [path, body] of bodies) {
      const error = await refusedWith(post(path, body), 400);
      expect(error).toMatchObject({ param: 'model', message: 'model: expected well-formed Unicode text (it has a lone surrogate)' });
    }
    expect(calls()).toBe(0);
    await nothingMetered();
  });

  it('a model longer than a meter event holds (1,000 characters) is a 400 naming model on chat, embeddings and responses; nothing is called', async () => {
    const long = 'q'.repeat(1001);
    for (const path of ['chat/completions', 'embeddings', 'responses'] as const) {
      const body = JSON.parse(BODIES[path]('hi')) as Record<string, unknown>;
      const error = await refusedWith(post(path, JSON.stringify({ ...body, model: long })), 400);
      expect(error).toMatchObject({
        param: 'model',
        message: "model: expected at most 1000 characters (the meter event's limit), got 1001",
      });
    }
    expect(calls()).toBe(0);
    await nothingMetered();
  });

  it("a configured model with a lone surrogate is percent-encoded in the route headers, not a 500 after the provider's answer", async () => {
    const odd = await startGateway({ ...mapOf([]), hot: [{ provider: 'openai', model: 'gpt-\ud800', baseUrl: hot.url }] });
    try {
      const res = await fetch(`${odd.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: CHAT('hi'),
      });
      expect(res.status, await res.text()).toBe(200);
      expect(res.headers.get('x-route-model')).toBe('gpt-%EF%BF%BD');
    } finally {
      await odd.close();
    }
  });
});

describe('routing headers', () => {
  it('an x-job-type named like what every object has (constructor, toString, __proto__) is no scope: answered, on every endpoint', async () => {
    for (const jobType of ['constructor', 'toString', '__proto__', 'hasOwnProperty']) {
      for (const path of ['chat/completions', 'embeddings', 'responses'] as const) {
        const res = await fetch(`${gw.url}/v1/${path}`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'x-job-type': jobType },
          body: BODIES[path]('hi'),
        });
        expect(res.status, `${jobType} on ${path}: ${await res.text()}`).toBe(200);
      }
    }
    expect(calls()).toBe(12); // one call each: no time-to-answer of 0 ms, no route given up on
  });

  // node:http reads header bytes as Latin-1: UTF-8 sent as UTF-8 (curl from a terminal, Python's
  // http.client with an encoded value) was metered as mojibake ("CrÃ¨me"), a second customer in every report.
  it('a tenant or job id sent as UTF-8 is metered as the characters sent; one sent as Latin-1 too', async () => {
    const utf8 = (text: string) => Buffer.from(text, 'utf8').toString('latin1'); // fetch sends each char as one byte
    for (const path of ['chat/completions', 'embeddings', 'responses'] as const) {
      const res = await fetch(`${gw.url}/v1/${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-customer-id': utf8('Crème Brûlée SA'), 'x-job-id': utf8('tâche-7') },
        body: BODIES[path]('hi'),
      });
      expect(res.status, await res.text()).toBe(200);
    }
    const latin1 = await fetch(`${gw.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-customer-id': 'café' }, // é as the one byte 0xE9
      body: CHAT('hi'),
    });
    expect(latin1.status).toBe(200);
    await gw.meter.flush();
    expect(gw.events().map((e) => [e.customer_id, e.job_id])).toEqual([
      ['Crème Brûlée SA', 'tâche-7'],
      ['Crème Brûlée SA', 'tâche-7'],
      ['Crème Brûlée SA', 'tâche-7'],
      ['café', ''],
    ]);
  });

  // Every other header a refusal quotes is cut (x-must-have-answer, Content-Type, Expect); this one
  // came back whole, kilobytes of whatever the caller sent, in the message the SDKs print and log.
  it('a bad x-time-to-answer-ms is quoted cut short in its 400, on every endpoint; nothing is called', async () => {
    for (const path of ['chat/completions', 'embeddings', 'responses'] as const) {
      const refused = await refusedWith(
        post(path, BODIES[path]('hi'), 'application/json', { 'x-time-to-answer-ms': `9${'x'.repeat(8000)}` }),
        400,
      );
      expect(refused.message).toBe(`x-time-to-answer-ms: expected whole milliseconds from 1 to 600000, got "9${'x'.repeat(49)}"`);
    }
    expect(calls()).toBe(0);
  });
});

describe('chat parameters', () => {
  // As sent, in JSON text: 1e999 is a valid JSON number that JSON.parse reads as Infinity.
  const cases: Array<[string, string, string]> = [
    ['"max_completion_tokens":1e999', 'max_completion_tokens', 'expected a positive integer or null, got Infinity'],
    ['"max_tokens":0', 'max_tokens', 'expected a positive integer or null, got 0'],
    ['"n":-3', 'n', 'expected a positive integer or null, got -3'],
    ['"temperature":"hot"', 'temperature', 'expected a number from 0 to 2 or null, got "hot"'],
    ['"temperature":2.5', 'temperature', 'expected a number from 0 to 2 or null, got 2.5'],
    ['"top_p":1.1', 'top_p', 'expected a number from 0 to 1 or null, got 1.1'],
    ['"presence_penalty":-3', 'presence_penalty', 'expected a number from -2 to 2 or null, got -3'],
    ['"frequency_penalty":[1]', 'frequency_penalty', 'expected a number from -2 to 2 or null, got [1]'],
    ['"seed":1.5', 'seed', 'expected an integer or null, got 1.5'],
    ['"stream":"yes"', 'stream', 'expected true, false or null, got "yes"'],
  ];
  it('a number out of range or of the wrong type is a 400 naming the field and what was expected; nothing is called', async () => {
    for (const [field, param, expected] of cases) {
      const error = await refusedWith(post('chat/completions', `${CHAT('hi').slice(0, -1)},${field}}`), 400);
      expect(error).toMatchObject({ param, message: `${param}: ${expected}` });
    }
    expect(calls()).toBe(0);
    await nothingMetered();
  });

  it("a refusal quoting the caller's text cuts it between characters, never inside an emoji (half a UTF-16 pair: JSON strict parsers refuse, text Python cannot print)", async () => {
    // Quoted up to 50 characters as JSON: `"` then emoji, the 50th character the first half of one.
    const error = await refusedWith(post('chat/completions', CHAT('hi', { temperature: '😀'.repeat(30) })), 400);
    expect(error).toMatchObject({
      param: 'temperature',
      message: `temperature: expected a number from 0 to 2 or null, got "${'😀'.repeat(24)}`,
    });
    // A model id quoted up to 200 characters: `x` then emoji.
    const res = await fetch(`${gw.url}/v1/models/${encodeURIComponent(`x${'😀'.repeat(150)}`)}`);
    expect(res.status).toBe(404);
    expect(((await res.json()) as { error: { message: string } }).error.message).toBe(
      `model: "x${'😀'.repeat(99)}" is not served here, or not to this key`,
    );
    expect(calls()).toBe(0);
  });

  it('valid values, nulls and fields the gateway does not know reach the provider untouched', async () => {
    const extra = {
      max_tokens: null,
      max_completion_tokens: 100,
      n: 2,
      temperature: 0,
      top_p: 1,
      presence_penalty: -2,
      frequency_penalty: null,
      seed: -7,
      stream: null,
      logit_bias: { '50256': -100 },
      verbosity: 'low',
    };
    expect((await post('chat/completions', CHAT('hi', extra))).status).toBe(200);
    expect(hot.received[0].body).toEqual({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }], ...extra });
  });
});

describe('responses parameters', () => {
  it('a previous_response_id that is not a string is a 400 naming it: the gateway checks the id it would look up, the provider is not left to', async () => {
    for (const id of [['resp_a'], { id: 'resp_a' }, 7]) {
      const body = JSON.stringify({ model: 'gpt-4o-mini', input: 'hi', previous_response_id: id });
      const error = await refusedWith(post('responses', body), 400);
      expect(error).toMatchObject({
        param: 'previous_response_id',
        message: expect.stringContaining('expected a response id (a string) or null'),
      });
    }
    expect(calls()).toBe(0);
    await nothingMetered();
  });
});

describe('union errors', () => {
  it('say what was expected, and refuse negative token ids', async () => {
    const input = (value: unknown) => post('embeddings', JSON.stringify({ model: 'text-embedding-3-small', input: value }));
    const anyOf = 'expected a non-empty string, an array of strings, an array of token ids or an array of token-id arrays';
    expect(await refusedWith(input(5), 400)).toMatchObject({ param: 'input', message: `input: ${anyOf}` });
    expect(await refusedWith(input([3, -1]), 400)).toMatchObject({
      param: 'input[1]',
      message: 'input[1]: expected a token id (an integer from 0)',
    });
    expect(await refusedWith(input([[1], [2, -5]]), 400)).toMatchObject({
      message: 'input[1][1]: expected a token id (an integer from 0)',
    });
    expect(await refusedWith(input(['a', '']), 400)).toMatchObject({ message: 'input[1]: expected a non-empty string' });
    expect(await refusedWith(input([7, 1.5]), 400)).toMatchObject({ message: 'input[1]: expected a token id (an integer from 0)' });
    expect(await refusedWith(input(Array(2049).fill('a')), 400)).toMatchObject({ message: 'input: expected at most 2048 inputs' });
    const content = await refusedWith(post('chat/completions', CHAT(5)), 400);
    expect(content).toMatchObject({
      param: 'messages[0].content',
      message: 'messages[0].content: expected a string, an array of content parts, or null',
    });
    expect(calls()).toBe(0);
    expect((await input(Array(3000).fill(1))).status).toBe(200); // one input of 3000 tokens
  });
});

describe('requests that are not well-formed HTTP', () => {
  const exchange = (bytes: string) => rawExchange(gw.url, bytes);
  const chat = CHAT('hi');
  const post = (headers: string, body = chat) => `POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n${headers}\r\n${body}`;

  it.each([
    ['headers over 16 KiB in all', 431, `GET /v1/models HTTP/1.1\r\nHost: gw\r\n${`x-pad: ${'y'.repeat(100)}\r\n`.repeat(200)}\r\n`],
    ['a URL over 16 KiB', 431, `GET /v1/models/${'m'.repeat(20_000)} HTTP/1.1\r\nHost: gw\r\n\r\n`],
    ['two Content-Lengths', 400, post(`Content-Length: 5\r\nContent-Length: ${chat.length}\r\n`)],
    ['Content-Length beside chunked', 400, post(`Content-Length: 5\r\nTransfer-Encoding: chunked\r\n`, '0\r\n\r\n')],
    ['a chunk size that is not hex', 400, post('Transfer-Encoding: chunked\r\n', `zz\r\n${chat}\r\n0\r\n\r\n`)],
    ['a bare CR in a header value', 400, post(`x-customer-id: a\rb\r\nContent-Length: ${chat.length}\r\n`)],
    ['an Expect other than 100-continue', 417, post(`Expect: 200-ok\r\nConnection: close\r\nContent-Length: ${chat.length}\r\n`)],
    // A client that took the gateway for its proxy (HTTPS_PROXY): node closed the connection unanswered.
    ['a CONNECT', 405, 'CONNECT api.openai.com:443 HTTP/1.1\r\nHost: api.openai.com:443\r\n\r\n'],
  ])('%s: a %i in OpenAI shape, nothing called', async (_, status, bytes) => {
    const got = await exchange(bytes);
    expect(got.status).toBe(status);
    expect(got.type).toMatch(/^application\/json/);
    const { error } = JSON.parse(got.body) as { error: Record<string, unknown> };
    expect(error).toMatchObject({ type: 'invalid_request_error', message: expect.any(String) });
    expect(Object.keys(error).sort()).toEqual(['code', 'message', 'param', 'type']);
    expect(calls()).toBe(0);
  });

  // Connections are half-open in node: a CONNECT's ended only stayed open, with no timeout, as long
  // as its client did not end its side.
  it('a CONNECT from a client that keeps its side open is closed once its 405 is sent', { timeout: 5000 }, async () => {
    const closed = new Promise<string>((resolve) => gw.server.once('connection', (s: Socket) => s.once('close', () => resolve('closed'))));
    const socket = connect({ port: Number(new URL(gw.url).port), host: '127.0.0.1', allowHalfOpen: true });
    let got = '';
    socket.on('data', (d) => (got += d));
    const ended = new Promise((resolve) => socket.once('end', resolve));
    socket.write('CONNECT api.openai.com:443 HTTP/1.1\r\nHost: api.openai.com:443\r\n\r\n');
    await ended;
    expect(got).toMatch(/^HTTP\/1\.1 405 /);
    expect(await closed).toBe('closed');
    socket.destroy();
  });

  // node keeps a request's first 1,000 headers; one offering to upgrade is written back from those
  // it kept, so a Content-Length after them was lost and the body, here a request, read as one.
  it('an offer to upgrade with over 1,000 header lines is a 431: its body is never read as a request', async () => {
    const inner = 'GET /v1/models HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n';
    const offer = `Connection: Upgrade\r\nUpgrade: h2c\r\n${'x-a: b\r\n'.repeat(1100)}Content-Length: ${inner.length}\r\n`;
    const got = await exchange(post(offer, inner));
    // Node 24 counts such a head over its 16 KiB itself; Node 20 and 22 read it, and the gateway refuses the offer.
    const refusals = ['request headers: over 1,000 lines with an Upgrade header', 'request headers: over 16 KiB in all, the URL included'];
    expect(got.status).toBe(431);
    expect(refusals.map((m) => JSON.stringify(openAiErrorShape(m)))).toContain(got.body);
    expect(got.text).not.toContain('"object":"list"'); // the body, a GET /v1/models, never answered
    // Without the offer the same request is read whole: its body is not JSON (or, on Node 24, its head too large).
    const plain = await exchange(post(`Connection: close\r\n${'x-a: b\r\n'.repeat(1100)}Content-Length: ${inner.length}\r\n`, inner));
    expect([400, 431]).toContain(plain.status);
    expect(plain.text).not.toContain('"object":"list"');
    expect(calls()).toBe(0);
  });
});

describe("embeddings within OpenAI's limits", () => {
  /** `count` inputs of token ids, `tokens` in all, spread as evenly as they go. */
  const tokenArrays = (count: number, tokens: number, model = 'text-embedding-3-small') => {
    const input = Array.from({ length: count }, (_, i) => Array(Math.floor(tokens / count) + (i < tokens % count ? 1 : 0)).fill(15339));
    return JSON.stringify({ model, input });
  };
  const short = (got: Awaited<ReturnType<typeof post>>) => got.text.slice(0, 300);

  // Accepted, such a request was checked number by number and hashed whole: the gateway's event loop
  // stood still for half a second, every other request and stream on the instance with it.
  it('over 300,000 token ids in all is a 400 naming input and the limit, before anything else is done with it', async () => {
    const huge = tokenArrays(2048, 3_072_000); // 2048 inputs of 1500 tokens: about 18 MB
    const result = await post('embeddings', huge);
    expect(result.status, short(result)).toBe(400);
    expect(result.json().error).toMatchObject({
      param: 'input',
      message: 'input: expected at most 300000 tokens in all inputs (got 3072000)',
    });
    const lone = await post('embeddings', JSON.stringify({ model: 'text-embedding-3-small', input: Array(300_001).fill(1) }));
    expect(lone.json().error).toMatchObject({ param: 'input', message: expect.stringContaining('at most 300000 tokens') });
    expect((await post('embeddings', tokenArrays(2048, 300_001))).status).toBe(400);
    expect(calls()).toBe(0);
    await nothingMetered();
  });

  it('the largest request OpenAI takes (2048 inputs, 300,000 token ids) is answered', async () => {
    const result = await post('embeddings', tokenArrays(2048, 300_000));
    expect(result.status, short(result)).toBe(200);
    expect(embed.received.at(-1)!.body.input).toHaveLength(2048);
  });

  // With OpenAI's code for a value out of range, as every other input over a limit (2,049 inputs) had: it came with code null.
  it("an input of OpenAI's own model over its 8192 tokens is a 400 naming that input; another model's is passed on", async () => {
    const input = (value: unknown, model = 'text-embedding-3-small') => post('embeddings', JSON.stringify({ model, input: value }));
    expect(await refusedWith(input(Array(8193).fill(1)), 400)).toMatchObject({
      param: 'input',
      code: 'invalid_value',
      message: 'input: expected at most 8192 tokens per input for text-embedding-3-small (got 8193)',
    });
    expect(await refusedWith(input([[1], Array(9000).fill(1)]), 400)).toMatchObject({
      param: 'input[1]',
      code: 'invalid_value',
      message: 'input[1]: expected at most 8192 tokens per input for text-embedding-3-small (got 9000)',
    });
    expect(calls()).toBe(0);
    expect((await input([Array(8192).fill(1), Array(8192).fill(2)])).status).toBe(200);
    const other = await startGateway({
      ...mapOf([hot.url]),
      hot: [{ provider: 'openai', model: 'nomic-embed', baseUrl: embed.url, apis: ['embeddings'] }],
    });
    try {
      const body = JSON.stringify({ model: 'nomic-embed', input: [Array(9000).fill(1)] });
      const answer = await fetch(`${other.url}/v1/embeddings`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
      expect(answer.status).toBe(200);
    } finally {
      await other.close();
    }
  });
});

// A provider that misbehaves in size: an event that never ends, a whole answer of hundreds of MB,
// headers that are huge or many. Each is a failure of the route, cut at a documented limit (the
// provider's connection with it), never an answer buffered without bound.
import type {
  ResponseCompletedEvent,
  ResponseFailedEvent,
  ResponseOutputMessage,
  ResponseOutputText,
} from 'openai/resources/responses/responses';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { configureUpstream } from '../../gateway/src/upstream';
import { FakeProvider } from './fake-provider';
import { chat, mapOf, startGateway, type TestGateway } from './harness';
import { until } from './instances';

let hot: FakeProvider, warm: FakeProvider;
let gw: TestGateway;
beforeEach(async () => {
  [hot, warm] = await Promise.all([0, 1].map(() => new FakeProvider().start()));
  gw = await startGateway(mapOf([hot.url], [warm.url]));
});
afterEach(async () => {
  await gw.close();
  await Promise.all([hot, warm].map((p) => p.stop()));
});

const MiB = 1024 * 1024;
const ask = (stream: boolean) => chat(gw.url, { model: 'x', messages: [{ role: 'user', content: 'hi' }], stream });
const errorCodes = async () => {
  await gw.meter.flush();
  return gw.events().map((e) => e.error_code);
};

describe('a streamed event that never ends', () => {
  const first = `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'x', choices: [{ index: 0, delta: { content: 'hi' }, finish_reason: null }] })}\n\n`;
  const shapes = [
    ['one line without a line break', 'data: ', 'x'.repeat(64 * 1024)],
    ['data: lines without the blank line ending the event', '', `data: ${'x'.repeat(1017)}\n`],
  ] as const;
  for (const [name, head, piece] of shapes) {
    it(`${name}: cut past 8 MiB as a broken stream, metered EVENT_TOO_LARGE (estimated), the provider's connection closed`, async () => {
      // 64 MiB if nothing stops it: the gateway must stop reading long before.
      hot.always({
        kind: 'raw-stream',
        pieces: [Buffer.from(first + head)],
        repeat: { piece: Buffer.from(piece), times: (64 * MiB) / piece.length },
      });
      const res = await ask(true);
      expect(res.status).toBe(200);
      expect(res.text.length).toBeLessThan(MiB); // nothing of the endless event reached the client
      expect(res.text.startsWith(first)).toBe(true);
      expect(res.text).toContain('"code":"stream_interrupted"');
      // Cut by us before the provider's usage: metered with an estimate (cut-stream-metering.test.ts).
      expect(await errorCodes()).toEqual(['EVENT_TOO_LARGE|ESTIMATED']);
      await until('the provider to be hung up on', () => hot.cancelled === 1);
    });
  }
});

describe('a whole answer', () => {
  // The limit is 256 MiB (above OpenAI's largest answer); a smaller one keeps the test light.
  beforeEach(() => configureUpstream({ connections: null, http2: false, maxAnswerBytes: 16 * MiB }));
  afterEach(() => configureUpstream({ connections: null, http2: false }));

  it('past the limit is a failure of the route, not retried there: the next route answers', async () => {
    // 24 MiB of a JSON string that would never end in time.
    hot.always({
      kind: 'raw-stream',
      type: 'application/json',
      pieces: [Buffer.from('{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"')],
      repeat: { piece: Buffer.from('x'.repeat(64 * 1024)), times: 24 * 16 },
      gapMs: 0,
    });
    const res = await ask(false);
    expect(res.status).toBe(200);
    expect(res.headers.get('x-route-tier')).toBe('warm');
    expect(hot.received).toHaveLength(1);
    await until('the provider to be hung up on', () => hot.cancelled === 1);
    expect(await errorCodes()).toEqual(['ANSWER_TOO_LARGE', '']);
  });
});

describe('a Responses stream translated from a chat stream that never ends', () => {
  // The translation keeps the whole output for its final event, so it is held to the whole answer's limit.
  let chatOnly: TestGateway;
  beforeEach(async () => {
    configureUpstream({ connections: null, http2: false, maxAnswerBytes: MiB });
    chatOnly = await startGateway({ ...mapOf([]), hot: [{ provider: 'openai', model: 'gpt-4o-mini', baseUrl: hot.url, apis: ['chat'] }] });
  });
  afterEach(async () => {
    await chatOnly.close();
    configureUpstream({ connections: null, http2: false });
  });

  it('past the limit ends with response.failed, the provider hung up on, metered ANSWER_TOO_LARGE (estimated) as a failure of the route', async () => {
    const chunk = (delta: object) =>
      Buffer.from(
        `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'x', choices: [{ index: 0, delta, finish_reason: null }] })}\n\n`,
      );
    // Well-formed chunks of 16 KiB of text, 64 MiB if nothing stops it.
    hot.always({
      kind: 'raw-stream',
      pieces: [chunk({ role: 'assistant', content: '' })],
      repeat: { piece: chunk({ content: 'x'.repeat(16 * 1024) }), times: 4096 },
    });
    const res = await fetch(`${chatOnly.url}/v1/responses`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'gpt-4o-mini', input: 'hi', stream: true }),
    });
    const text = await res.text();
    expect(text.length).toBeLessThan(8 * MiB); // the deltas up to the limit, and the output kept in the last event
    const last = JSON.parse(text.trimEnd().split('\n').at(-1)!.slice('data: '.length)) as ResponseFailedEvent;
    expect(last).toMatchObject({ type: 'response.failed', response: { status: 'failed', error: { code: 'server_error' } } });
    expect(last.response.error!.message).toContain(`${MiB} bytes`);
    const kept = (last.response.output[0] as ResponseOutputMessage).content[0] as ResponseOutputText;
    expect(kept.text.length).toBeGreaterThan(MiB - 16 * 1024);
    expect(kept.text.length).toBeLessThanOrEqual(MiB + 16 * 1024);
    await until('the provider to be hung up on', () => hot.cancelled === 1);
    await chatOnly.meter.flush();
    // The provider billed the output it generated until the cut: estimated, at least the MiB kept (3 bytes a token).
    expect(chatOnly.events().map((e) => e.error_code)).toEqual(['ANSWER_TOO_LARGE|ESTIMATED']);
    expect(Number(chatOnly.events()[0].output_tokens)).toBeGreaterThanOrEqual(Math.ceil(MiB / 3));
    expect(chatOnly.gateway.path.failover.routes[0].health.lastTwenty()).toEqual([0]);
  });
});

describe('a Responses stream passed through', () => {
  // Its last event carries the whole response (images a model generated, base64): it may be as
  // large as a whole answer, whose limit a smaller one keeps the test light.
  beforeEach(() => configureUpstream({ connections: null, http2: false, maxAnswerBytes: 16 * MiB }));
  afterEach(() => configureUpstream({ connections: null, http2: false }));
  const event = (type: string, fields: object, n: number) =>
    Buffer.from(`event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: n, ...fields })}\n\n`);
  const response = (status: string, output: object[]) => ({
    id: 'resp_1',
    object: 'response',
    created_at: 1,
    status,
    model: 'gpt-4o-mini',
    output,
  });
  const image = (i: number) => ({ id: `ig_${i}`, type: 'image_generation_call', status: 'completed', result: `${i}`.repeat(5 * MiB) });

  it('a final event past 8 MiB (two generated images) is relayed whole, not cut as an event that never ends', async () => {
    const images = [image(1), image(2)];
    hot.always({
      kind: 'raw-stream',
      pieces: [
        event('response.created', { response: response('in_progress', []) }, 0),
        event('response.completed', { response: { ...response('completed', images), usage: { input_tokens: 9, output_tokens: 4 } } }, 1),
      ],
    });
    const res = await fetch(`${gw.url}/v1/responses`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'gpt-4o-mini', input: 'two cats', stream: true }),
    });
    const events = (await res.text()).trimEnd().split('\n\n');
    expect(events.map((e) => e.split('\n')[0])).toEqual(['event: response.created', 'event: response.completed']);
    const last = JSON.parse(events[1].split('\n')[1].slice('data: '.length)) as ResponseCompletedEvent;
    expect(last.response.status).toBe('completed');
    expect(last.response.output.map((o) => (o.type === 'image_generation_call' ? o.result?.length : 0))).toEqual([5 * MiB, 5 * MiB]);
    expect(await errorCodes()).toEqual(['']);
  });

  it("an event that never ends is still cut, at the whole answer's limit", async () => {
    hot.always({
      kind: 'raw-stream',
      pieces: [event('response.created', { response: response('in_progress', []) }, 0), Buffer.from('event: response.completed\ndata: ')],
      repeat: { piece: Buffer.from('x'.repeat(64 * 1024)), times: (64 * MiB) / (64 * 1024) },
    });
    const res = await fetch(`${gw.url}/v1/responses`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'gpt-4o-mini', input: 'hi', stream: true }),
    });
    const text = await res.text();
    expect(text.length).toBeLessThan(MiB); // nothing of the endless event reached the client
    expect(text).toContain('"code":"stream_interrupted"');
    expect(await errorCodes()).toEqual(['EVENT_TOO_LARGE|ESTIMATED']);
    await until('the provider to be hung up on', () => hot.cancelled === 1);
  });
});

describe('response headers', () => {
  for (const [name, headers] of [
    ['one of 64 KiB', { 'x-huge': 'x'.repeat(64 * 1024) }],
    ['4,000 of them', Object.fromEntries(Array.from({ length: 4000 }, (_, i) => [`x-h${i}`, 'v']))],
  ] as const) {
    it(`${name}: a failure of the route (PROVIDER_DOWN), the next route answers`, async () => {
      hot.always({ kind: 'raw-stream', type: 'application/json', pieces: [Buffer.from('{}')], headers });
      const res = await ask(false);
      expect(res.status).toBe(200);
      expect(res.headers.get('x-route-tier')).toBe('warm');
      const codes = await errorCodes();
      expect(codes.at(-1)).toBe('');
      expect(new Set(codes.slice(0, -1))).toEqual(new Set(['PROVIDER_DOWN'])); // at least one failed try, each metered
    });
  }
});

// Server-sent events as providers really frame them: CRLF or CR line endings, JSON spread over
// several `data:` lines, and `[DONE]` as text inside an answer. The client must get every chunk and
// the meter the stream's usage, whatever the framing.
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import OpenAI from 'openai';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { FakeProvider, type Behaviour } from './fake-provider';
import { ADMIN, chat, mapOf, startGateway, type TestGateway } from './harness';
import { until } from './instances';

let hot: FakeProvider;
let gw: TestGateway;
beforeEach(async () => {
  hot = await new FakeProvider().start();
  gw = await startGateway(mapOf([hot.url]));
});
afterEach(async () => {
  await gw.close();
  await hot.stop();
});

async function streamText(stream: AsyncIterable<OpenAI.Chat.Completions.ChatCompletionChunk>) {
  let text = '';
  let usage: OpenAI.CompletionUsage | null = null;
  for await (const chunk of stream) {
    text += chunk.choices[0]?.delta?.content ?? '';
    if (chunk.usage) usage = chunk.usage;
  }
  return { text, usage };
}

const ask = (includeUsage: boolean) =>
  new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: 'unused', maxRetries: 0 }).chat.completions.create({
    model: 'x',
    messages: [{ role: 'user', content: 'hi' }],
    stream: true,
    ...(includeUsage ? { stream_options: { include_usage: true } } : {}),
  });

describe('stream framing', () => {
  for (const [name, eol] of [
    ['CRLF', '\r\n'],
    ['CR', '\r'],
  ] as const) {
    it(`a provider that ends its lines with ${name}: every chunk streamed and the usage metered`, async () => {
      hot.always({ kind: 'stream', chunks: 4, eol });
      const { text, usage } = await streamText(await ask(true));
      expect(text).toBe('part0 part1 part2 part3');
      expect(usage).toMatchObject({ prompt_tokens: 20, completion_tokens: 4 });
      await gw.meter.flush();
      expect(gw.events().map((e) => [e.input_tokens, e.output_tokens, e.error_code])).toEqual([['20', '4', '']]);
    });
  }

  it('JSON spread over several data: lines is joined, as the format says', async () => {
    hot.always({ kind: 'stream', chunks: 3, multiLine: true });
    const { text } = await streamText(await ask(false));
    expect(text).toBe('part0 part1 part2');
    await gw.meter.flush();
    expect(gw.events().map((e) => [e.input_tokens, e.output_tokens])).toEqual([['20', '3']]);
  });

  it('a provider that drops its connection after [DONE]: the stream is complete, with no error after its end', async () => {
    const chunk = (delta: object, finish: string | null = null) =>
      `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'x', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
    const usage = `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'x', choices: [], usage: { prompt_tokens: 7, completion_tokens: 1 } })}\n\n`;
    hot.always({
      kind: 'raw-stream',
      pieces: [Buffer.from(chunk({ role: 'assistant', content: 'hi' }, 'stop') + usage + 'data: [DONE]\n\n')],
      reset: true,
    });
    const res = await chat(gw.url, { model: 'x', messages: [{ role: 'user', content: 'hi' }], stream: true });
    expect(res.text.endsWith('data: [DONE]\n\n')).toBe(true);
    expect(res.text).not.toContain('stream_interrupted');
    await gw.meter.flush();
    expect(gw.events().map((e) => [e.input_tokens, e.output_tokens, e.error_code])).toEqual([['7', '1', '']]);
  });

  it('a provider that keeps its response open after [DONE] or response.completed: the client gets the end at once, metered a success', async () => {
    const chunk = (delta: object, finish: string | null = null) =>
      `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'x', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
    const usage = `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'x', choices: [], usage: { prompt_tokens: 7, completion_tokens: 1 } })}\n\n`;
    const whole = chunk({ role: 'assistant', content: 'hi' }, 'stop') + usage + 'data: [DONE]\n\n';
    // It sends nothing more until the caller hangs up: the SDK reads a stream to its end, past [DONE].
    hot.next({ kind: 'raw-stream', pieces: [Buffer.from(whole)], hold: true });
    const { text, usage: told } = await streamText(await ask(true));
    expect(text).toBe('hi');
    expect(told).toMatchObject({ prompt_tokens: 7, completion_tokens: 1 });
    const response = {
      id: 'resp_1',
      object: 'response',
      created_at: 1,
      status: 'completed',
      model: 'x',
      output: [],
      usage: { input_tokens: 9, output_tokens: 2, total_tokens: 11 },
    };
    const event = (type: string, n: number, value: object) =>
      `event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: n, response: { ...response, ...value } })}\n\n`;
    const completed = event('response.created', 0, { status: 'in_progress', usage: null }) + event('response.completed', 1, {});
    hot.next({ kind: 'raw-stream', pieces: [Buffer.from(completed)], hold: true });
    const client = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const final = await client.responses.stream({ model: 'x', input: 'hi' }).finalResponse();
    expect(final.usage).toMatchObject({ input_tokens: 9, output_tokens: 2 });
    await gw.meter.flush();
    expect(gw.events().map((e) => [e.input_tokens, e.output_tokens, e.error_code])).toEqual([
      ['7', '1', ''],
      ['9', '2', ''],
    ]);
    expect(gw.gateway.path.failover.routes[0].health.lastTwenty()).toEqual([1, 1]);
  });

  it('what a provider sends after [DONE] or response.completed in the same piece is not relayed, nor metered', async () => {
    const chunk = (value: object) =>
      `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'x', ...value })}\n\n`;
    const answer = chunk({ choices: [{ index: 0, delta: { role: 'assistant', content: 'hi' }, finish_reason: 'stop' }] });
    const usage = (completion: number) => chunk({ choices: [], usage: { prompt_tokens: 7, completion_tokens: completion } });
    // A proxy's second [DONE], a chunk and a usage chunk after the end, all in the piece that ends the stream.
    const after = `data: [DONE]\n\n${chunk({ choices: [{ index: 0, delta: { content: ' extra' }, finish_reason: null }] })}${usage(99)}`;
    hot.next({ kind: 'raw-stream', pieces: [Buffer.from(`${answer}${usage(1)}data: [DONE]\n\n${after}`)] });
    const res = await chat(gw.url, {
      model: 'x',
      messages: [{ role: 'user', content: 'hi' }],
      stream: true,
      stream_options: { include_usage: true },
    });
    expect(res.text).toBe(`${answer}${usage(1)}data: [DONE]\n\n`);
    const response = { id: 'resp_1', object: 'response', created_at: 1, model: 'x', output: [] };
    const event = (type: string, n: number, value: object) =>
      `event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: n, response: { ...response, ...value } })}\n\n`;
    const completed = event('response.completed', 1, {
      status: 'completed',
      usage: { input_tokens: 9, output_tokens: 2, total_tokens: 11 },
    });
    const failedAfter = event('response.failed', 2, { status: 'failed', usage: { input_tokens: 9, output_tokens: 50, total_tokens: 59 } });
    hot.next({
      kind: 'raw-stream',
      pieces: [Buffer.from(event('response.created', 0, { status: 'in_progress' }) + completed + failedAfter)],
    });
    const streamed = await fetch(`${gw.url}/v1/responses`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'x', input: 'hi', stream: true }),
    });
    expect((await streamed.text()).endsWith(completed)).toBe(true);
    await gw.meter.flush();
    expect(gw.events().map((e) => [e.input_tokens, e.output_tokens, e.error_code])).toEqual([
      ['7', '1', ''],
      ['9', '2', ''],
    ]);
  });

  it('a stream with an error in it whose provider keeps its response open after [DONE]: the client gets the error and the end at once', async () => {
    const chunk = `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'x', choices: [{ index: 0, delta: { content: 'hi' }, finish_reason: null }] })}\n\n`;
    const error = `data: ${JSON.stringify({ error: { message: 'Upstream overloaded', type: 'server_error', code: 503 } })}\n\n`;
    hot.next({ kind: 'raw-stream', pieces: [Buffer.from(chunk + error + 'data: [DONE]\n\n')], hold: true });
    const res = await chat(gw.url, { model: 'x', messages: [{ role: 'user', content: 'hi' }], stream: true });
    expect(res.text).toBe(chunk + error + 'data: [DONE]\n\n');
    await gw.meter.flush();
    expect(gw.events().map((e) => e.error_code)).toEqual(['STREAM_INTERRUPTED']);
    expect(gw.gateway.path.failover.routes[0].health.lastTwenty()).toEqual([0]);
  });

  it('a provider that ends its response normally after every finish_reason but sends no [DONE]: complete, [DONE] added, usage metered', async () => {
    const event = (value: object) => `data: ${JSON.stringify(value)}\n\n`;
    const chunk = (choices: object[]) => event({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'x', choices });
    const choice = (index: number, delta: object, finish: string | null = null) => ({ index, delta, finish_reason: finish });
    const usage = event({
      id: 'c',
      object: 'chat.completion.chunk',
      created: 1,
      model: 'x',
      choices: [],
      usage: { prompt_tokens: 7, completion_tokens: 2 },
    });
    const hello = chunk([choice(0, { role: 'assistant', content: 'hi' })]);
    const stop = chunk([choice(0, {}, 'stop')]); // a piece of its own: whole events in LF form, as most chunks are
    const ask = (n?: number) =>
      chat(gw.url, { model: 'x', messages: [{ role: 'user', content: 'hi' }], stream: true, stream_options: { include_usage: true }, n });
    const route = () => gw.gateway.path.failover.routes[0];

    hot.next({ kind: 'raw-stream', pieces: [Buffer.from(hello), Buffer.from(stop), Buffer.from(usage)] });
    expect((await ask()).text).toBe(hello + stop + usage + 'data: [DONE]\n\n'); // no error after a complete answer
    // Two choices, both finished (in one chunk, or one after the other): complete too.
    const both = chunk([choice(0, {}, 'stop'), choice(1, {}, 'length')]);
    hot.next({ kind: 'raw-stream', pieces: [Buffer.from(hello), Buffer.from(both)] });
    expect((await ask(2)).text).toBe(hello + both + 'data: [DONE]\n\n');
    await gw.meter.flush();
    expect(gw.events().map((e) => [e.input_tokens, e.output_tokens, e.error_code])).toEqual([
      ['7', '2', ''],
      ['0', '0', 'UNPRICED'], // complete, but it reported no usage
    ]);
    expect(route().health.lastTwenty()).toEqual([1, 1]);

    // Still interrupted: ended before the finish_reason, before every choice's, in the middle of the
    // usage chunk after it, or cut (a reset) after it.
    const cuts: Behaviour[] = [
      { kind: 'raw-stream', pieces: [Buffer.from(hello)] },
      { kind: 'raw-stream', pieces: [Buffer.from(hello), Buffer.from(stop)] },
      { kind: 'raw-stream', pieces: [Buffer.from(hello), Buffer.from(stop), Buffer.from(usage.slice(0, 40))] },
      { kind: 'raw-stream', pieces: [Buffer.from(hello), Buffer.from(stop), Buffer.from(usage)], reset: true },
    ];
    for (const [i, cut] of cuts.entries()) {
      hot.next(cut);
      const res = await ask(i === 1 ? 2 : undefined);
      expect(res.text).toContain('"code":"stream_interrupted"');
      expect(res.text).not.toContain('[DONE]');
    }
    await gw.meter.flush();
    expect(gw.events().map((e) => e.error_code.split('|')[0])).toEqual(['', 'UNPRICED', ...cuts.map(() => 'STREAM_INTERRUPTED')]);
    expect(route().health.lastTwenty()).toEqual([1, 1, ...cuts.map(() => 0)]);
    // /metrics counts each stream by how it ended, not as `ok` at its first byte.
    const metrics = await (await fetch(`${gw.url}/metrics`, { headers: { authorization: `Bearer ${ADMIN}` } })).text();
    expect(metrics).toContain(`gateway_route_calls_total{route="${route().label}",outcome="ok"} 2`);
    expect(metrics).toContain(`gateway_route_calls_total{route="${route().label}",outcome="stream_interrupted"} 4`);
  });

  it('a stream the provider ends normally a few bytes into the event after the finish_reason (no data line yet) is interrupted', async () => {
    const event = (value: object) => `data: ${JSON.stringify(value)}\n\n`;
    const chunk = (choices: object[]) => event({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'x', choices });
    const hello = chunk([{ index: 0, delta: { role: 'assistant', content: 'hi' }, finish_reason: null }]);
    const stop = chunk([{ index: 0, delta: {}, finish_reason: 'stop' }]);
    // The usage chunk cut after `d`, `dat`, or its field name and a CR line break: no event was ever dispatched for it.
    const tails = ['d', 'dat', 'event: message\n', 'data\r'];
    for (const tail of tails) {
      hot.next({ kind: 'raw-stream', pieces: [Buffer.from(hello), Buffer.from(stop), Buffer.from(tail)] });
      const res = await chat(gw.url, { model: 'x', messages: [{ role: 'user', content: 'hi' }], stream: true });
      expect(res.text, JSON.stringify(tail)).toContain('"code":"stream_interrupted"');
      expect(res.text).not.toContain('[DONE]');
    }
    // A whole answer followed by nothing but line breaks (CRLF framing's last blank line) is still whole.
    hot.next({ kind: 'raw-stream', pieces: [Buffer.from(hello), Buffer.from(stop), Buffer.from('\r\n')] });
    expect((await chat(gw.url, { model: 'x', messages: [{ role: 'user', content: 'hi' }], stream: true })).text).toBe(
      hello + stop + 'data: [DONE]\n\n',
    );
    await gw.meter.flush();
    expect(gw.events().map((e) => e.error_code.split('|')[0])).toEqual([...tails.map(() => 'STREAM_INTERRUPTED'), 'UNPRICED']);
  });

  it('a chat stream with an error inside it is relayed as it came, then metered as a failure of the route', async () => {
    const chunk = `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'x', choices: [{ index: 0, delta: { content: 'an "error": not one' }, finish_reason: null }] })}\n\n`;
    const error = `data: ${JSON.stringify({ error: { message: 'Upstream overloaded', type: 'server_error', code: 503 } })}\n\n`;
    hot.always({ kind: 'raw-stream', pieces: [Buffer.from(chunk), Buffer.from(error + 'data: [DONE]\n\n')] });
    const res = await chat(gw.url, { model: 'x', messages: [{ role: 'user', content: 'hi' }], stream: true });
    expect(res.text).toBe(chunk + error + 'data: [DONE]\n\n'); // nothing added: the client saw the provider's error
    await gw.meter.flush();
    expect(gw.events().map((e) => e.error_code)).toEqual(['STREAM_INTERRUPTED']);
    hot.always({ kind: 'raw-stream', pieces: [Buffer.from(chunk + 'data: [DONE]\n\n')] });
    expect((await chat(gw.url, { model: 'x', messages: [{ role: 'user', content: 'hi' }], stream: true })).text).toBe(
      chunk + 'data: [DONE]\n\n',
    );
    await gw.meter.flush();
    // "error" in the text is text: a complete answer (UNPRICED: this one reported no usage)
    expect(gw.events().map((e) => e.error_code)).toEqual(['STREAM_INTERRUPTED', 'UNPRICED']);
    // OpenRouter's way: a choice that finished with "error"; the usage chunk after it still counts.
    const openRouter = `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'x', choices: [{ index: 0, delta: {}, finish_reason: 'error' }] })}\n\n`;
    const usage = `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'x', choices: [], usage: { prompt_tokens: 5, completion_tokens: 2 } })}\n\n`;
    hot.always({ kind: 'raw-stream', pieces: [Buffer.from(chunk + openRouter + usage + 'data: [DONE]\n\n')] });
    await chat(gw.url, { model: 'x', messages: [{ role: 'user', content: 'hi' }], stream: true });
    await gw.meter.flush();
    expect(
      gw
        .events()
        .map((e) => [e.input_tokens, e.error_code])
        .at(-1),
    ).toEqual(['5', 'STREAM_INTERRUPTED']);
  });

  it('a Responses stream the provider ends with response.failed is metered as a failure of the route, its usage kept', async () => {
    const event = (type: string, response: object) =>
      `event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: 0, response: { id: 'resp_1', object: 'response', ...response } })}\n\n`;
    const failed = event('response.failed', {
      status: 'failed',
      error: { code: 'server_error', message: 'the model crashed' },
      usage: { input_tokens: 9, output_tokens: 2, total_tokens: 11 },
    });
    hot.always({ kind: 'raw-stream', pieces: [Buffer.from(event('response.created', { status: 'in_progress' }) + failed)] });
    const res = await fetch(`${gw.url}/v1/responses`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'x', input: 'hi', stream: true }),
    });
    const text = await res.text();
    expect(text.endsWith(failed)).toBe(true); // the provider's own event, nothing added after it
    await gw.meter.flush();
    expect(gw.events().map((e) => [e.input_tokens, e.output_tokens, e.error_code])).toEqual([['9', '2', 'STREAM_INTERRUPTED']]);
  });

  it('"[DONE]" inside an answer is text: a stream cut after it is still reported as interrupted', async () => {
    hot.always({ kind: 'stream', contents: ['say [DONE] now', ' and more', ' never sent'], cutAfter: 2, delayMs: 20 });
    const res = await chat(gw.url, { model: 'x', messages: [{ role: 'user', content: 'hi' }], stream: true });
    expect(res.text).toContain('say [DONE] now');
    expect(res.text).toContain('"code":"stream_interrupted"');
    await gw.meter.flush();
    expect(gw.events().at(-1)!.error_code).toBe('STREAM_INTERRUPTED');
  });

  it('OpenAI\'s own form cut anywhere ("usage":null on every chunk, a comment, an event and a character split): every event as sent, the usage chunk only when asked, the usage metered', async () => {
    const event = (value: object) => `data: ${JSON.stringify(value)}\n\n`;
    const chunk = (delta: object, finish: string | null = null) =>
      event({ id: 'c', choices: [{ index: 0, delta, finish_reason: finish }], usage: null });
    const [first, second, last] = [chunk({ role: 'assistant', content: 'Olá' }), chunk({ content: ' mundo é' }), chunk({}, 'stop')];
    const usage = event({ id: 'c', choices: [], usage: { prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 } });
    const done = 'data: [DONE]\n\n';
    const cut = Buffer.from(second).indexOf(Buffer.from('é')) + 1; // between the two bytes of "é"
    const pieces = [
      Buffer.from(first),
      Buffer.from(second).subarray(0, cut),
      Buffer.concat([Buffer.from(second).subarray(cut), Buffer.from(': keep-alive\n\n')]),
      Buffer.from(last),
      Buffer.from(usage + done),
    ];
    for (const asked of [false, true]) {
      hot.always({ kind: 'raw-stream', pieces });
      const res = await chat(gw.url, {
        model: 'x',
        messages: [{ role: 'user', content: 'hi' }],
        stream: true,
        ...(asked ? { stream_options: { include_usage: true } } : {}),
      });
      expect(res.text).toBe(first + second + last + (asked ? usage : '') + done);
    }
    await gw.meter.flush();
    expect(gw.events().map((e) => [e.input_tokens, e.output_tokens, e.error_code])).toEqual([
      ['7', '3', ''],
      ['7', '3', ''],
    ]);
  });
});

describe('comments before the first event (a provider that says it is still working)', () => {
  let warm: FakeProvider;
  let two: TestGateway;
  beforeEach(async () => {
    warm = await new FakeProvider().start();
    two = await startGateway(mapOf([hot.url], [warm.url]));
  });
  afterEach(async () => {
    await two.close();
    await warm.stop();
  });

  it('a provider that fails after only comments is failed over: the client streams the next route, as if nothing had come', async () => {
    hot.always({ kind: 'raw-stream', pieces: [Buffer.from(': OPENROUTER PROCESSING\n\n'), Buffer.from(': OPENROUTER PROC')], reset: true });
    warm.always({ kind: 'stream', chunks: 3 });
    const { data, response } = await new OpenAI({ baseURL: `${two.url}/v1`, apiKey: 'unused', maxRetries: 0 }).chat.completions
      .create({ model: 'x', messages: [{ role: 'user', content: 'hi' }], stream: true, stream_options: { include_usage: true } })
      .withResponse();
    expect(response.headers.get('x-route-tier')).toBe('warm');
    const { text, usage } = await streamText(data);
    expect(text).toBe('part0 part1 part2');
    expect(usage).toMatchObject({ prompt_tokens: 20, completion_tokens: 3 });
    await two.meter.flush();
    expect(two.events().map((e) => [e.provider, e.error_code])).toEqual([
      ['openai', 'PROVIDER_DOWN'],
      ['openai', 'PROVIDER_DOWN'],
      ['openai', 'PROVIDER_DOWN'],
      ['anthropic', ''],
    ]);
  });

  it("a provider whose first event reports an error (OpenRouter's way when the model fails before its first token) is failed over", async () => {
    const failed = {
      id: 'gen-1',
      object: 'chat.completion.chunk',
      created: 1,
      model: 'x',
      error: { code: 502, message: 'Provider returned error' },
      choices: [{ index: 0, delta: { content: '' }, finish_reason: 'error' }],
    };
    const first = Buffer.from(`: OPENROUTER PROCESSING\n\ndata: ${JSON.stringify(failed)}\n\ndata: [DONE]\n\n`);
    hot.always({ kind: 'raw-stream', pieces: [first] });
    warm.always({ kind: 'stream', chunks: 3 });
    const { data, response } = await new OpenAI({ baseURL: `${two.url}/v1`, apiKey: 'unused', maxRetries: 0 }).chat.completions
      .create({ model: 'x', messages: [{ role: 'user', content: 'hi' }], stream: true, stream_options: { include_usage: true } })
      .withResponse();
    expect(response.headers.get('x-route-tier')).toBe('warm');
    expect((await streamText(data)).text).toBe('part0 part1 part2');
    await two.meter.flush();
    expect(two.events().map((e) => [e.provider, e.error_code])).toEqual([
      ['openai', 'PROVIDER_ERROR'],
      ['openai', 'PROVIDER_ERROR'],
      ['openai', 'PROVIDER_ERROR'],
      ['anthropic', ''],
    ]);
    // A Responses request translated for chat-only routes (anthropic, then mistral) is failed over the same way.
    const chatOnly = await startGateway(mapOf([], [hot.url, warm.url]));
    try {
      const final = await new OpenAI({ baseURL: `${chatOnly.url}/v1`, apiKey: 'unused', maxRetries: 0 }).responses
        .stream({ model: 'x', input: 'hi' })
        .finalResponse();
      expect(final).toMatchObject({ status: 'completed', output_text: 'part0 part1 part2' });
    } finally {
      await chatOnly.close();
    }
  });

  it('blocks without data before the first event (retry:, an id: or event: line alone) are no answer either: failed over all the same', async () => {
    const chunk = (delta: object, finish: string | null = null) =>
      `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'x', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
    // A whole stream after them is relayed, the event after them whole (first: the failures below open the route's breaker).
    const whole = chunk({ role: 'assistant', content: 'hi' }) + chunk({}, 'stop') + 'data: [DONE]\n\n';
    hot.always({ kind: 'raw-stream', pieces: ['retry: 3000\r\n\r\n', 'event: message\nid: 1\n', whole].map((p) => Buffer.from(p)) });
    const res = await chat(two.url, { model: 'x', messages: [{ role: 'user', content: 'hi' }], stream: true });
    expect([res.headers.get('x-route-tier'), res.text]).toEqual(['hot', `event: message\nid: 1\n${whole}`]);
    // The event after one is handed on once whole, though its `data` came split from the block's end, and nothing follows yet.
    const first = chunk({ role: 'assistant', content: 'first' });
    hot.next({ kind: 'raw-stream', pieces: ['id: 0\n\nd', 'a', first.slice(2)].map((p) => Buffer.from(p)), hold: true });
    const client = new OpenAI({ baseURL: `${two.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    for await (const told of await client.chat.completions.create({
      model: 'x',
      messages: [{ role: 'user', content: 'hi' }],
      stream: true,
    })) {
      expect(told.choices[0].delta.content).toBe('first');
      break;
    }
    const failed = `data: ${JSON.stringify({ id: 'gen-5', object: 'chat.completion.chunk', created: 1, model: 'x', error: { code: 502, message: 'Provider returned error' }, choices: [] })}\n\n`;
    for (const hotSays of [
      { pieces: ['retry: 3000\n\n', ': OPENROUTER PROCESSING\n\n', 'retry: 30'], reset: true },
      { pieces: ['id: 0\n\nevent: ping\n\n'] },
      { pieces: ['retry: 3000\r\r', `event: ping\r\r${failed}data: [DONE]\n\n`] },
    ]) {
      hot.always({ kind: 'raw-stream', ...hotSays, pieces: hotSays.pieces.map((p) => Buffer.from(p)) });
      warm.always({ kind: 'stream', chunks: 2 });
      const { data, response } = await client.chat.completions
        .create({ model: 'x', messages: [{ role: 'user', content: 'hi' }], stream: true })
        .withResponse();
      expect([response.headers.get('x-route-tier'), (await streamText(data)).text]).toEqual(['warm', 'part0 part1']);
    }
  });

  it('a block without data is no answer though `data` is in its text, and the event after it is read whole though the block ended in the same piece', async () => {
    const failed = `data: ${JSON.stringify({ id: 'gen-6', object: 'chat.completion.chunk', created: 1, model: 'x', error: { code: 502, message: 'Provider returned error' }, choices: [] })}\n\n`;
    for (const pieces of [
      ['event: metadata\n\n', failed],
      ['id: data-1\n\n', failed],
      ['retry: 3000\n: waiting for data\n\n', failed],
      ['event: ping\n\n' + failed.slice(0, 40), failed.slice(40)],
      ['id: 0\r\n', '\r\n' + failed.slice(0, 40), failed.slice(40)],
    ]) {
      // A gateway of its own for each: hot's failures would open its breaker for the next.
      const own = await startGateway(mapOf([hot.url], [warm.url]));
      try {
        hot.always({ kind: 'raw-stream', pieces: pieces.map((p) => Buffer.from(p)) });
        warm.always({ kind: 'stream', chunks: 2 });
        const asked = hot.received.length;
        const { data, response } = await new OpenAI({ baseURL: `${own.url}/v1`, apiKey: 'unused', maxRetries: 0 }).chat.completions
          .create({ model: 'x', messages: [{ role: 'user', content: 'hi' }], stream: true })
          .withResponse();
        const text = await streamText(data).then(
          (told) => told.text,
          (error: Error) => error.message,
        );
        expect([pieces, hot.received.length > asked, response.headers.get('x-route-tier'), text]).toEqual([
          pieces,
          true,
          'warm',
          'part0 part1',
        ]);
      } finally {
        await own.close();
      }
    }
  });

  it('blocks without data sent as keep-alives do not stop the time-to-answer, as comments do not', async () => {
    hot.always({ kind: 'raw-stream', pieces: Array.from({ length: 60 }, () => Buffer.from('event: ping\n\n')), gapMs: 50, hold: true });
    warm.always({ kind: 'status', status: 500 });
    const res = await fetch(`${two.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-time-to-answer-ms': '1000' },
      body: JSON.stringify({ model: 'x', messages: [{ role: 'user', content: 'hi' }], stream: true }),
      signal: AbortSignal.timeout(5000),
    });
    expect([res.status, ((await res.json()) as { error: { code: string } }).error.code]).toEqual([504, 'time_to_answer']);
  });

  it('a stream that begins with a byte-order mark: its comments and an error first event after it are failed over all the same', async () => {
    const failed = `data: ${JSON.stringify({ id: 'gen-4', object: 'chat.completion.chunk', created: 1, model: 'x', error: { code: 502, message: 'Provider returned error' }, choices: [] })}\n\n`;
    const bom = Buffer.from([0xef, 0xbb, 0xbf]);
    // A whole stream after its mark is relayed as it came, the mark aside (first: the failures below open the route's breaker).
    const chunk = (delta: object, finish: string | null = null) =>
      `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'x', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
    const whole = chunk({ role: 'assistant', content: 'hi' }) + chunk({}, 'stop') + 'data: [DONE]\n\n';
    hot.always({ kind: 'raw-stream', pieces: [Buffer.concat([bom, Buffer.from(whole)])] });
    const res = await chat(two.url, { model: 'x', messages: [{ role: 'user', content: 'hi' }], stream: true });
    expect([res.headers.get('x-route-tier'), res.text]).toEqual(['hot', whole]);
    for (const hotSays of [
      { pieces: [Buffer.concat([bom, Buffer.from(`${failed}data: [DONE]\n\n`)])] },
      { pieces: [Buffer.concat([bom, Buffer.from(': OPENROUTER PROCESSING\n\n')]), Buffer.from(': OPENROUTER PROC')], reset: true },
      // The mark split from its stream, and from itself.
      { pieces: [bom.subarray(0, 1), Buffer.concat([bom.subarray(1), Buffer.from(': OPENROUTER PROCESSING\n\n')]), Buffer.from(failed)] },
    ]) {
      hot.always({ kind: 'raw-stream', ...hotSays });
      warm.always({ kind: 'stream', chunks: 2 });
      const { data, response } = await new OpenAI({ baseURL: `${two.url}/v1`, apiKey: 'unused', maxRetries: 0 }).chat.completions
        .create({ model: 'x', messages: [{ role: 'user', content: 'hi' }], stream: true })
        .withResponse();
      expect([response.headers.get('x-route-tier'), (await streamText(data)).text]).toEqual(['warm', 'part0 part1']);
    }
  });

  it('a first event that reports an error in pieces (split where a network or a proxy splits it) is failed over all the same', async () => {
    const failed = `data: ${JSON.stringify({ id: 'gen-2', object: 'chat.completion.chunk', created: 1, model: 'x', error: { code: 502, message: 'Provider returned error' }, choices: [] })}`;
    // Split before `"error"` is seen, inside it, and between the event's two line ends.
    const at = failed.indexOf('"error"');
    for (const pieces of [
      [failed.slice(0, at - 5), `${failed.slice(at - 5)}\n\n`],
      [failed.slice(0, at + 20), `${failed.slice(at + 20)}\r\n`, '\r\n'],
      [`${failed}\n`, '\n'],
    ]) {
      hot.always({ kind: 'raw-stream', pieces: [...pieces, 'data: [DONE]\n\n'].map((p) => Buffer.from(p)) });
      warm.always({ kind: 'stream', chunks: 2 });
      const { data, response } = await new OpenAI({ baseURL: `${two.url}/v1`, apiKey: 'unused', maxRetries: 0 }).chat.completions
        .create({ model: 'x', messages: [{ role: 'user', content: 'hi' }], stream: true })
        .withResponse();
      expect([response.headers.get('x-route-tier'), (await streamText(data)).text]).toEqual(['warm', 'part0 part1']);
    }
  });

  it('a first event that reports an error and ends in a CR (CR-only line ends, or a CRLF split between its CR and LF) is failed over', async () => {
    const failed = `data: ${JSON.stringify({ id: 'gen-3', object: 'chat.completion.chunk', created: 1, model: 'x', error: { code: 502, message: 'Provider returned error' }, choices: [] })}`;
    for (const pieces of [[`${failed}\r\n\r`, '\n'], [`${failed}\r\r`]]) {
      hot.always({ kind: 'raw-stream', pieces: [...pieces, 'data: [DONE]\r\n\r\n'].map((p) => Buffer.from(p)) });
      warm.always({ kind: 'stream', chunks: 2 });
      const { data, response } = await new OpenAI({ baseURL: `${two.url}/v1`, apiKey: 'unused', maxRetries: 0 }).chat.completions
        .create({ model: 'x', messages: [{ role: 'user', content: 'hi' }], stream: true })
        .withResponse();
      expect([response.headers.get('x-route-tier'), (await streamText(data)).text]).toEqual(['warm', 'part0 part1']);
    }
  });

  it('a first event past 1 MiB in small pieces is relayed whole, without holding the gateway up while it gathers them', async () => {
    // A provider (or a proxy before it) that writes its first event 256 bytes at a time: each piece a
    // chunk of its own, which undici hands on one by one, hundreds from each read.
    const content = 'x'.repeat(256);
    const head = `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"x","choices":[{"index":0,"delta":{"content":"`;
    const pieces = 6000; // some 1.5 MiB
    const provider = createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write(head);
        for (let i = 0; i < pieces; i++) res.write(content);
        res.end('"},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n');
      });
    });
    await new Promise<void>((r) => provider.listen(0, '127.0.0.1', r));
    const big = await startGateway(mapOf([`http://127.0.0.1:${(provider.address() as AddressInfo).port}/v1`]));
    const delay = monitorEventLoopDelay({ resolution: 10 });
    try {
      delay.enable();
      const res = await fetch(`${big.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'x', messages: [{ role: 'user', content: 'hi' }], stream: true }),
      });
      delay.disable(); // the pieces gathered: the stream's answer has begun
      // Gathered piece by piece, not copied and searched again whole with each piece (seconds, all of
      // it with every other request on the instance held up).
      expect(delay.max / 1e6).toBeLessThan(500); // about 3.7 s before, 0.1 s now (the provider here writes in this process too)
      const text = await res.text();
      expect(text).toContain(`"content":"${content.repeat(pieces)}"`);
      expect(text.endsWith('data: [DONE]\n\n')).toBe(true);
    } finally {
      delay.disable();
      await big.close();
      await new Promise<void>((r) => provider.close(() => r()));
    }
  });

  it('a stream that ends inside its first event is failed over; one whose only event lacks its blank line is relayed', async () => {
    const chunk = `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'x', choices: [{ index: 0, delta: { content: 'whole' }, finish_reason: 'stop' }] })}`;
    const client = new OpenAI({ baseURL: `${two.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const ask = () =>
      client.chat.completions.create({ model: 'x', messages: [{ role: 'user', content: 'hi' }], stream: true }).withResponse();
    // Cut short (the provider ended its response mid-event): the client would get half an event it cannot read.
    hot.always({ kind: 'raw-stream', pieces: [Buffer.from(chunk.slice(0, 60))] });
    warm.always({ kind: 'stream', chunks: 2 });
    const cut = await ask();
    expect([cut.response.headers.get('x-route-tier'), (await streamText(cut.data)).text]).toEqual(['warm', 'part0 part1']);
    // Whole, though the server ended without the blank line: the answer.
    hot.always({ kind: 'raw-stream', pieces: [Buffer.from(chunk)] });
    const whole = await ask();
    expect([whole.response.headers.get('x-route-tier'), (await streamText(whole.data)).text]).toEqual(['hot', 'whole']);
  });

  it('comments do not stop the time-to-answer, and the events after them are relayed whole', async () => {
    const chunk = `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'x', choices: [{ index: 0, delta: { content: 'late' }, finish_reason: 'stop' }] })}\n\n`;
    // Comments every 50 ms for about 2 s, then the answer: past a time-to-answer of 500 ms.
    const comments = Array.from({ length: 40 }, () => Buffer.from(': keep-alive\n\n'));
    hot.always({ kind: 'raw-stream', pieces: [...comments, Buffer.from(chunk + 'data: [DONE]\n\n')], gapMs: 50 });
    const late = await chat(
      two.url,
      { model: 'x', messages: [{ role: 'user', content: 'hi' }], stream: true },
      { 'x-time-to-answer-ms': '500' },
    );
    expect([late.status, late.json().error.code]).toEqual([504, 'time_to_answer']); // this gateway has no Cold tier
    // Cut at the time-to-answer, not waited for to its end (2 s): the provider is hung up on mid-stream.
    await until('the provider to be hung up on', () => hot.cancelled === 1);
    // In time, a comment then the answer in one chunk: the client gets the answer, from its first event.
    hot.always({ kind: 'raw-stream', pieces: [Buffer.from(`: keep-alive\r\n\r\n${chunk}data: [DONE]\n\n`)] });
    const res = await chat(two.url, { model: 'x', messages: [{ role: 'user', content: 'hi' }], stream: true });
    expect(res.text).toBe(`${chunk}data: [DONE]\n\n`);
  });
});

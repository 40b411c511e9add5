// A stream the client hangs up on is still billed by the provider: the whole prompt, and the tokens
// it generated before the cut. Its meter event carries the provider's usage when it came before
// the cut, else an estimate marked ESTIMATED (never a silent $0); a stream the provider cut keeps
// its metering.
import { Agent, type Dispatcher } from 'undici';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { GeneratedText } from '../../gateway/src/cut-estimate';
import { costUsd } from '../../gateway/src/pricing';
import { FakeProvider } from './fake-provider';
import { ADMIN, mapOf, startGateway, type TestGateway } from './harness';

let hot: FakeProvider;
let gw: TestGateway | undefined;
beforeEach(async () => {
  hot = await new FakeProvider().start();
});
afterEach(async () => {
  vi.restoreAllMocks();
  await gw?.close();
  gw = undefined;
  await hot.stop();
});

const chunk = (delta: object, extra: object = {}) =>
  `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'gpt-4o-mini', choices: [{ index: 0, delta, finish_reason: null }], ...extra })}\n\n`;
/** A chat stream still generating: a role chunk, three pieces of text (17 bytes), then nothing until the caller hangs up. */
const GENERATING = [
  chunk({ role: 'assistant', content: '' }),
  chunk({ content: 'Hello' }),
  chunk({ content: ' world' }),
  chunk({ content: ' again' }),
];
const PROMPT = 'Tell me a story about a lighthouse keeper and the sea, in three short paragraphs.';

/** Posts `body` to `path`, reads the stream until `seen` shows in it, then hangs up. */
async function hangUpAfter(path: string, body: object, seen: string): Promise<string> {
  const controller = new AbortController();
  const res = await fetch(`${gw!.url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
    signal: controller.signal,
  });
  expect(res.status).toBe(200);
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let text = '';
  while (!text.includes(seen)) {
    const { value, done } = await reader.read();
    if (done) throw new Error(`the stream ended before ${seen}: ${text}`);
    text += decoder.decode(value, { stream: true });
  }
  controller.abort();
  return text;
}

async function theEvent(): Promise<Record<string, string>> {
  let events: Array<Record<string, string>> = [];
  await expect
    .poll(async () => {
      await gw!.meter.flush();
      events = gw!.events();
      return events.length;
    })
    .toBe(1);
  return events[0];
}

/** The rule in docs/gateway.md: one token per 3 bytes of UTF-8, rounded up. */
const tokensOf = (text: string) => Math.ceil(Buffer.byteLength(text) / 3);

const priced = (input: number, output: number) =>
  costUsd('openai', 'gpt-4o-mini', { input_tokens: input, output_tokens: output }, () => {});

describe('a chat stream the client hangs up on', () => {
  it('is metered with an estimate of what the provider billed, marked ESTIMATED, not as 0 tokens and $0', async () => {
    const keyTokens: number[] = [];
    gw = await startGateway(mapOf([hot.url]), { onTokens: (_, tokens) => keyTokens.push(tokens) });
    hot.always({ kind: 'raw-stream', pieces: [Buffer.from(GENERATING.join(''))], hold: true });
    const body = { model: 'gpt-4o-mini', messages: [{ role: 'user', content: PROMPT }], stream: true };
    await hangUpAfter('/v1/chat/completions', body, 'again');
    const event = await theEvent();
    const input = tokensOf(JSON.stringify(body));
    const output = tokensOf('Hello world again'); // 17 bytes: 6 tokens, more than the 3 deltas
    expect([event.error_code, event.input_tokens, event.output_tokens]).toEqual(['CLIENT_CLOSED|ESTIMATED', `${input}`, `${output}`]);
    expect(Number(event.cost_usd)).toBeGreaterThan(0);
    expect(Number(event.cost_usd)).toBeCloseTo(priced(input, output)!, 12);
    expect(keyTokens).toEqual([input + output]); // the client key's tokens per minute count them too
    // Still not the route's failure: the breaker and health are untouched, as before.
    expect(gw.gateway.path.failover.routes[0].breaker.state()).toBe('closed');
    // An operator sees how many calls are estimated, by route.
    const metrics = await (await fetch(`${gw.url}/metrics`, { headers: { authorization: `Bearer ${ADMIN}` } })).text();
    expect(metrics).toContain(`gateway_estimated_calls_total{route="${gw.gateway.path.failover.routes[0].label}"} 1`);
  });

  it('asked at a service tier: the estimate is priced at that tier, as the provider bills the call', async () => {
    gw = await startGateway(mapOf([hot.url]));
    hot.always({ kind: 'raw-stream', pieces: [Buffer.from(GENERATING.join(''))], hold: true });
    const body = { model: 'gpt-4o-mini', messages: [{ role: 'user', content: PROMPT }], stream: true, service_tier: 'priority' };
    await hangUpAfter('/v1/chat/completions', body, 'again');
    const event = await theEvent();
    const input = tokensOf(JSON.stringify(body));
    const output = tokensOf('Hello world again');
    expect([event.error_code, event.input_tokens, event.output_tokens]).toEqual(['CLIENT_CLOSED|ESTIMATED', `${input}`, `${output}`]);
    // gpt-4o-mini at priority: $0.25 and $1.00 per million tokens (standard $0.15 and $0.60).
    expect(Number(event.cost_usd)).toBeCloseTo((input * 0.25 + output * 1) / 1e6, 12);
  });

  it('counts at least one token per delta, text of tool calls and reasoning too', async () => {
    gw = await startGateway(mapOf([hot.url]));
    const deltas = [
      chunk({ role: 'assistant', content: null, reasoning_content: 'Hm' }),
      chunk({ tool_calls: [{ index: 0, id: 'call_1', type: 'function', function: { name: 'f', arguments: '{"' } }] }),
      chunk({ tool_calls: [{ index: 0, function: { arguments: 'a' } }] }),
      chunk({ tool_calls: [{ index: 0, function: { arguments: '":' } }] }),
      chunk({ tool_calls: [{ index: 0, function: { arguments: '1' } }] }),
    ];
    hot.always({ kind: 'raw-stream', pieces: [Buffer.from(deltas.join(''))], hold: true });
    const body = { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'x' }], stream: true };
    await hangUpAfter('/v1/chat/completions', body, '"1"');
    const event = await theEvent();
    // 5 pieces of text, 2 + 3 + 1 + 3 + 1 = 10 bytes as sent (`{\"` is 3): 4 tokens by bytes, 5 by pieces.
    expect([event.error_code, event.input_tokens, event.output_tokens]).toEqual([
      'CLIENT_CLOSED|ESTIMATED',
      `${tokensOf(JSON.stringify(body))}`,
      '5',
    ]);
  });

  it('a spoken answer (gpt-audio): its transcript counted as text, its audio (pcm16, 1 token per 50 ms) at the audio rate', async () => {
    const map = { ...mapOf([hot.url]), hot: [{ provider: 'openai', model: 'gpt-audio', baseUrl: hot.url }] };
    gw = await startGateway(map);
    const second = Buffer.alloc(48_000, 7).toString('base64'); // 1 s of 24 kHz 16-bit mono: 20 audio tokens; two of them
    const deltas = [
      chunk({ role: 'assistant', content: null, audio: { id: 'audio_1', transcript: 'Hello there' } }),
      chunk({ audio: { data: second } }),
      chunk({ audio: { data: second } }),
      chunk({ audio: { transcript: ', friend' } }),
    ];
    hot.always({ kind: 'raw-stream', pieces: deltas.map((d) => Buffer.from(d)), hold: true });
    const body = {
      model: 'gpt-audio',
      modalities: ['text', 'audio'],
      audio: { voice: 'alloy', format: 'pcm16' },
      messages: [{ role: 'user', content: 'x' }],
      stream: true,
    };
    await hangUpAfter('/v1/chat/completions', body, 'friend');
    const event = await theEvent();
    const input = tokensOf(JSON.stringify(body));
    const output = tokensOf('Hello there, friend') + 40;
    expect([event.error_code, event.input_tokens, event.output_tokens]).toEqual(['CLIENT_CLOSED|ESTIMATED', `${input}`, `${output}`]);
    const audioPriced = costUsd('openai', 'gpt-audio', { input_tokens: input, output_tokens: output, output_audio_tokens: 40 }, () => {});
    expect(Number(event.cost_usd)).toBeCloseTo(audioPriced!, 9);
  });

  it("uses the provider's usage, as measured, when it came before the hang-up", async () => {
    gw = await startGateway(mapOf([hot.url]));
    const usage = { prompt_tokens: 321, completion_tokens: 45, total_tokens: 366 };
    const end = `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'gpt-4o-mini', choices: [], usage })}\n\n`;
    hot.always({ kind: 'raw-stream', pieces: [Buffer.from(GENERATING.join('') + end)], hold: true }); // no [DONE] yet
    const body = {
      model: 'gpt-4o-mini',
      messages: [{ role: 'user', content: PROMPT }],
      stream: true,
      stream_options: { include_usage: true },
    };
    await hangUpAfter('/v1/chat/completions', body, '"usage"');
    const event = await theEvent();
    expect([event.error_code, event.input_tokens, event.output_tokens]).toEqual(['CLIENT_CLOSED', '321', '45']);
    expect(Number(event.cost_usd)).toBeCloseTo(priced(321, 45)!, 12);
  });

  it('a stream the provider cut keeps its metering: STREAM_INTERRUPTED, nothing estimated', async () => {
    gw = await startGateway(mapOf([hot.url]));
    hot.always({ kind: 'raw-stream', pieces: [Buffer.from(GENERATING.join(''))], reset: true });
    const res = await fetch(`${gw.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: PROMPT }], stream: true }),
    });
    expect(await res.text()).toContain('stream_interrupted');
    const event = await theEvent();
    expect([event.error_code, event.input_tokens, event.output_tokens, event.cost_usd]).toEqual(['STREAM_INTERRUPTED', '0', '0', '0']);
  });
});

describe('a Responses stream the client hangs up on', () => {
  const responsesBody = { model: 'gpt-4o-mini', input: PROMPT, stream: true };

  it('from a Responses provider: estimated from its text deltas', async () => {
    gw = await startGateway(mapOf([hot.url]));
    const created = { id: 'resp_1', object: 'response', status: 'in_progress', model: 'gpt-4o-mini', output: [], usage: null };
    const event = (type: string, n: number, fields: object) =>
      `event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: n, ...fields })}\n\n`;
    const pieces = [
      event('response.created', 0, { response: created }),
      event('response.output_text.delta', 1, { item_id: 'msg_1', output_index: 0, content_index: 0, delta: 'Once upon' }),
      event('response.output_text.delta', 2, { item_id: 'msg_1', output_index: 0, content_index: 0, delta: ' a time' }),
    ];
    hot.always({ kind: 'raw-stream', pieces: [Buffer.from(pieces.join(''))], hold: true });
    await hangUpAfter('/v1/responses', responsesBody, ' a time');
    expect(hot.received[0].path).toBe('/v1/responses');
    const metered = await theEvent();
    const [input, output] = [tokensOf(JSON.stringify(responsesBody)), tokensOf('Once upon a time')];
    expect([metered.error_code, metered.input_tokens, metered.output_tokens]).toEqual(['CLIENT_CLOSED|ESTIMATED', `${input}`, `${output}`]);
    expect(Number(metered.cost_usd)).toBeGreaterThan(0);
    expect(Number(metered.cost_usd)).toBeCloseTo(priced(input, output)!, 12);
  });

  it('translated from a chat provider: estimated from the chat deltas', async () => {
    gw = await startGateway({ ...mapOf([]), hot: [{ provider: 'openai', model: 'gpt-4o-mini', baseUrl: hot.url, apis: ['chat'] }] });
    hot.always({ kind: 'raw-stream', pieces: [Buffer.from(GENERATING.join(''))], hold: true });
    await hangUpAfter('/v1/responses', responsesBody, ' again');
    expect(hot.received[0].path).toBe('/v1/chat/completions');
    const metered = await theEvent();
    const [input, output] = [tokensOf(JSON.stringify(responsesBody)), tokensOf('Hello world again')];
    expect([metered.error_code, metered.input_tokens, metered.output_tokens]).toEqual(['CLIENT_CLOSED|ESTIMATED', `${input}`, `${output}`]);
    expect(Number(metered.cost_usd)).toBeGreaterThan(0);
    expect(Number(metered.cost_usd)).toBeCloseTo(priced(input, output)!, 12);
  });

  it('translated from a chat provider, asked at a service tier: the chat call goes without it, and its estimate is priced at standard rates', async () => {
    gw = await startGateway({ ...mapOf([]), hot: [{ provider: 'openai', model: 'gpt-4o-mini', baseUrl: hot.url, apis: ['chat'] }] });
    hot.always({ kind: 'raw-stream', pieces: [Buffer.from(GENERATING.join(''))], hold: true });
    const body = { ...responsesBody, service_tier: 'priority' };
    await hangUpAfter('/v1/responses', body, ' again');
    expect(hot.received[0].body).not.toHaveProperty('service_tier');
    const metered = await theEvent();
    const [input, output] = [tokensOf(JSON.stringify(body)), tokensOf('Hello world again')];
    expect([metered.error_code, metered.input_tokens, metered.output_tokens]).toEqual(['CLIENT_CLOSED|ESTIMATED', `${input}`, `${output}`]);
    expect(Number(metered.cost_usd)).toBeCloseTo(priced(input, output)!, 12);
  });
});

describe('the generated text of a stream, counted from its bytes', () => {
  const count = (...chunks: string[]) => {
    const text = new GeneratedText();
    for (const c of chunks) text.scan(Buffer.from(c));
    return [text.pieces, text.bytes];
  };

  it('follows a value across chunks, escapes (quotes, a backslash at the cut) included', () => {
    const whole = 'data: {"choices":[{"delta":{"content":"say \\"hi\\" \\\\ ok"}}]}\n\n';
    const bytes = 'say \\"hi\\" \\\\ ok'.length;
    expect(count(whole)).toEqual([1, bytes]);
    // Cut at every byte: the same count.
    for (let i = 1; i < whole.length; i++) {
      const [pieces, b] = count(whole.slice(0, i), whole.slice(i));
      if (i > whole.indexOf('"delta"') && i <= whole.indexOf(':"say') + 1) continue; // a key cut from its value is missed
      expect([i, pieces, b]).toEqual([i, 1, bytes]);
    }
  });

  it('reads keys only: text that talks about "content" is not counted twice; null, objects and empty text are no text', () => {
    expect(count('{"delta":{"content":"\\"content\\":\\"x\\""}}')).toEqual([1, 17]);
    expect(count('{"delta":{"role":"assistant","content":null,"refusal":""},"logprobs":{"content":[]}}')).toEqual([0, 0]);
    expect(count('{"delta" : { "content" :\t"ab" }}')).toEqual([1, 2]);
  });

  it("reads a Responses event's delta text, and tool-call arguments nested in a chat delta; several events in a chunk", () => {
    const responses = 'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","delta":"abc"}\n\n';
    const call =
      'data: {"choices":[{"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"f","arguments":"{}"}}]}}]}\n\n';
    expect(count(responses + responses, call)).toEqual([3, 8]);
    expect(count((responses + responses).replaceAll('\n', '\r\n'))).toEqual([2, 6]);
  });
});

describe('a call the client hangs up on before the answer began', () => {
  /** Sends `body` to `path`, waits until the provider has received it, then hangs up. */
  async function hangUpOnceReceived(path: string, body: object, arrived?: () => boolean): Promise<void> {
    const controller = new AbortController();
    const call = fetch(`${gw!.url}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
      signal: controller.signal,
    }).catch(() => undefined);
    await expect.poll(() => hot.received.length).toBe(1);
    if (arrived) await expect.poll(arrived).toBe(true);
    controller.abort();
    await call;
  }

  /** The statuses of the provider answers whose first bytes of body reached the gateway's undici. */
  function answersBegun(): number[] {
    const begun: number[] = [];
    const dispatch = Agent.prototype.dispatch;
    vi.spyOn(Agent.prototype, 'dispatch').mockImplementation(function (this: Agent, options, handler) {
      // The gateway's calls only: the test's own fetch (an old-style handler) as it came.
      if (!handler.onRequestStart) return dispatch.call(this, options, handler);
      let status = 0;
      // Each method passed on, called on the handler (its methods may be on a class's prototype).
      const watched: Dispatcher.DispatchHandler = {
        onRequestStart: (controller, context) => handler.onRequestStart?.(controller, context),
        onResponseEnd: (controller, trailers) => handler.onResponseEnd?.(controller, trailers),
        onResponseError: (controller, error) => handler.onResponseError?.(controller, error),
        onResponseStart: (controller, statusCode, headers, message) => {
          status = statusCode;
          handler.onResponseStart?.(controller, statusCode, headers, message);
        },
        onResponseData: (controller, chunk) => {
          begun.push(status);
          handler.onResponseData?.(controller, chunk);
        },
      };
      return dispatch.call(this, options, watched);
    });
    return begun;
  }

  it('a whole answer still being generated: the prompt estimated, no output, marked ESTIMATED', async () => {
    const keyTokens: number[] = [];
    gw = await startGateway(mapOf([hot.url]), { onTokens: (_, tokens) => keyTokens.push(tokens) });
    hot.always({ kind: 'hang' }); // received, generating, not answered yet
    const body = { model: 'gpt-4o-mini', messages: [{ role: 'user', content: PROMPT }] };
    await hangUpOnceReceived('/v1/chat/completions', body);
    const event = await theEvent();
    const input = tokensOf(JSON.stringify(body));
    expect([event.error_code, event.input_tokens, event.output_tokens]).toEqual(['CLIENT_CLOSED|ESTIMATED', `${input}`, '0']);
    expect(Number(event.cost_usd)).toBeGreaterThan(0);
    expect(Number(event.cost_usd)).toBeCloseTo(priced(input, 0)!, 12);
    expect(keyTokens).toEqual([input]); // the client key's tokens per minute count them too
    expect(gw.gateway.path.failover.routes[0].breaker.state()).toBe('closed');
  });

  it('a stream before its first event (nothing yet, or only comments): the prompt estimated, no output', async () => {
    gw = await startGateway(mapOf([hot.url]));
    const begun = answersBegun();
    hot.next({ kind: 'hang' });
    hot.next({ kind: 'raw-stream', pieces: [Buffer.from(': OPENROUTER PROCESSING\n\n')], hold: true });
    const body = { model: 'gpt-4o-mini', messages: [{ role: 'user', content: PROMPT }], stream: true };
    for (const n of [1, 2]) {
      // The second: once its comment reached the gateway.
      await hangUpOnceReceived('/v1/chat/completions', body, n === 2 ? () => begun.length > 0 : undefined);
      await expect
        .poll(async () => {
          await gw!.meter.flush();
          return gw!.events().length;
        })
        .toBe(n);
      hot.received.length = 0;
    }
    const input = `${tokensOf(JSON.stringify(body))}`;
    const events = gw.events().map((e) => [e.error_code, e.input_tokens, e.output_tokens]);
    expect(events).toEqual([
      ['CLIENT_CLOSED|ESTIMATED', input, '0'],
      ['CLIENT_CLOSED|ESTIMATED', input, '0'],
    ]);
  });

  it('a stream whose first event came in part (held until it is whole): the text of that part is counted, on a hang-up or a time-out', async () => {
    gw = await startGateway(mapOf([hot.url]));
    const begun = answersBegun();
    const text = 'Once upon a time, a lighthouse keeper watched the sea';
    // A first event of one long delta, its end not come yet: the gateway holds it, the client has seen nothing.
    const part = Buffer.from(chunk({ role: 'assistant', content: text }).slice(0, -'"},"finish_reason":null}]}\n\n'.length));
    const body = { model: 'gpt-4o-mini', messages: [{ role: 'user', content: PROMPT }], stream: true };
    hot.next({ kind: 'raw-stream', pieces: [part], hold: true });
    await hangUpOnceReceived('/v1/chat/completions', body, () => begun.length > 0);
    await expect
      .poll(async () => {
        await gw!.meter.flush();
        return gw!.events().length;
      })
      .toBe(1);
    hot.received.length = 0;
    hot.always({ kind: 'raw-stream', pieces: [part], hold: true });
    const res = await fetch(`${gw.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-time-to-answer-ms': '300' },
      body: JSON.stringify(body),
    });
    expect(res.status).toBe(504);
    await gw.meter.flush();
    const input = `${tokensOf(JSON.stringify(body))}`;
    const output = `${tokensOf(text)}`;
    const events = gw.events().map((e) => [e.error_code, e.input_tokens, e.output_tokens]);
    expect(events[0]).toEqual(['CLIENT_CLOSED|ESTIMATED', input, output]);
    expect(events.slice(1)).toEqual(hot.received.map(() => ['TIMEOUT|ESTIMATED', input, output]));
    expect(events.length).toBeGreaterThan(1);
  });

  it("a whole answer whose first bytes came: still no output counted; an error answer's, nothing estimated", async () => {
    gw = await startGateway(mapOf([hot.url]));
    const begun = answersBegun();
    const body = { model: 'gpt-4o-mini', messages: [{ role: 'user', content: PROMPT }] };
    hot.next({
      kind: 'raw-stream',
      type: 'application/json',
      pieces: [Buffer.from('{"id":"c","choices":[{"message":{"content":"Once')],
      hold: true,
    });
    await hangUpOnceReceived('/v1/chat/completions', body, () => begun.includes(200));
    hot.received.length = 0;
    hot.next({ kind: 'raw-stream', status: 503, type: 'application/json', pieces: [Buffer.from('{"error":')], hold: true });
    await hangUpOnceReceived('/v1/chat/completions', body, () => begun.includes(503));
    await expect
      .poll(async () => {
        await gw!.meter.flush();
        return gw!.events().length;
      })
      .toBe(2);
    expect(gw.events().map((e) => [e.error_code, e.input_tokens, e.output_tokens, e.cost_usd === '0'])).toEqual([
      ['CLIENT_CLOSED|ESTIMATED', `${tokensOf(JSON.stringify(body))}`, '0', false],
      ['CLIENT_CLOSED', '0', '0', true], // a provider's error answer is not billed
    ]);
  });
});

describe('a call the gateway gives up on at its time-to-answer', () => {
  it('once the provider had it, it is billed all the same: the prompt estimated, marked TIMEOUT|ESTIMATED, not $0', async () => {
    gw = await startGateway(mapOf([hot.url]));
    hot.always({ kind: 'hang' }); // received, generating, never answered in time
    const body = { model: 'gpt-4o-mini', messages: [{ role: 'user', content: PROMPT }] };
    const res = await fetch(`${gw.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-time-to-answer-ms': '300' },
      body: JSON.stringify(body),
    });
    expect(res.status).toBe(504);
    await gw.meter.flush();
    const events = gw.events();
    expect(events.length).toBe(hot.received.length);
    const input = tokensOf(JSON.stringify(body));
    for (const event of events) {
      expect([event.error_code, event.input_tokens, event.output_tokens]).toEqual(['TIMEOUT|ESTIMATED', `${input}`, '0']);
      expect(Number(event.cost_usd)).toBeCloseTo(priced(input, 0)!, 12);
    }
  });
});

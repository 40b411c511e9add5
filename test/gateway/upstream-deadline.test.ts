// The bounds on a provider call in upstream.ts: the time-to-answer while a call still waits for a
// connection (the pool at its cap), and a stream whose provider goes silent after its first byte.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Agent } from 'undici';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { configureUpstream } from '../../gateway/src/upstream';
import { FakeProvider } from './fake-provider';
import { chat, mapOf, startGateway, type TestGateway } from './harness';

let hot: FakeProvider;
let gw: TestGateway | undefined;
let stall: Server | undefined;
beforeEach(async () => {
  hot = await new FakeProvider().start();
});
afterEach(async () => {
  vi.restoreAllMocks();
  await gw?.close();
  gw = undefined;
  await hot.stop();
  stall?.closeAllConnections();
  await new Promise((r) => (stall ? stall.close(r) : r(undefined)));
  stall = undefined;
  configureUpstream({ connections: null, http2: false });
});

const body = { model: 'x', messages: [{ role: 'user', content: 'hi' }] };
/** A call the test can hang up on. */
function call(url: string, tta: number, signal: AbortSignal): Promise<unknown> {
  const headers = { 'content-type': 'application/json', 'x-time-to-answer-ms': String(tta) };
  return fetch(`${url}/v1/chat/completions`, { method: 'POST', headers, body: JSON.stringify(body), signal }).catch(() => undefined);
}
async function meterCodes(): Promise<string[]> {
  await gw!.meter.flush();
  return gw!.events().map((e) => e.error_code);
}

describe('a call waiting for a connection (the pool at its cap)', () => {
  it('ends at its time-to-answer with 504, while another call still holds the only connection', async () => {
    configureUpstream({ connections: 1, http2: false });
    gw = await startGateway(mapOf([hot.url, hot.url]));
    hot.next({ kind: 'hang' }); // the first call holds the only connection, past this test's end
    const holder = new AbortController();
    const held = call(gw.url, 60_000, holder.signal);
    await expect.poll(() => hot.received.length).toBe(1);
    // Answered while the holder still holds it: without the bound, not before the holder lets go.
    const res = await chat(gw.url, undefined, { 'x-time-to-answer-ms': '500' });
    expect(res.status).toBe(504);
    expect(res.json().error.code).toBe('time_to_answer');
    expect(await meterCodes()).toEqual(['TIMEOUT']);
    expect(hot.received).toHaveLength(1);
    holder.abort();
    await held;
  });

  it('its client hanging up is metered CLIENT_CLOSED at once; the call is never sent and leaves the slot free', async () => {
    configureUpstream({ connections: 1, http2: false });
    gw = await startGateway(mapOf([hot.url]));
    hot.next({ kind: 'hang' });
    const holder = new AbortController();
    const held = call(gw.url, 15_000, holder.signal);
    await expect.poll(() => hot.received.length).toBe(1);
    const dispatch = vi.spyOn(Agent.prototype, 'dispatch');
    const client = new AbortController();
    const queued = call(gw.url, 15_000, client.signal);
    const toProvider = () => dispatch.mock.calls.filter(([o]) => hot.url.startsWith(String(o.origin))).length;
    await expect.poll(toProvider).toBe(1); // handed to undici, queued behind the holder
    client.abort();
    await queued;
    await expect.poll(meterCodes).toEqual(['CLIENT_CLOSED']); // the holder still holds the connection
    holder.abort();
    await held;
    const res = await chat(gw.url);
    expect(res.status).toBe(200);
    expect(hot.received).toHaveLength(2); // the holder and this one: the cancelled call never went out
  });
});

describe('a provider silent after its first byte', () => {
  it('ends the stream after the idle limit: stream_interrupted to the client, metered STREAM_INTERRUPTED with an estimate of what the provider billed', async () => {
    configureUpstream({ connections: null, http2: false, idleMs: 300 });
    let dropped = false;
    stall = createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        const delta = { role: 'assistant', content: 'part0' };
        res.write(
          `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [{ index: 0, delta }] })}\n\n`,
        );
        res.on('close', () => (dropped = true)); // then nothing, ever
      });
    });
    await new Promise<void>((r) => stall!.listen(0, '127.0.0.1', r));
    gw = await startGateway(mapOf([`http://127.0.0.1:${(stall.address() as AddressInfo).port}/v1`]));
    // The provider never sends more nor hangs up: without the limit, no answer within this test's time.
    const res = await chat(gw.url, { ...body, stream: true });
    expect(res.status).toBe(200);
    expect(res.text).toContain('part0');
    expect(res.text).toContain('"code":"stream_interrupted"');
    // Cut by our idle limit, as a call cut by our timer before its first event is: the provider had the
    // prompt and sent part0, and bills them; metered 0 tokens and $0, the call vanished from the spend.
    expect(await meterCodes()).toEqual(['STREAM_INTERRUPTED|ESTIMATED']);
    const [event] = gw.events();
    expect(Number(event.input_tokens)).toBeGreaterThan(0);
    expect(Number(event.output_tokens)).toBeGreaterThan(0);
    expect(Number(event.cost_usd)).toBeGreaterThan(0);
    await expect.poll(() => dropped).toBe(true); // the provider's connection closed
  }, 10_000);
});

describe('the wall clock set back during a call (an NTP step, a virtual machine resumed)', () => {
  it('the request still ends at its time-to-answer with 504: its provider is not called again for an hour the clock gave back', async () => {
    gw = await startGateway(mapOf([hot.url]));
    hot.always({ kind: 'hang' });
    const wall = Date.now.bind(Date);
    // Once the provider has the call, the machine's clock reads an hour earlier.
    vi.spyOn(Date, 'now').mockImplementation(() => wall() - (hot.received.length ? 3_600_000 : 0));
    const res = await chat(gw.url, undefined, { 'x-time-to-answer-ms': '500' });
    expect(res.status).toBe(504);
    expect(res.json().error.code).toBe('time_to_answer');
    expect(hot.received).toHaveLength(1);
  });
});

// The route breaker, driven through real calls to loopback providers with a clock the test controls.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { Breaker } from '../../gateway/src/breaker';
import { parseChatRequest } from '../../gateway/src/chat-request';
import { Deadline } from '../../gateway/src/deadline';
import { CallMeter } from '../../gateway/src/call-meter';
import { Failover } from '../../gateway/src/failover';
import type { Flags } from '../../gateway/src/flags';
import type { ApiKind } from '../../gateway/src/request-context';
import { buildRoutes } from '../../gateway/src/route';
import { FakeProvider } from './fake-provider';
import { chat, listenStack, mapOf, startGateway, type TestGateway } from './harness';

let hot: FakeProvider, warm: FakeProvider;
let failover: Failover;
const clock = { ms: 1_000_000 };
const flags = { enable_warm_fallback: true, enable_cold_queue: true, killed_models: [] };

beforeEach(async () => {
  [hot, warm] = await Promise.all([new FakeProvider().start(), new FakeProvider().start()]);
  failover = new Failover({
    routes: buildRoutes(mapOf([hot.url], [warm.url]), { now: () => clock.ms }),
    keyFor: () => 'k',
    meter: new CallMeter(
      async () => {},
      () => {},
    ),
    now: () => clock.ms,
    random: () => 0,
  });
});
afterEach(async () => {
  failover.shutdown();
  await Promise.all([hot.stop(), warm.stop()]);
});

async function ask() {
  const parsed = parseChatRequest({ model: 'x', messages: [{ role: 'user', content: 'hi' }] }, {}, {});
  if (!parsed.ok) throw new Error('bad request');
  const outcome = await failover.route(parsed.context, new Deadline(30_000, () => clock.ms), { flags });
  return outcome.kind === 'answer' ? outcome.route.tier : outcome.kind;
}
const breaker = () => failover.routes[0].breaker;

describe('breaker per route', () => {
  it('opens after 5 consecutive failures; half-open after 30 s; closes after 2 of 2 probes, one per 30 s', async () => {
    hot.always({ kind: 'status', status: 500 });
    expect(await ask()).toBe('warm'); // 3 failed attempts
    expect(breaker().state()).toBe('closed');
    expect(await ask()).toBe('warm'); // 2 more: the 5th consecutive failure opens it
    expect(hot.received).toHaveLength(5);
    expect(breaker().state()).toBe('open');
    expect(await ask()).toBe('warm');
    expect(hot.received).toHaveLength(5); // open: skipped without a call

    clock.ms += 29_999;
    expect(breaker().state()).toBe('open');
    clock.ms += 1;
    expect(breaker().state()).toBe('half-open');
    hot.always({ kind: 'ok' });
    expect(await ask()).toBe('hot'); // the probe is a live request
    expect(breaker().state()).toBe('half-open'); // 1 of 2
    expect(await ask()).toBe('warm'); // no second probe within 30 s
    expect(hot.received).toHaveLength(6);
    clock.ms += 30_000;
    expect(await ask()).toBe('hot');
    expect(breaker().state()).toBe('closed');
    expect(await ask()).toBe('hot');
    expect(breaker().secondsOpen()).toBe(30);
  });

  it('a failed probe opens the breaker for another 30 s', async () => {
    hot.always({ kind: 'status', status: 503 });
    await ask();
    await ask();
    expect(breaker().state()).toBe('open');
    clock.ms += 30_000;
    expect(await ask()).toBe('warm'); // the probe failed (one attempt only, no retries on a probe)
    expect(hot.received).toHaveLength(6);
    expect(breaker().state()).toBe('open');
    clock.ms += 29_000;
    expect(breaker().state()).toBe('open');
    clock.ms += 1_000;
    expect(breaker().state()).toBe('half-open');
  });

  it('a success resets the consecutive count', async () => {
    hot.next(...Array(4).fill({ kind: 'status', status: 500 }));
    await ask(); // 3 failures
    await ask(); // 1 failure, then success
    expect(breaker().state()).toBe('closed');
    hot.next(...Array(4).fill({ kind: 'status', status: 500 }));
    await ask();
    await ask();
    expect(breaker().state()).toBe('closed');
  });

  it('lets one probe at a time through', () => {
    const now = { ms: 0 };
    const b = new Breaker('t', { now: () => now.ms });
    for (let i = 0; i < 5; i++) b.record(b.tryAcquire()!, false);
    now.ms = 30_000;
    const probe = b.tryAcquire();
    expect(probe).toEqual({ probe: true });
    expect(b.tryAcquire()).toBeNull();
    b.record(probe!, true);
    b.shutdown();
  });
});

describe('breaker per route: streams, scored by how they end', () => {
  // Cut after its first bytes have surely arrived (a chunk cut with the socket may be lost).
  const CUT = { kind: 'stream', chunks: 5, cutAfter: 2, delayMs: 20 } as const;
  let gw: TestGateway;
  afterEach(() => gw.close());
  const stream = (headers: Record<string, string> = {}) =>
    chat(gw.url, { model: 'x', messages: [{ role: 'user', content: 'hi' }], stream: true }, headers);
  const route = () => gw.gateway.path.failover.routes[0];

  it('a stream the provider cuts mid-way is one failure: the 5th in a row opens the breaker', async () => {
    gw = await startGateway(mapOf([hot.url], [warm.url]), { breaker: {} });
    hot.always(CUT);
    warm.always({ kind: 'stream' });
    for (let i = 0; i < 5; i++) expect((await stream()).text).toContain('"code":"stream_interrupted"');
    expect(route().breaker.state()).toBe('open');
    expect(route().health.snapshot(route().breaker)).toMatchObject({ last_20: [0, 0, 0, 0, 0], error_rate: 1, calls_last_minute: 5 });
    expect((await stream()).headers.get('x-route-tier')).toBe('warm'); // skipped without a call
    expect(hot.received).toHaveLength(5);
  });

  it('a half-open probe that is a stream: a cut one opens the breaker again, completed ones close it', async () => {
    gw = await startGateway(mapOf([hot.url], [warm.url]), { breaker: { failureThreshold: 1 } });
    hot.always({ kind: 'stream' }).next(CUT, CUT);
    await stream();
    expect(route().breaker.state()).toBe('open');
    gw.clock.ms += 30_000;
    expect((await stream()).headers.get('x-route-tier')).toBe('hot'); // the probe, cut
    expect(route().breaker.state()).toBe('open');
    for (let i = 0; i < 2; i++) {
      gw.clock.ms += 30_000;
      const res = await stream(); // a probe that completes
      expect([res.headers.get('x-route-tier'), res.text.includes('[DONE]')]).toEqual(['hot', true]);
    }
    expect(route().breaker.state()).toBe('closed');
    expect(route().health.lastTwenty()).toEqual([0, 0, 1, 1]);
  });

  it('a probe stream our client hangs up on scores nothing and frees the probe slot at once', async () => {
    gw = await startGateway(mapOf([hot.url], [warm.url]), { breaker: { failureThreshold: 1 } });
    hot.always({ kind: 'stream' }).next(CUT, { kind: 'stream', chunks: 50, delayMs: 20 });
    await stream();
    gw.clock.ms += 30_000;
    const controller = new AbortController();
    const res = await fetch(`${gw.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'x', messages: [{ role: 'user', content: 'hi' }], stream: true }),
      signal: controller.signal,
    });
    await res.body!.getReader().read();
    controller.abort();
    await expect.poll(() => route().breaker.nextCallAt()).toBe(gw.clock.ms); // released: the next request may probe
    expect(route().breaker.state()).toBe('half-open');
    expect(route().health.lastTwenty()).toEqual([0]);
    expect((await stream()).headers.get('x-route-tier')).toBe('hot');
  });
});

describe("breaker per route: a caller's own short time-to-answer", () => {
  let gw: TestGateway | undefined;
  afterEach(async () => {
    await gw?.close();
    gw = undefined;
  });

  it("one caller's deadlines shorter than the route's usual answer do not open it for everyone; a route that hangs still opens", async () => {
    gw = await startGateway(mapOf([hot.url], [warm.url]));
    const route = () => gw!.gateway.path.failover.routes[0];
    hot.always({ kind: 'ok', delayMs: 300 });
    for (let i = 0; i < 2; i++) expect((await chat(gw.url)).headers.get('x-route-tier')).toBe('hot'); // its usual time
    for (let i = 0; i < 6; i++) await chat(gw.url, undefined, { 'x-time-to-answer-ms': '200' }); // cut at ~175 ms each
    expect(route().breaker.state()).toBe('closed');
    expect((await chat(gw.url)).headers.get('x-route-tier')).toBe('hot');

    hot.always({ kind: 'ok', delayMs: 5_000 }); // it hangs for everyone: the time given is well past its usual
    for (let i = 0; i < 5; i++) await chat(gw.url, undefined, { 'x-time-to-answer-ms': '700' });
    expect(route().breaker.state()).toBe('open');
  });
});

describe('an outcome with no route called', () => {
  const route = async (options: { flags: Flags }) => {
    const parsed = parseChatRequest({ model: 'x', messages: [{ role: 'user', content: 'hi' }] }, {}, {});
    if (!parsed.ok) throw new Error('bad request');
    return failover.route(parsed.context, new Deadline(30_000, () => clock.ms), options);
  };

  it('is switched off only when the switches took every route: not for open breakers, nor for a model no route can serve', async () => {
    const killed = await route({ flags: { ...flags, killed_models: failover.routes.map((r) => r.config.model) } });
    expect(killed).toMatchObject({ kind: 'exhausted', attempts: 0, switchedOff: true });
    // Spend-cap routing's cheaper model on embeddings-only routes: nothing can serve it, nothing is switched off.
    for (const r of failover.routes) (r as { apis: ReadonlySet<ApiKind> }).apis = new Set<ApiKind>(['embeddings']);
    expect(await route({ flags })).toMatchObject({ kind: 'exhausted', attempts: 0, switchedOff: false });
  });
});

describe('breaker per route: the wall clock set back while it is open (an NTP step, a virtual machine resumed)', () => {
  afterEach(() => vi.restoreAllMocks());

  it('the route is probed once its open period has passed, not an hour later', async () => {
    const wall = Date.now.bind(Date);
    const setBack = { ms: 0 };
    vi.spyOn(Date, 'now').mockImplementation(() => wall() - setBack.ms);
    const dir = mkdtempSync(join(tmpdir(), 'breaker-clock-'));
    writeFileSync(join(dir, 'routes.json'), JSON.stringify(mapOf([hot.url], [warm.url])));
    const env = { ROUTES_FILE: join(dir, 'routes.json'), METER_CSV_FILE: join(dir, 'events.csv'), SCOPES_FILE: join(dir, 'none.yaml') };
    const app = await listenStack({ ...env, METER_SPOOL_DIR: join(dir, 'spool') }, { http: true, worker: false, breaker: { openMs: 200 } });
    try {
      hot.always({ kind: 'status', status: 500 });
      for (let i = 0; i < 2; i++) expect((await chat(app.url)).headers.get('x-route-tier')).toBe('warm'); // 5 failures: open
      expect(app.stack.gateway!.path.failover.routes[0].breaker.state()).toBe('open');
      setBack.ms = 3_600_000;
      hot.always({ kind: 'ok' });
      const tier = async () => (await chat(app.url)).headers.get('x-route-tier');
      await expect.poll(tier, { timeout: 10_000, interval: 50 }).toBe('hot');
    } finally {
      await app.stop();
    }
  });
});

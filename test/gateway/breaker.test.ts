// The route breaker, driven through real calls to loopback providers with a clock the test controls.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Breaker } from '../../gateway/src/breaker';
import { parseChatRequest } from '../../gateway/src/chat-request';
import { Deadline } from '../../gateway/src/deadline';
import { CallMeter } from '../../gateway/src/call-meter';
import { Failover } from '../../gateway/src/failover';
import { buildRoutes } from '../../gateway/src/route';
import { FakeProvider } from './fake-provider';
import { mapOf } from './harness';

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

// The monthly cap holds by itself: each ended call's cost (its model, transcription and USD
// telephony, as metered) adds to the UTC month's spend in the call store, and new calls pause at
// spend_guard.monthly_usd_cap without any rollup posted. Two services on one store stand for two
// gateway instances; in the real Redis (keys under this file's prefix) and in process. The service's
// clock is the test's.
import { describe, expect, it } from 'vitest';
import { MemoryVoiceStore, RedisVoiceStore } from '../../gateway/src/voice/call-store';
import { VoiceService, callReducer, type CallChange } from '../../gateway/src/voice/calls';
import type { RatesFile } from '../../gateway/src/voice/rates';
import { redisUnderPrefix } from '../redis-prefix';
import { filled } from './filled';

const db = redisUnderPrefix('vmonth');
let n = 0;

const config = filled();
config.spend_guard.monthly_usd_cap = 1;
config.spend_guard.per_call_usd_cap = 5;
// A minute of a Portuguese call: 0.1 USD.
const rates: RatesFile = { PT: { price_unit: 'USD', inbound: { local: 0.1 }, outbound: [], fetched_at: '2026-11-01T00:00:00Z' } };

describe.each([
  [
    'Redis',
    () => ({
      space: `${db.prefix}:${++n}`,
      store: (space: string) => new RedisVoiceStore<CallChange>(db.redis, space, callReducer(config)),
    }),
  ],
  [
    'in process',
    () => {
      const one = new MemoryVoiceStore<CallChange>(callReducer(config));
      return { space: '', store: () => one };
    },
  ],
])('the monthly cap without a rollup: %s', (name, make) => {
  function fleet() {
    const { space, store } = make();
    const clock = { now: new Date('2026-11-23T10:00:00Z') };
    const warned: string[] = [];
    const log = { warn: (m: string) => warned.push(m), error: () => undefined };
    const service = () =>
      new VoiceService({
        config,
        store: store(space),
        log,
        now: () => clock.now,
        afterCall: { calls: { send: () => undefined }, events: { send: () => undefined }, rates: () => rates, voiceProvider: 'openai' },
      });
    const [a, b] = [service(), service()];
    /** A one-minute call that cost 0.45 USD of transcription and 0.1 USD of telephony. */
    const call = async (id: string, via = a) => {
      expect((await via.start({ call_id: id, from: '+351910000000', country: 'PT' })).status).toBe(200);
      expect((await via.events(id, [{ type: 'transcription.done', usd: 0.45 }])).status).toBe(200);
      expect((await via.end(id, { outcome: 'booking', duration_s: 60 })).status).toBe(200);
    };
    const startStatus = async (id: string, via = a) => {
      const out = await via.start({ call_id: id, from: '+351910000000', country: 'PT' });
      return [out.status, (out.body as { reason?: string; action?: string }).reason ?? (out.body as { action?: string }).action];
    };
    return { a, b, call, startStatus, clock, warned, space };
  }

  it('ended calls whose costs (telephony in USD included) pass the cap pause the next start on every instance, logged once', async () => {
    const { a, b, call, startStatus, warned, space } = fleet();
    await call('c1');
    expect(await startStatus('c2', b)).toEqual([200, 'answer']);
    await b.end('c2', { outcome: 'booking', duration_s: 60 }); // costs nothing but its minute: 0.65 USD in all
    expect(await startStatus('c3', b)).toEqual([200, 'answer']);
    await b.events('c3', [{ type: 'transcription.done', usd: 0.35 }]);
    await b.end('c3', { outcome: 'booking', duration_s: 60 }); // 1.1 USD
    expect(await startStatus('c4', a)).toEqual([503, 'monthly_cap']);
    expect(await startStatus('c5', b)).toEqual([503, 'monthly_cap']);
    expect(warned).toEqual(['voice: monthly spend 1.1 USD reached the cap; new calls paused']);
    if (name === 'Redis') {
      const ttl = await db.redis.ttl(`${space}:voice:month:2026-11:usd`);
      expect(ttl).toBeGreaterThan(39 * 86_400);
      expect(ttl).toBeLessThanOrEqual(40 * 86_400);
    }
  });

  it('an end sent twice, to either instance, adds the call once', async () => {
    const { a, b, call, startStatus } = fleet();
    await call('c1');
    expect((await b.end('c1', { outcome: 'booking', duration_s: 60 })).status).toBe(200);
    expect((await a.end('c1', { outcome: 'booking', duration_s: 60 })).status).toBe(200);
    expect(await startStatus('c2')).toEqual([200, 'answer']); // 0.55 USD, not 1.65
    await b.end('c2', { outcome: 'booking', duration_s: 60 });
    await call('c3', b); // 1.2 USD
    expect(await startStatus('c4')).toEqual([503, 'monthly_cap']);
  });

  it("the month's turn lifts the pause by itself (logged once); the new month starts at 0", async () => {
    const { a, b, call, startStatus, clock, warned } = fleet();
    await call('c1');
    await call('c2');
    expect(await startStatus('c3')).toEqual([503, 'monthly_cap']);
    clock.now = new Date('2026-12-01T10:00:00Z');
    expect(await startStatus('d1', a)).toEqual([200, 'answer']);
    expect(await startStatus('d2', b)).toEqual([200, 'answer']);
    expect(warned.filter((m) => m.includes('resumed'))).toEqual(['voice: new calls resumed: a new month (2026-12) began']);
    await a.end('d1', { outcome: 'booking', duration_s: 60 });
    expect(await startStatus('d3', b)).toEqual([200, 'answer']);
  });

  it("a rollup below the cap does not lift the pause the month's own spend holds; a rollup at the cap pauses, a lower one lifts it", async () => {
    const { a, b, call, startStatus, clock, warned } = fleet();
    await call('c1');
    await call('c2');
    await b.rollup(0.2);
    expect(await startStatus('c3')).toEqual([503, 'monthly_cap']);
    expect(warned.filter((m) => m.includes('resumed'))).toEqual([]);
    clock.now = new Date('2026-12-02T10:00:00Z');
    await a.rollup(1.5);
    expect(await startStatus('d1', b)).toEqual([503, 'monthly_cap']);
    await b.events('d1', [{ type: 'billing.monthly_rollup', monthly_usd: 0.3 }]);
    expect(await startStatus('d2', a)).toEqual([200, 'answer']);
  });

  it("a call ended in the month's last moment counts in that month, though the store answers its end after midnight", async () => {
    const { space, store } = make();
    const slow = store(space);
    const clock = { now: new Date('2026-11-30T23:59:59.900Z') };
    const apply = slow.apply.bind(slow);
    slow.apply = async (id, op) => {
      const out = await apply(id, op);
      if (id === 'nov-last' && op.kind === 'end') clock.now = new Date('2026-12-01T00:00:00.100Z'); // its answer came after midnight
      return out;
    };
    const service = new VoiceService({
      config,
      store: slow,
      log: { warn: () => undefined, error: () => undefined },
      now: () => clock.now,
      afterCall: { calls: { send: () => undefined }, events: { send: () => undefined }, rates: () => rates, voiceProvider: 'openai' },
    });
    const call = async (id: string) => {
      expect((await service.start({ call_id: id, from: '+351910000000', country: 'PT' })).status).toBe(200);
      await service.events(id, [{ type: 'transcription.done', usd: 0.45 }]);
      expect((await service.end(id, { outcome: 'booking', duration_s: 60 })).status).toBe(200); // 0.55 USD
      return (await slow.get(id))!.ended_at;
    };
    expect(await call('nov-last')).toMatch(/^2026-11-30T23:59:59/);
    clock.now = new Date('2026-12-01T10:00:00Z');
    await call('dec-1'); // December's first 0.55 USD
    const next = await service.start({ call_id: 'dec-2', from: '+351910000000', country: 'PT' });
    expect([next.status, (next.body as { action?: string }).action]).toEqual([200, 'answer']); // 0.55 USD of December, not 1.1
  });

  it('a call whose end is written after midnight counts in the month its ended_at says', async () => {
    const { a, call, startStatus, clock } = fleet();
    expect(await startStatus('nov-last')).toEqual([200, 'answer']);
    await a.events('nov-last', [{ type: 'transcription.done', usd: 0.45 }]);
    clock.now = new Date('2026-12-01T00:00:40Z'); // the phone bridge writes the record once its functions settle
    const end = await a.end('nov-last', { outcome: 'booking', duration_s: 60, ended_at: '2026-11-30T23:59:50.000Z' });
    expect(end.status).toBe(200);
    clock.now = new Date('2026-12-01T10:00:00Z');
    await call('dec-1'); // December's first 0.55 USD
    expect(await startStatus('dec-2')).toEqual([200, 'answer']); // 0.55 USD of December, not 1.1
    // An ended_at before the call's start is no month's end: the cost counts now, where the cap holds.
    await a.events('dec-2', [{ type: 'transcription.done', usd: 0.45 }]);
    await a.end('dec-2', { outcome: 'booking', duration_s: 60, ended_at: '2020-01-01T00:00:00.000Z' });
    expect(await startStatus('dec-3')).toEqual([503, 'monthly_cap']);
  });

  it("a call recorded after the month's turn that takes the month before to the cap does not log new calls paused", async () => {
    const { a, call, startStatus, clock, warned } = fleet();
    await call('c1'); // 0.55 USD of November
    expect(await startStatus('nov-last')).toEqual([200, 'answer']);
    await a.events('nov-last', [{ type: 'transcription.done', usd: 0.45 }]);
    clock.now = new Date('2026-12-01T00:00:40Z');
    await a.end('nov-last', { outcome: 'booking', duration_s: 60, ended_at: '2026-11-30T23:59:50.000Z' }); // November: 1.1 USD
    clock.now = new Date('2026-12-01T10:00:00Z');
    expect(await startStatus('dec-1')).toEqual([200, 'answer']);
    expect(warned.filter((m) => m.includes('new calls paused'))).toEqual([]);
  });

  it.runIf(name === 'Redis')(
    'a deployment upgraded while an earlier version paused new calls stays paused until a rollup below the cap',
    async () => {
      const { a, b, startStatus, warned, space } = fleet();
      await db.redis.set(`${space}:voice:monthly_paused`, '1'); // the earlier version's pause, from a rollup at the cap
      expect(await startStatus('c1', a)).toEqual([503, 'monthly_cap']);
      expect(await startStatus('c2', b)).toEqual([503, 'monthly_cap']);
      expect(warned.filter((m) => m.includes('before this version'))).toHaveLength(1);
      expect(await db.redis.exists(`${space}:voice:monthly_paused`)).toBe(0);
      await b.rollup(0.2);
      expect(await startStatus('c3', a)).toEqual([200, 'answer']);
    },
  );

  it.runIf(name === 'Redis')(
    'at the upgrade, a rollup below the cap posted while another instance takes the earlier pause still lifts it',
    async () => {
      const { space, store } = make();
      await db.redis.set(`${space}:voice:monthly_paused`, '1');
      const log = { warn: () => undefined, error: () => undefined };
      const now = () => new Date('2026-11-23T10:00:00Z');
      const slowStore = store(space);
      let taken!: () => void;
      const tookOld = new Promise<void>((r) => (taken = r));
      let rolled!: () => void;
      const rollupDone = new Promise<void>((r) => (rolled = r));
      const take = slowStore.takeOldPause.bind(slowStore);
      slowStore.takeOldPause = async (month: string, cap: number) => {
        const out = await take(month, cap);
        taken();
        await rollupDone; // the other instance's rollup lands before this one goes on
        return out;
      };
      const a = new VoiceService({ config, store: slowStore, log, now });
      const b = new VoiceService({ config, store: store(space), log, now });
      const first = a.start({ call_id: 'c1', from: '+351910000000', country: 'PT' });
      await tookOld;
      await b.rollup(0.2); // the meter: 0.2 USD this month, after the pause was set
      rolled();
      await first;
      const out = await a.start({ call_id: 'c2', from: '+351910000000', country: 'PT' });
      expect([out.status, (out.body as { action?: string }).action]).toEqual([200, 'answer']);
    },
  );

  it.runIf(name === 'Redis')('at the upgrade, Redis failing as the earlier pause is taken does not lose it', async () => {
    const { space, store } = make();
    await db.redis.set(`${space}:voice:monthly_paused`, '1');
    const flaky = store(space);
    const set = flaky.setMonthRollup.bind(flaky);
    let fail = true;
    flaky.setMonthRollup = async (month: string, usd: number) => {
      if (fail) {
        fail = false;
        throw new Error('Connection is closed.');
      }
      return set(month, usd);
    };
    const a = new VoiceService({
      config,
      store: flaky,
      log: { warn: () => undefined, error: () => undefined },
      now: () => new Date('2026-11-23T10:00:00Z'),
    });
    const starts: unknown[] = [];
    for (const id of ['c1', 'c2']) {
      const out = await a.start({ call_id: id, from: '+351910000000', country: 'PT' }).catch(() => null);
      if (out) starts.push([out.status, (out.body as { reason?: string }).reason]);
    }
    expect(starts.at(-1)).toEqual([503, 'monthly_cap']);
  });
});

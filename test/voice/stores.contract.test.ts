// One contract per voice store, two implementations each: in the real Redis (db 9, keys under a
// prefix of this process, removed afterwards) and in process. The same cases run against both,
// through the store's interface. Expiry runs for real with lifetimes of a second.
import { Redis } from 'ioredis';
import { describe, expect, it, vi } from 'vitest';
import {
  MemoryVoiceStore,
  RedisVoiceStore,
  type CallTtl,
  type Reduce,
  type StoredCall,
  type VoiceStore,
} from '../../gateway/src/voice/call-store';
import { newCall } from '../../gateway/src/voice/spend-guard';
import { MemoryWorkflowStore, RedisWorkflowStore, type WorkflowStore, type WorkflowTtl } from '../../gateway/src/voice/workflow-store';
import { TEST_REDIS_DB } from '../redis-db';
import { redisUnderPrefix } from '../redis-prefix';
import { RedisProxy } from '../redis-proxy';

const db = redisUnderPrefix('vstores');
const prefix = db.prefix;
let n = 0;
const space = () => `${prefix}:${++n}`;

async function until(check: () => Promise<boolean>, ms = 5000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > end) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 20));
  }
}

const call = (id: string, from = '+351900000000'): StoredCall => ({
  call_id: id,
  from,
  country: 'PT',
  started_at: '2026-11-23T10:00:00.000Z',
  ended_at: null,
  action: 'answer',
  state: newCall(),
  version: 0,
});

/** The test's changes: more turns, a new caller number, or the call's end. */
type Change = { turns?: number; from?: string; end?: string };
const reduce: Reduce<Change> = (c, op) => {
  if (op.turns) c.state.turns += op.turns;
  if (op.from) c.from = op.from;
  if (op.end) c.ended_at = op.end;
  return c;
};

describe.each([
  ['Redis', (ttl?: CallTtl): VoiceStore<Change> => new RedisVoiceStore(db.redis, space(), reduce, ttl)],
  ['in process', (ttl?: CallTtl): VoiceStore<Change> => new MemoryVoiceStore(reduce, ttl)],
])('call store contract: %s', (_name, make) => {
  it('a call is stored once: starting it again answers the first, unchanged', async () => {
    const s = make();
    expect(await s.create(call('c1'))).toEqual(call('c1'));
    expect(await s.create(call('c1', '+1999'))).toEqual(call('c1'));
    expect(await s.get('c1')).toEqual(call('c1'));
    expect(await s.get('nope')).toBeNull();
  });

  it('a change is applied and moves the version on; an unknown call is null', async () => {
    const s = make();
    await s.create(call('c1'));
    const updated = await s.apply('c1', { turns: 2 });
    expect(updated).toMatchObject({ version: 1, state: { turns: 2 } });
    expect(await s.get('c1')).toEqual(updated);
    expect(await s.apply('nope', { turns: 1 })).toBeNull();
  });

  it('keeps its own copy: changing an object given to or received from the store changes nothing stored', async () => {
    const s = make();
    const given = call('c1');
    const created = await s.create(given);
    given.state.turns = 7;
    created.state.turns = 8;
    const updated = (await s.apply('c1', { from: '+1' }))!;
    updated.state.turns = 9;
    (await s.get('c1'))!.state.turns = 10;
    expect(await s.get('c1')).toMatchObject({ from: '+1', version: 1, state: { turns: 0 } });
  });

  it('100 concurrent changes are all applied, each answer seeing its own and those before it; none lost, none refused', async () => {
    const s = make();
    await s.create(call('c1'));
    const seen = await Promise.all(Array.from({ length: 100 }, () => s.apply('c1', { turns: 1 })));
    expect(seen.map((c) => c!.state.turns).sort((a, b) => a - b)).toEqual(Array.from({ length: 100 }, (_, i) => i + 1));
    expect(seen.every((c) => c!.version === c!.state.turns)).toBe(true);
    expect(await s.get('c1')).toMatchObject({ version: 100, state: { turns: 100 } });
  });

  it('an ended call is forgotten after its shorter lifetime; a live call is kept', async () => {
    const s = make({ liveS: 60, endedS: 1 });
    await s.create(call('live'));
    await s.create(call('ended'));
    await s.apply('ended', { end: '2026-11-23T10:05:00.000Z' });
    await until(async () => (await s.get('ended')) === null);
    expect(await s.apply('ended', { turns: 1 })).toBeNull();
    expect(await s.get('live')).not.toBeNull();
  });

  it("a month's spend starts at 0 without a rollup; calls' costs add up, even at once, each month apart; the rollup is the last posted", async () => {
    const s = make();
    expect(await s.monthSpend(['2026-11', '2026-10'])).toEqual([
      { usd: 0, rollup: null },
      { usd: 0, rollup: null },
    ]);
    const adds = await Promise.all(Array.from({ length: 20 }, () => s.addMonthSpend('2026-11', 0.25)));
    expect(adds.map((a) => a.after.usd).sort((a, b) => a - b)).toEqual(Array.from({ length: 20 }, (_, i) => (i + 1) * 0.25));
    expect(adds.every((a) => a.after.usd === a.before.usd + 0.25)).toBe(true);
    expect(await s.setMonthRollup('2026-11', 40)).toEqual({ before: { usd: 5, rollup: null }, after: { usd: 5, rollup: 40 } });
    expect(await s.setMonthRollup('2026-11', 12.5)).toEqual({ before: { usd: 5, rollup: 40 }, after: { usd: 5, rollup: 12.5 } });
    expect(await s.monthSpend(['2026-11', '2026-12'])).toEqual([
      { usd: 5, rollup: 12.5 },
      { usd: 0, rollup: null },
    ]);
    expect([await s.firstAtMonth('2026-12'), await s.firstAtMonth('2026-12'), await s.firstAtMonth('2027-01')]).toEqual([
      true,
      false,
      true,
    ]);
  });
});

type Answer = { ok: boolean; result: unknown };
describe.each([
  ['Redis', (ttl?: WorkflowTtl): WorkflowStore<Answer> => new RedisWorkflowStore<Answer>(db.redis, space(), ttl)],
  ['in process', (ttl?: WorkflowTtl): WorkflowStore<Answer> => new MemoryWorkflowStore<Answer>(ttl)],
])('workflow store contract: %s', (_name, make) => {
  it('a key is claimed once; its answer, once finished, is what every later caller gets', async () => {
    const s = make();
    expect(await s.claim('k')).toBe(true);
    expect(await s.claim('k')).toBe(false);
    expect(await s.result('k')).toBeNull(); // running
    await s.finish('k', { ok: true, result: { booking_id: 'b1' } });
    expect(await s.result('k')).toEqual({ ok: true, result: { booking_id: 'b1' } });
    expect(await s.claim('k')).toBe(false); // done
    expect(await s.result('other')).toBeNull();
  });

  it('a running claim is not freed by the wall clock set forward (an NTP step, a virtual machine resumed): the call is not run twice', async () => {
    const s = make();
    expect(await s.claim('stepped')).toBe(true);
    const wall = Date.now.bind(Date);
    vi.spyOn(Date, 'now').mockImplementation(() => wall() + 3_600_000);
    try {
      expect(await s.claim('stepped')).toBe(false);
    } finally {
      vi.restoreAllMocks();
    }
  });

  it('a released key can be claimed again', async () => {
    const s = make();
    await s.claim('k');
    await s.release('k');
    expect(await s.claim('k')).toBe(true);
  });

  it('a crashed holder’s claim runs out; an answer runs out after its own lifetime', async () => {
    const s = make({ resultS: 1, runningS: 1 });
    await s.claim('crashed');
    await until(() => s.claim('crashed'));
    await s.finish('crashed', { ok: true, result: 1 });
    await until(async () => (await s.result('crashed')) === null);
  });

  it('dead letters stay until delivered: read oldest first; a delivery removes that letter only while it is the oldest', async () => {
    const s = make();
    expect(await s.peekDeadLetters(5)).toEqual([]);
    for (const l of ['a', 'b', 'c', 'd']) await s.pushDeadLetter(l);
    expect(await s.openRound('me')).toBe(true);
    expect(await s.peekDeadLetters(3)).toEqual(['a', 'b', 'c']);
    expect(await s.peekDeadLetters(3)).toEqual(['a', 'b', 'c']); // reading takes nothing
    expect(await s.delivered('me', 'a')).toBe(true);
    expect(await s.delivered('me', 'c')).toBe(false); // not the oldest: kept
    expect(await s.peekDeadLetters(10)).toEqual(['b', 'c', 'd']);
  });

  it('a letter refused for good is set aside as a delivery removes one: only while it is the oldest, no longer waiting, no longer held', async () => {
    const s = make();
    for (const l of ['a', 'b']) await s.pushDeadLetter(l);
    expect(await s.openRound('me')).toBe(true);
    expect(await s.setAside('me', 'b')).toBe(false); // not the oldest: kept
    expect(await s.setAside('me', 'a')).toBe(true);
    expect(await s.holds('a')).toBe(false);
    expect(await s.peekDeadLetters(10)).toEqual(['b']);
    expect(await s.setAside('other', 'b')).toBe(false); // not its round: the round must stop
  });

  it('one dead-letter round at a time: another holder waits until it is closed or lapses, and each delivery keeps it open', async () => {
    const s = make({ resultS: 60, runningS: 60, roundS: 2 });
    for (const l of ['a', 'b']) await s.pushDeadLetter(l);
    expect(await s.openRound('one')).toBe(true);
    expect(await s.openRound('two')).toBe(false);
    await s.closeRound('two'); // not its round: nothing happens
    expect(await s.openRound('two')).toBe(false);
    await s.closeRound('one');
    expect(await s.openRound('two')).toBe(true);
    const opened = Date.now();
    await until(async () => Date.now() - opened > 1200); // the round has under 0.8 s left
    const renewed = Date.now();
    expect(await s.delivered('two', 'a')).toBe(true); // open another 2 s from here
    await until(async () => Date.now() - renewed > 1200); // past the first 2 s
    expect(await s.openRound('one')).toBe(false);
    await until(() => s.openRound('one')); // a crashed holder's round lapses
    expect(await s.delivered('two', 'b')).toBe(false); // delivered, but the round is no longer its own
    expect(await s.peekDeadLetters(10)).toEqual([]);
  });
});

describe('workflow store in Redis: a claim sent again', () => {
  it("a claim whose answer was lost with its connection, sent again on the next (ioredis does), is still the call's: its target is called, not waited on for a minute and 409", async () => {
    const proxy = await new RedisProxy().start();
    const redis = new Redis(proxy.url(TEST_REDIS_DB), { maxRetriesPerRequest: null }); // as stores.ts connects
    try {
      const s = new RedisWorkflowStore<Answer>(redis, space());
      await redis.ping();
      proxy.loseNextReply();
      expect(await s.claim('k')).toBe(true); // before: false, and the key held by nobody for 2 minutes
      expect(await s.claim('k')).toBe(false); // another call with the key: held
      expect(await s.result('k')).toBeNull();
      await s.finish('k', { ok: true, result: { booking_id: 'b1' } });
      expect(await s.result('k')).toEqual({ ok: true, result: { booking_id: 'b1' } });
    } finally {
      redis.disconnect();
      await proxy.stop();
    }
  });
});

// The two stores that make spend caps and notices the fleet's: spend per UTC day and the
// notification windows. The same cases run against Redis (db 9, keys under a prefix of this
// process, removed afterwards) and in process; then what only Redis can do: share and survive.
import { connect, createServer, type AddressInfo, type Socket } from 'node:net';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { MemoryNoticeWindows, RedisNoticeWindows, type Held, type NoticeWindows } from '../../gateway/src/notice-windows';
import { dayOf, MemorySpendDays, RedisSpendDays, type SpendDays } from '../../gateway/src/spend-days';
import { TEST_REDIS_DB, TEST_REDIS_URL } from '../redis-db';

const prefix = `test-fleet-stores-${process.pid}`;
let redis: Redis;
let n = 0;
const closing: SpendDays[] = [];
beforeAll(() => {
  redis = new Redis(TEST_REDIS_URL);
});
afterEach(async () => {
  for (const c of closing.splice(0)) await c.close();
  const keys = await redis.keys(`${prefix}:*`);
  if (keys.length) await redis.del(...keys);
});
afterAll(() => redis.disconnect());
const space = () => `${prefix}:${++n}`;
const warnings: string[] = [];

async function until(check: () => boolean | Promise<boolean>, ms = 5000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > end) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 10));
  }
}

const DAY = 86_400_000;

describe.each([
  ['Redis', (now: () => number, key = space()): SpendDays => new RedisSpendDays(redis, key, { warn: (m) => warnings.push(m), now })],
  ['in process', (now: () => number): SpendDays => new MemorySpendDays(now)],
])('spend per day contract: %s', (_name, make) => {
  it('counts each priced call on its UTC day; free and unpriced calls add nothing', async () => {
    const clock = { ms: 20_000 * DAY + 3_600_000 };
    const days = make(() => clock.ms);
    closing.push(days);
    await days.ready();
    const today = dayOf(clock.ms);
    days.add(0.25);
    days.add(null);
    days.add(0);
    clock.ms += DAY;
    days.add(1.5);
    await days.refresh();
    expect(days.spentBetween(today, today)).toBeCloseTo(0.25, 9);
    expect(days.spentBetween(today + 1, today + 1)).toBeCloseTo(1.5, 9);
    expect(days.spentBetween(today - 6, today + 1)).toBeCloseTo(1.75, 9);
  });

  it('a thousand small calls add up to the cent: no float drift, nothing below a micro-dollar lost in the sum', async () => {
    const days = make(() => 20_000 * DAY);
    closing.push(days);
    await days.ready();
    for (let i = 0; i < 1000; i++) days.add(0.0000015); // 1.5 micro-dollars each
    await days.refresh();
    expect(days.spentBetween(20_000, 20_000)).toBeCloseTo(0.0015, 6);
  });

  it('tells the spend of the last seconds (what the meter may not have yet), and not older', async () => {
    const clock = { ms: 20_000 * DAY + 5_000 };
    const days = make(() => clock.ms);
    closing.push(days);
    await days.ready();
    days.add(0.3);
    await days.refresh();
    clock.ms += 4_000;
    days.add(0.2);
    await days.refresh();
    expect(await days.recentSpend(10)).toBeCloseTo(0.5, 9);
    expect(await days.recentSpend(3)).toBeCloseTo(0.2, 9);
  });

  it('a call is in the figures at once, before any store answers', async () => {
    const days = make(() => 20_000 * DAY);
    closing.push(days);
    await days.ready();
    days.add(0.5);
    expect(days.spentBetween(20_000, 20_000)).toBeCloseTo(0.5, 9);
  });
});

describe('spend per day in Redis: one figure for the fleet', () => {
  it("two instances see each other's calls, and a new instance starts with the day's spend", async () => {
    const key = space();
    const now = () => 20_000 * DAY;
    const a = new RedisSpendDays(redis, key, { warn: (m) => warnings.push(m), now });
    const b = new RedisSpendDays(redis, key, { warn: (m) => warnings.push(m), now });
    closing.push(a, b);
    a.add(0.1);
    b.add(0.2);
    await Promise.all([a.refresh(), b.refresh()]);
    await a.refresh();
    expect(a.spentBetween(20_000, 20_000)).toBeCloseTo(0.3, 9);
    await a.close();
    const restarted = new RedisSpendDays(redis, key, { warn: (m) => warnings.push(m), now });
    closing.push(restarted);
    await restarted.ready();
    expect(restarted.spentBetween(20_000, 20_000)).toBeCloseTo(0.3, 9);
    expect(await redis.ttl(`${key}:spend:${new Date(20_000 * DAY).toISOString().slice(0, 10)}`)).toBeGreaterThan(7 * 86_400);
  });

  it("a Redis that loses the day's spend (restarted without its data, a flush) gets it back from the instances that read it, the freshest figure once, with what was added since", async () => {
    const key = space();
    const now = () => 20_000 * DAY;
    const counter = `${key}:spend:${new Date(20_000 * DAY).toISOString().slice(0, 10)}`;
    const a = new RedisSpendDays(redis, key, { warn: (m) => warnings.push(m), now });
    const b = new RedisSpendDays(redis, key, { warn: (m) => warnings.push(m), now });
    closing.push(a, b);
    a.add(40);
    await a.refresh();
    await b.refresh();
    a.add(1);
    await a.refresh(); // b's figure is 40, a's 41
    await redis.del(...(await redis.keys(`${key}:spend:*`)));
    await b.refresh(); // b finds the loss first and puts back what it read
    expect(Number(await redis.get(counter))).toBe(40_000_000);
    a.add(0.5);
    await a.refresh(); // a read more before the loss: only the difference goes on
    await b.refresh();
    for (const days of [a, b]) expect(days.spentBetween(20_000, 20_000)).toBeCloseTo(41.5, 9);
    expect(Number(await redis.get(counter))).toBe(41_500_000);
    expect(await redis.ttl(counter)).toBeGreaterThan(7 * 86_400);
    expect(warnings.some((w) => w.includes('was lost'))).toBe(true);
  });

  it('a Redis restored from a snapshot older than the last read gets that read back, not added to the snapshot', async () => {
    const key = space();
    const now = () => 20_000 * DAY;
    const counter = `${key}:spend:${new Date(20_000 * DAY).toISOString().slice(0, 10)}`;
    const a = new RedisSpendDays(redis, key, { warn: (m) => warnings.push(m), now });
    closing.push(a);
    a.add(40);
    await a.refresh();
    await redis.set(counter, 30_000_000); // the snapshot held $30 of the day's $40
    a.add(1);
    await a.refresh();
    expect(Number(await redis.get(counter))).toBe(41_000_000);
    expect(a.spentBetween(20_000, 20_000)).toBeCloseTo(41, 9);
  });

  it("the spend of the last seconds includes another instance's whose clock is a few seconds ahead", async () => {
    const key = space();
    const at = 20_000 * DAY + 3_600_000;
    const ahead = new RedisSpendDays(redis, key, { warn: (m) => warnings.push(m), now: () => at + 3000 });
    const behind = new RedisSpendDays(redis, key, { warn: (m) => warnings.push(m), now: () => at });
    closing.push(ahead, behind);
    ahead.add(0.5);
    await ahead.refresh();
    // Its second is in this one's future: not yet with the meter all the same.
    expect(await behind.recentSpend(10)).toBeCloseTo(0.5, 9);
  });

  it('calls made while Redis does not answer are kept and counted once it does', async () => {
    const key = space();
    const link = await redisLink();
    const client = new Redis(link.port, '127.0.0.1', {
      db: TEST_REDIS_DB,
      enableOfflineQueue: false,
      retryStrategy: () => 50,
      lazyConnect: true,
    });
    client.on('error', () => undefined);
    await client.connect().catch(() => undefined);
    const days = new RedisSpendDays(client, key, { warn: (m) => warnings.push(m), now: () => 20_000 * DAY });
    days.add(0.4);
    expect(days.spentBetween(20_000, 20_000)).toBeCloseTo(0.4, 9);
    await until(() => warnings.some((w) => /spend not counted in Redis yet/.test(w)));
    await link.open();
    await until(async () => (await redis.get(`${key}:spend:${new Date(20_000 * DAY).toISOString().slice(0, 10)}`)) === '400000');
    await days.close();
    client.disconnect();
    await link.close();
  });

  it('a batch whose reply was lost after Redis added it, sent again, is counted once', async () => {
    const key = space();
    const link = await redisLink();
    await link.open();
    const client = new Redis(link.port, '127.0.0.1', { db: TEST_REDIS_DB, retryStrategy: () => 20 });
    client.on('error', () => undefined);
    const days = new RedisSpendDays(client, key, { warn: (m) => warnings.push(m), now: () => 20_000 * DAY });
    await days.ready();
    link.cutNextReply();
    days.add(0.5);
    await until(() => link.cut);
    await days.close(); // the batch sent again (by ioredis after its reconnect, or by the store) and answered
    expect(await redis.get(`${key}:spend:${new Date(20_000 * DAY).toISOString().slice(0, 10)}`)).toBe('500000');
    client.disconnect();
    await link.close();
  });
});

/**
 * A loopback TCP link to the real Redis that refuses connections until opened (Redis down, then
 * back), and can cut the connection at Redis's next reply instead of passing it on (a reply lost
 * after Redis applied the command).
 */
async function redisLink() {
  const probe = createServer();
  await new Promise<void>((r) => probe.listen(0, '127.0.0.1', r));
  const port = (probe.address() as AddressInfo).port;
  await new Promise<void>((r) => probe.close(() => r()));
  const sockets = new Set<Socket>();
  const server = createServer((client) => {
    const upstream = connect(6379, '127.0.0.1');
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on('error', () => undefined);
    }
    client.pipe(upstream);
    upstream.on('data', (reply: Buffer) => {
      if (!link.cutting) return void client.write(reply);
      link.cutting = false;
      link.cut = true;
      client.destroy();
      upstream.destroy();
    });
  });
  const link = {
    cutting: false,
    cut: false,
    cutNextReply: () => void (link.cutting = true),
    port,
    open: () => new Promise<void>((r) => server.listen(port, '127.0.0.1', r)),
    close: () => {
      for (const s of sockets) s.destroy();
      return new Promise<void>((r) => server.close(() => r()));
    },
  };
  return link;
}

describe.each([
  ['Redis', (): NoticeWindows => new RedisNoticeWindows(redis, space())],
  ['in process', (): NoticeWindows => new MemoryNoticeWindows()],
])('notification windows contract: %s', (_name, make) => {
  it('one opener per window; the others hold their notices, taken once; the window ends and opens again', async () => {
    const w = make();
    const opened = await Promise.all([w.open('enqueued', 300), w.open('enqueued', 300), w.open('enqueued', 300)]);
    expect(opened.filter(Boolean)).toHaveLength(1);
    expect(await w.open('paused', 300)).toBe(true); // each kind its own window
    const left = await w.hold('enqueued', { kind: 'enqueued', jobIds: ['llm-2'], tenant: 'acme' }, 300);
    expect(left).toBeGreaterThan(0);
    expect(left).toBeLessThanOrEqual(300);
    await w.hold('enqueued', { kind: 'enqueued', jobIds: ['llm-3'] }, 300);
    const [first, second] = await Promise.all([w.take('enqueued'), w.take('enqueued')]);
    const taken = [first, second].find((h) => h.notices.length)!;
    expect(taken.total).toBe(2);
    expect(taken.notices.map((x) => x.jobIds)).toEqual([['llm-2'], ['llm-3']]);
    expect([first, second].filter((h) => h.notices.length)).toHaveLength(1);
    await Promise.all([w.sent('enqueued', first), w.sent('enqueued', second)]);
    expect((await w.take('enqueued')).notices).toEqual([]); // sent: no longer held
    await until(async () => w.open('enqueued', 300));
  });

  it('keeps the first 1,000 held notices for the follow-up and counts them all', async () => {
    const w = make();
    await w.open('enqueued', 60_000);
    for (let i = 0; i < 1200; i++) await w.hold('enqueued', { kind: 'enqueued', jobIds: [`llm-${i}`] }, 60_000);
    const held = await w.take('enqueued');
    expect(held.total).toBe(1200);
    expect(held.notices.map((n) => n.jobIds![0])).toEqual(Array.from({ length: 1000 }, (_, i) => `llm-${i}`));
  });

  it('a forced open starts the next window at once (the follow-up sender owns it)', async () => {
    const w = make();
    expect(await w.open('dead_lettered', 10_000)).toBe(true);
    expect(await w.open('dead_lettered', 10_000, true)).toBe(true);
    expect(await w.open('dead_lettered', 10_000)).toBe(false);
  });
});

describe('notification windows in Redis', () => {
  it('a window that ended with notices still held is lapsed (its instance stopped); an open one, or one with none held, is not', async () => {
    const w = new RedisNoticeWindows(redis, space());
    await w.open('enqueued', 100);
    await w.hold('enqueued', { kind: 'enqueued', jobIds: ['llm-1'] }, 100);
    await w.open('paused', 100); // nothing held
    expect(await w.lapsed(['enqueued', 'paused'])).toEqual([]); // still open
    await until(async () => (await w.lapsed(['enqueued', 'paused'])).length > 0);
    expect(await w.lapsed(['enqueued', 'paused'])).toEqual(['enqueued']);
    await w.sent('enqueued', await w.take('enqueued'));
    expect(await w.lapsed(['enqueued', 'paused'])).toEqual([]);
  });

  it("a window opened by a command whose answer was lost with its connection, sent again on the next (ioredis does), is still this instance's: its first notice goes out at once", async () => {
    const link = await redisLink();
    await link.open();
    const client = new Redis(link.port, '127.0.0.1', { db: TEST_REDIS_DB, retryStrategy: () => 20, maxRetriesPerRequest: null });
    client.on('error', () => undefined);
    try {
      const w = new RedisNoticeWindows(client, space());
      await client.ping();
      link.cutNextReply();
      expect(await w.open('enqueued', 60_000)).toBe(true); // before: false, the notice held for the follow-up a minute later
      expect(link.cut).toBe(true);
      expect(await w.open('enqueued', 60_000)).toBe(false); // the window is open: the next notice is held
    } finally {
      client.disconnect();
      await link.close();
    }
  });

  it("a take whose answer was lost with its connection, sent again on the next (ioredis does), still gets the notices it claimed: the follow-up goes out at the window's end", async () => {
    const key = space();
    const w = new RedisNoticeWindows(redis, key);
    await w.open('enqueued', 60_000);
    await w.hold('enqueued', { kind: 'enqueued', jobIds: ['llm-1'] }, 60_000);
    const link = await redisLink();
    await link.open();
    const client = new Redis(link.port, '127.0.0.1', { db: TEST_REDIS_DB, retryStrategy: () => 20, maxRetriesPerRequest: null });
    client.on('error', () => undefined);
    try {
      const through = new RedisNoticeWindows(client, key);
      await client.ping();
      link.cutNextReply();
      const held = await through.take('enqueued');
      expect(link.cut).toBe(true);
      expect(held.notices.map((x) => x.jobIds)).toEqual([['llm-1']]); // before: none, the follow-up left for the lapsed sweep
      await through.sent('enqueued', held);
      expect((await w.take('enqueued')).notices).toEqual([]);
    } finally {
      client.disconnect();
      await link.close();
    }
  });

  it('a take removes nothing until its notices are marked sent: one given up on leaves them to the next take once its claim lapses', async () => {
    const w = new RedisNoticeWindows(redis, space(), 300);
    await w.open('enqueued', 60_000);
    await w.hold('enqueued', { kind: 'enqueued', jobIds: ['llm-1'] }, 60_000);
    await w.take('enqueued'); // its caller stopped waiting: never marked sent
    expect((await w.take('enqueued')).notices).toEqual([]); // claimed: no second follow-up meanwhile
    await w.hold('enqueued', { kind: 'enqueued', jobIds: ['llm-2'] }, 60_000);
    let again: Held = { notices: [], total: 0 };
    await until(async () => (again = await w.take('enqueued')).notices.length > 0); // once the claim lapses
    expect(again.notices.map((x) => x.jobIds)).toEqual([['llm-1'], ['llm-2']]); // before: llm-1 was gone with the first take
    await w.hold('enqueued', { kind: 'enqueued', jobIds: ['llm-3'] }, 60_000); // held while the follow-up is sent
    await w.sent('enqueued', again);
    const next = await w.take('enqueued');
    expect(next.notices.map((x) => x.jobIds)).toEqual([['llm-3']]);
    expect(next.total).toBe(1);
  });

  it('keeps the first 1,000 held notices for the lists and counts them all; skips a hand-written entry', async () => {
    const key = space();
    const w = new RedisNoticeWindows(redis, key);
    await w.open('enqueued', 60_000);
    await Promise.all(Array.from({ length: 1200 }, (_, i) => w.hold('enqueued', { kind: 'enqueued', jobIds: [`llm-${i}`] }, 60_000)));
    await redis.rpush(`${key}:notice:enqueued:held`, 'not json');
    const held = await w.take('enqueued');
    expect(held.total).toBe(1200);
    expect(held.notices).toHaveLength(1000);
    await w.sent('enqueued', held);
    expect(await redis.exists(`${key}:notice:enqueued:held`, `${key}:notice:enqueued:count`)).toBe(0);
  });
});

// One contract per store, two implementations each: in the real Redis (db 9, keys under a prefix
// of this process, removed afterwards) and in process. The same cases run against both, through
// the store's interface, so a gateway without Redis behaves as one with it (within one process).
// Rate limits, feature flags, the budget pause flag. (The Cold queue has its own file.)
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { MemoryPause, RedisPause, type PauseFlag } from '../../gateway/src/budget';
import { LocalFlags, RedisFlags, type Flags, type FlagStore } from '../../gateway/src/flags';
import { MemoryLimiter, RedisLimiter, type Limiter, type Limits } from '../../gateway/src/rate-limit';
import { TEST_REDIS_DB, TEST_REDIS_URL } from '../redis-db';
import { RedisProxy } from '../redis-proxy';

const prefix = `test-stores-${process.pid}`;
let redis: Redis;
let n = 0;
const closing: Array<() => void> = [];
beforeAll(() => {
  redis = new Redis(TEST_REDIS_URL);
});
afterEach(async () => {
  for (const c of closing.splice(0)) c();
  const keys = await redis.keys(`${prefix}:*`);
  if (keys.length) await redis.del(...keys);
});
afterAll(() => redis.disconnect());
/** A key space of its own for each store made. */
const space = () => `${prefix}:${++n}`;

async function until(check: () => boolean | Promise<boolean>, ms = 5000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > end) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe.each([
  // Counting is tested here, not a stall: a loaded machine's Redis may take over the 250 ms a live check waits.
  ['Redis', (limits: Limits, now: () => number): Limiter => new RedisLimiter(redis, space(), limits, now, 10_000)],
  ['in process', (limits: Limits, now: () => number): Limiter => new MemoryLimiter(limits, now)],
])('rate limiter contract: %s', (_name, make) => {
  // 15 s into a window: 45 s left in it.
  const clock = { ms: 0 };
  const now = () => clock.ms;
  const atWindow = (w: number) => (clock.ms = w * 60_000 + 15_000);
  /** The seconds a tenant's request waits (0: counted). */
  const wait = async (l: Limiter, tenant: string) => (await l.hitRequest(tenant))?.retryAfterS ?? 0;

  it('without limits nothing ever waits', async () => {
    atWindow(1000);
    const l = make({}, now);
    for (let i = 0; i < 50; i++) expect(await wait(l, 'acme')).toBe(0);
    l.spendTokens('openai', 1e9);
    expect(await l.providerWait('openai')).toBe(0);
  });

  it('a tenant over its requests per minute waits for the rest of the window; other tenants and the next window do not', async () => {
    atWindow(1000);
    const l = make({ tenant_requests_per_minute: 3 }, now);
    expect([await wait(l, 'acme'), await wait(l, 'acme'), await wait(l, 'acme')]).toEqual([0, 0, 0]);
    expect(await wait(l, 'acme')).toBe(45);
    expect(await wait(l, 'beta')).toBe(0);
    atWindow(1001);
    expect(await wait(l, 'acme')).toBe(0);
  });

  it("a request refused by its key's rpm or its tenant's limit is counted against neither", async () => {
    atWindow(1000);
    const l = make({ tenant_requests_per_minute: 2 }, now);
    const [a, b] = [
      { counter: 'key:a:requests', rpm: 1 },
      { counter: 'key:b:requests', rpm: 3 },
    ];
    expect(await l.hitRequest('acme', a)).toBeNull();
    expect(await l.hitRequest('acme', a)).toEqual({ limit: 'key', retryAfterS: 45 }); // not counted for acme
    expect(await l.hitRequest('acme', b)).toBeNull(); // acme's second
    for (let i = 0; i < 3; i++) expect(await l.hitRequest('acme', b)).toEqual({ limit: 'tenant', retryAfterS: 45 });
    // Where the tenant has room (another tenant's counter), b has 2 of its 3 left: the refusals took none.
    expect(await l.hitRequest('beta', b)).toBeNull();
    expect(await l.hitRequest('beta', b)).toBeNull();
    expect(await l.hitRequest('beta', b)).toEqual({ limit: 'key', retryAfterS: 45 });
  });

  it('requests without a tenant are counted apart from a tenant named "-"', async () => {
    atWindow(1000);
    const l = make({ tenant_requests_per_minute: 1 }, now);
    expect(await wait(l, '')).toBe(0);
    expect(await wait(l, '-')).toBe(0);
    expect(await wait(l, '')).toBe(45);
  });

  it('a provider past its token budget waits for the rest of the window; providers without a budget never do', async () => {
    atWindow(1000);
    const l = make({ provider_tokens_per_minute: { openai: 1000 } }, now);
    l.spendTokens('openai', 600);
    expect(await l.providerWait('openai')).toBe(0);
    l.spendTokens('openai', 400);
    expect(await l.providerWait('openai')).toBe(45);
    l.spendTokens('mistral', 1e9);
    expect(await l.providerWait('mistral')).toBe(0);
    atWindow(1001);
    expect(await l.providerWait('openai')).toBe(0);
  });

  it('a burst of 10,001 other tenants in the same minute does not reset a tenant’s count', async () => {
    atWindow(1000);
    const l = make({ tenant_requests_per_minute: 1 }, now);
    await wait(l, 'acme');
    // In bursts of 500.
    for (let from = 0; from < 10_001; from += 500) {
      await Promise.all(Array.from({ length: Math.min(500, 10_001 - from) }, (_, i) => wait(l, `t${from + i}`)));
    }
    expect(await wait(l, 'acme')).toBe(45);
  });
});

const defaults: Flags = { enable_warm_fallback: true, enable_cold_queue: true, killed_models: ['old-model'] };

describe.each([
  [
    'Redis',
    (): FlagStore => {
      const f = new RedisFlags(defaults, redis, space());
      closing.push(() => f.close());
      return f;
    },
  ],
  ['in process', (): FlagStore => new LocalFlags(defaults)],
])('feature flags contract: %s', (_name, make) => {
  it('the routing map’s defaults until changed', () => {
    expect(make().get()).toEqual(defaults);
  });

  it('a change is in force at once where it was made; the flags it does not name keep their values', async () => {
    const f = make();
    expect(await f.update({ enable_cold_queue: false })).toEqual({ ...defaults, enable_cold_queue: false });
    expect(f.get()).toEqual({ ...defaults, enable_cold_queue: false });
    expect(await f.update({ enable_warm_fallback: false })).toEqual({ ...defaults, enable_cold_queue: false, enable_warm_fallback: false });
    expect(await f.update({ enable_cold_queue: true })).toEqual({ ...defaults, enable_warm_fallback: false });
  });

  it('killed models are replaced as a list, not merged; an empty change changes nothing', async () => {
    const f = make();
    await f.update({ killed_models: ['a', 'b'] });
    expect((await f.update({ killed_models: ['c'] })).killed_models).toEqual(['c']);
    expect(await f.update({})).toEqual({ ...defaults, killed_models: ['c'] });
    expect((await f.update({ killed_models: [] })).killed_models).toEqual([]);
    expect(f.get().killed_models).toEqual([]);
  });
});

describe.each([
  [
    'Redis',
    (key: string): PauseFlag => {
      const p = new RedisPause(redis, 20, key);
      closing.push(() => p.close());
      return p;
    },
  ],
  ['in process', (): PauseFlag => new MemoryPause()],
])('budget pause flag contract: %s', (_name, make) => {
  it('not paused at first; set pauses and says so only the first time; clear resumes', async () => {
    const p = make(`${space()}:pause_ai_tasks`);
    expect(p.paused()).toBe(false);
    expect(await p.refresh()).toBe(false);
    expect(await p.set()).toBe(true); // the pause notice goes out
    expect(p.paused()).toBe(true);
    expect(await p.refresh()).toBe(true);
    expect(await p.set()).toBe(false); // already paused: no second notice
    await p.clear();
    expect(p.paused()).toBe(false);
    expect(await p.refresh()).toBe(false);
    expect(await p.set()).toBe(true);
  });
});

describe('budget pause flag in Redis (what the in-process flag cannot share)', () => {
  it('a value an operator wrote by hand other than 1 means not paused, and setting the pause then reports it as new', async () => {
    const key = `${space()}:pause_ai_tasks`;
    await redis.set(key, '0');
    const p = new RedisPause(redis, 20, key);
    closing.push(() => p.close());
    expect(await p.refresh()).toBe(false);
    expect(await p.set()).toBe(true);
    expect(await redis.get(key)).toBe('1');
  });

  /**
   * A connection as stores.ts makes one, through a proxy that can lose a reply; the pause's scripts
   * already loaded in Redis, so that a set runs where it is first sent.
   */
  async function lossyLink() {
    const loaded = new RedisPause(redis, 60_000, `${space()}:pause_ai_tasks`);
    closing.push(() => loaded.close());
    await loaded.set();
    const proxy = await new RedisProxy().start();
    return { proxy, through: new Redis(proxy.url(TEST_REDIS_DB), { maxRetriesPerRequest: null }) };
  }
  async function closeLink(through: Redis, proxy: RedisProxy) {
    through.disconnect();
    await proxy.stop();
  }

  it('a pause whose answer was lost with its connection, sent again on the next (ioredis does), is still new: its notice goes out', async () => {
    const key = `${space()}:pause_ai_tasks`;
    const { proxy, through } = await lossyLink();
    const p = new RedisPause(through, 60_000, key);
    try {
      expect(await p.refresh()).toBe(false);
      proxy.loseNextReply();
      expect(await p.set()).toBe(true); // before: false, as if another had paused first, and no notice went out
      expect(await redis.get(key)).toBe('1');
      expect(await p.set()).toBe(false); // a webhook sent again is still no new pause
    } finally {
      p.close();
      await closeLink(through, proxy);
    }
  });

  it('a pause sent again after its answer was lost is still new when another instance paused meanwhile: one notice goes out', async () => {
    const key = `${space()}:pause_ai_tasks`;
    const { proxy, through } = await lossyLink();
    const [a, b] = [new RedisPause(through, 60_000, key), new RedisPause(redis, 60_000, key)];
    try {
      expect(await a.refresh()).toBe(false);
      let other: boolean | undefined;
      // The same webhook sent again to another instance (its sender saw no answer) lands in between.
      proxy.loseNextReply(async () => (other = await b.set()));
      expect(await a.set()).toBe(true); // before: false, the other's pause taken for the last, and no notice at all
      expect(other).toBe(false);
      expect(await redis.get(key)).toBe('1');
    } finally {
      a.close();
      b.close();
      await closeLink(through, proxy);
    }
  });

  it('every instance sees a pause set by another within its refresh', async () => {
    const key = `${space()}:pause_ai_tasks`;
    const [a, b] = [new RedisPause(redis, 20, key), new RedisPause(redis, 20, key)];
    closing.push(
      () => a.close(),
      () => b.close(),
    );
    await a.set();
    await until(() => b.paused());
    await b.clear();
    await until(() => !a.paused());
  });

  it("a loss of Redis's data while paused (restarted without it, or flushed) does not lift the pause: the instances that had it put it back", async () => {
    const key = `${space()}:pause_ai_tasks`;
    const warned: string[] = [];
    const [a, b] = [new RedisPause(redis, 20, key, (m) => warned.push(m)), new RedisPause(redis, 20, key, (m) => warned.push(m))];
    closing.push(
      () => a.close(),
      () => b.close(),
    );
    // A first start on an empty store is not paused, and writes nothing.
    expect(await a.refresh()).toBe(false);
    expect(await redis.keys(`${key}*`)).toEqual([]);
    await a.set();
    await until(() => b.paused());
    await redis.del(key, `${key}:mark`); // what a restart without the data, or a flush, leaves
    // An instance started after the loss knows of no pause, and follows those that had it.
    const later = new RedisPause(redis, 20, key);
    closing.push(() => later.close());
    await until(async () => (await redis.get(key)) === '1');
    for (const p of [a, b, later]) await until(() => p.refresh()); // a read sent before the put-back may answer first
    // Put back once, by whichever read first (the check and the write are one script).
    expect(warned).toEqual([`budget pause: ${key} was lost by Redis while paused (restarted without its data, or flushed): put back`]);
    // A deliberate resume, from any of them, still lifts it everywhere, and it stays lifted.
    await later.clear();
    for (const p of [a, b, later]) await until(async () => !(await p.refresh()));
    expect(await redis.get(key)).toBeNull();
    // A loss while not paused leaves it not paused.
    await redis.del(key, `${key}:mark`);
    for (const p of [a, b, later]) expect(await p.refresh()).toBe(false);
    expect(await redis.get(key)).toBeNull();
  });

  it('the key set to 1 by hand pauses and survives a loss; deleted by hand (as an external tool resumes) it resumes', async () => {
    const key = `${space()}:pause_ai_tasks`;
    const [a, b] = [new RedisPause(redis, 20, key), new RedisPause(redis, 20, key)];
    closing.push(
      () => a.close(),
      () => b.close(),
    );
    // Each waits for a read sent after the change (one sent before may answer first).
    const all = (paused: boolean) => until(async () => (await a.refresh()) === paused && (await b.refresh()) === paused);
    await redis.set(key, '1');
    await all(true);
    await redis.del(key); // by hand: a resume
    await all(false);
    expect(await redis.get(key)).toBeNull();
    await redis.set(key, '1');
    await all(true);
    await redis.del(key, `${key}:mark`); // the data lost
    await until(async () => (await redis.get(key)) === '1');
    await all(true);
    await redis.del(key);
    await all(false);
    expect(await redis.get(key)).toBeNull();
  });
});

describe('budget pause mark written by hand', () => {
  it.each(['nan', 'inf', 'Infinity', '1e300', '-5', 'x'])(
    'a mark that is no mark (%s) is read as none by every read and script: the pause is marked anew, a loss is put back, a resume lifts it',
    async (bad) => {
      const key = `${space()}:pause_ai_tasks`;
      await redis.mset(key, '1', `${key}:mark`, bad);
      const a = new RedisPause(redis, 60_000, key);
      closing.push(() => a.close());
      // Before: `nan` and `inf` were a number to the scripts and none to the read, so the pause was
      // never marked (a script at every read), and a loss lifted it.
      expect(await a.refresh()).toBe(true);
      expect(await redis.get(`${key}:mark`)).toMatch(/^[1-9]\d{11,15}$/);
      await redis.del(key, `${key}:mark`);
      expect(await a.refresh()).toBe(true);
      await a.clear();
      // Before: `Infinity` and `1e300` grew into `inf` or 300 digits, and stayed so for ever.
      expect(await redis.get(`${key}:mark`)).toMatch(/^[1-9]\d{11,15}$/);
      expect(await a.set()).toBe(true);
      await redis.del(key, `${key}:mark`); // lost again, before any read
      expect(await a.refresh()).toBe(true);
    },
  );
});

describe('budget pause set again after a loss', () => {
  it('a pause set on an instance that had it, after Redis lost it and before any read put it back, is not a new pause (no second notice); on one that had not, it is', async () => {
    const key = `${space()}:pause_ai_tasks`;
    const warned: string[] = [];
    // No reads on their own: the webhook's set lands before any read finds the loss (Redis back
    // from a restart, with the set queued while it was away, sent before the next read).
    const [a, b] = [new RedisPause(redis, 60_000, key, (m) => warned.push(m)), new RedisPause(redis, 60_000, key)];
    closing.push(
      () => a.close(),
      () => b.close(),
    );
    await Promise.all([a.refresh(), b.refresh()]);
    expect(await a.set()).toBe(true);
    await redis.del(key, `${key}:mark`);
    // Before: "new", and the pause's notice went out a second time for the pause that never lifted.
    expect(await a.set()).toBe(false);
    expect(warned).toEqual([`budget pause: ${key} was lost by Redis while paused (restarted without its data, or flushed): put back`]);
    // Lost again: an instance that never read the pause cannot tell a loss from a resume.
    await redis.del(key, `${key}:mark`);
    expect(await b.set()).toBe(true);
    // A resume and then a pause is a new pause, on the instance that had the one before too.
    await b.clear();
    expect(await a.set()).toBe(true);
  });
});

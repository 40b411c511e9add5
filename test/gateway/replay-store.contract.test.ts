// Idempotent replay's store, one contract for both implementations: in the real Redis (db 9, keys
// under a prefix of this process, removed afterwards) and in process, through the interface.
import { describe, expect, it } from 'vitest';
import { MemoryReplayStore, type Claim, type Lease, type ReplayStore, type StoredAnswer } from '../../gateway/src/replay-store';
import { RedisReplayStore } from '../../gateway/src/replay-store-redis';
import { Redis } from 'ioredis';
import { TEST_REDIS_DB } from '../redis-db';
import { redisUnderPrefix } from '../redis-prefix';
import { RedisProxy } from '../redis-proxy';

const db = redisUnderPrefix('replay-store');
const prefix = db.prefix;
let n = 0;

const FP = 'a'.repeat(64);
const OTHER_FP = 'b'.repeat(64);
const DAY = 24 * 3600_000;
const answer: StoredAnswer = {
  status: 200,
  headers: { 'content-type': 'application/json', 'x-route-tier': 'hot' },
  // Every byte value, a newline and invalid UTF-8 among them: bodies are kept byte for byte.
  body: Buffer.concat([Buffer.from('{"id":"chatcmpl-1"}\n'), Buffer.from(Array.from({ length: 256 }, (_, i) => i))]),
  stream: false,
};

async function until(check: () => Promise<boolean>, ms = 5000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > end) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 10));
  }
}

function leaseOf(claim: Claim): Lease {
  if (claim.kind !== 'claimed') throw new Error(`expected a claim, got ${claim.kind}`);
  return claim.lease;
}

describe.each([
  ['Redis', (): ReplayStore => new RedisReplayStore(db.redis, `${prefix}:${++n}`)],
  ['in process', (): ReplayStore => new MemoryReplayStore()],
])('replay store contract: %s', (_name, make) => {
  it('the first claim runs; while it runs a repeat is told so, and another body is told apart', async () => {
    const s = make();
    leaseOf(await s.claim('k', FP, 10_000));
    expect(await s.claim('k', FP, 10_000)).toEqual({ kind: 'running' });
    expect(await s.claim('k', OTHER_FP, 10_000)).toEqual({ kind: 'other_body' });
    expect((await s.claim('k2', FP, 10_000)).kind).toBe('claimed');
  });

  it('a kept answer comes back byte for byte to every repeat; another body is refused', async () => {
    const s = make();
    const lease = leaseOf(await s.claim('k', FP, 10_000));
    expect(await s.keep(lease, answer, DAY)).toBe(true);
    for (let i = 0; i < 2; i++) expect(await s.claim('k', FP, 10_000)).toEqual({ kind: 'answered', answer });
    expect(await s.claim('k', OTHER_FP, 10_000)).toEqual({ kind: 'other_body' });
  });

  it('an answer too large to keep is remembered as answered, with its status and size', async () => {
    const s = make();
    const lease = leaseOf(await s.claim('k', FP, 10_000));
    expect(await s.keep(lease, { status: 200, bytes: 2_000_000 }, DAY)).toBe(true);
    expect(await s.claim('k', FP, 10_000)).toEqual({ kind: 'not_kept', notKept: { status: 200, bytes: 2_000_000 } });
  });

  it('a released key runs anew', async () => {
    const s = make();
    await s.release(leaseOf(await s.claim('k', FP, 10_000)));
    expect((await s.claim('k', OTHER_FP, 10_000)).kind).toBe('claimed');
  });

  it('a lease not renewed runs out and the key is claimed again; the old holder can neither keep, renew nor release it', async () => {
    const s = make();
    const old = leaseOf(await s.claim('k', FP, 150));
    let next: Claim | null = null;
    await until(async () => (next = await s.claim('k', FP, 10_000)).kind === 'claimed');
    expect(await s.keep(old, answer, DAY)).toBe(false);
    expect(await s.renew(old, 10_000)).toBe(false);
    await s.release(old);
    expect(await s.claim('k', FP, 10_000)).toEqual({ kind: 'running' });
    expect(await s.keep(leaseOf(next!), answer, DAY)).toBe(true);
  });

  it('a lease lost with no claim since (it ran out, or Redis lost the key) is taken back by its renew, and its keep still lands', async () => {
    const s = make();
    const lease = leaseOf(await s.claim('k', FP, 150));
    await new Promise((r) => setTimeout(r, 200)); // the lease's term is over: the key is free
    expect(await s.renew(lease, 10_000)).toBe(true);
    expect(await s.claim('k', FP, 10_000)).toEqual({ kind: 'running' });
    const other = leaseOf(await s.claim('k2', FP, 150));
    await new Promise((r) => setTimeout(r, 200));
    expect(await s.keep(other, answer, DAY)).toBe(true);
    expect(await s.claim('k2', FP, 10_000)).toEqual({ kind: 'answered', answer });
  });

  it('a renewed lease holds past its first term', async () => {
    const s = make();
    const lease = leaseOf(await s.claim('k', FP, 150));
    expect(await s.renew(lease, 10_000)).toBe(true);
    // A key claimed after it for the same first term, not renewed: once it runs out, so has that term.
    await s.claim('unrenewed', FP, 150);
    await until(async () => (await s.claim('unrenewed', FP, 10_000)).kind === 'claimed');
    expect(await s.claim('k', FP, 10_000)).toEqual({ kind: 'running' });
  });

  it('a kept answer expires with its time to live', async () => {
    const s = make();
    await s.keep(leaseOf(await s.claim('k', FP, 10_000)), answer, 150);
    await until(async () => (await s.claim('k', OTHER_FP, 10_000)).kind === 'claimed');
  });
});

describe('replay store: Redis only', () => {
  it('keeps one string key per idempotency key, under the prefix, expiring in 24 hours', async () => {
    const space = `${prefix}:ttl`;
    const s = new RedisReplayStore(db.redis, space);
    await s.keep(leaseOf(await s.claim('k', FP, 10_000)), answer, DAY);
    expect(await db.redis.keys(`${space}:*`)).toEqual([`${space}:idempotency:k`]);
    const ttl = await db.redis.pttl(`${space}:idempotency:k`);
    expect(ttl).toBeGreaterThan(DAY - 60_000);
    expect(ttl).toBeLessThanOrEqual(DAY);
  });

  it('two stores on one Redis (two instances) see one claim and one answer', async () => {
    const space = `${prefix}:two`;
    const a = new RedisReplayStore(db.redis, space);
    const b = new RedisReplayStore(db.redis, space);
    const claims = await Promise.all(Array.from({ length: 10 }, (_, i) => (i % 2 ? a : b).claim('k', FP, 10_000)));
    expect(claims.filter((c) => c.kind === 'claimed')).toHaveLength(1);
    await a.keep(leaseOf(claims.find((c) => c.kind === 'claimed')!), answer, DAY);
    expect(await b.claim('k', FP, 10_000)).toEqual({ kind: 'answered', answer });
  });
});

describe('replay store: a claim sent again', () => {
  it("a claim whose answer was lost with its connection, sent again on the next (ioredis does), is still the request's: not 409 for its own claim", async () => {
    const proxy = await new RedisProxy().start();
    const redis = new Redis(proxy.url(TEST_REDIS_DB), { maxRetriesPerRequest: null }); // as stores.ts connects
    try {
      const s = new RedisReplayStore(redis, `${prefix}:again`);
      leaseOf(await s.claim('first', FP, 10_000)); // the script loaded: the claim below runs where it is first sent
      proxy.loseNextReply();
      const lease = leaseOf(await s.claim('k', FP, 10_000));
      expect(await s.keep(lease, answer, DAY)).toBe(true);
      expect(await s.claim('k', FP, 10_000)).toEqual({ kind: 'answered', answer });
    } finally {
      redis.disconnect();
      await proxy.stop();
    }
  });
});

describe('replay store: in process only', () => {
  it('stays within its byte budget, the oldest answers going first', async () => {
    const s = new MemoryReplayStore(3000);
    const big = { ...answer, body: Buffer.alloc(1000) };
    for (const k of ['k1', 'k2', 'k3', 'k4']) await s.keep(leaseOf(await s.claim(k, FP, 10_000)), big, DAY);
    expect((await s.claim('k1', FP, 10_000)).kind).toBe('claimed');
    expect((await s.claim('k4', FP, 10_000)).kind).toBe('answered');
  });

  // An answer was dropped only when a repeat read it after its day, or the budget needed its room:
  // on a quiet gateway, model output stayed in memory long past the 24 hours the docs promise.
  it('drops an answer at the end of its day though nothing reads it again', async () => {
    const clock = { ms: 0 };
    const s = new MemoryReplayStore(3000, () => clock.ms, 10);
    await s.keep(leaseOf(await s.claim('k', FP, 10_000)), answer, DAY);
    const entries = (s as unknown as { entries: Map<string, unknown> }).entries;
    expect(entries.size).toBe(1);
    clock.ms += DAY;
    await expect.poll(() => entries.size).toBe(0);
  });
});

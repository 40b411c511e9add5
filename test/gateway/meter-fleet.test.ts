// Meter events across instances: two real gateway processes started from one working directory
// (only PORT differs) deliver every event to the meter exactly once, through a spool compaction,
// a kill -9 and a restart; with Redis through its shared stream, without it each on its own spool.
import { existsSync, mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import { FakeMeterWebApp } from './fake-meter';
import { FakeProvider } from './fake-provider';
import { writeOneRouteMap } from './harness';
import { chats, startInstance, until, type Instance } from './instances';
import { TEST_REDIS_URL } from '../redis-db';

let hot: FakeProvider;
let meter: FakeMeterWebApp;
let cwd: string;
const running: Instance[] = [];

beforeEach(async () => {
  [hot, meter] = await Promise.all([new FakeProvider().start(), new FakeMeterWebApp().start()]);
  cwd = mkdtempSync(join(tmpdir(), 'meter-fleet-'));
  writeOneRouteMap(join(cwd, 'routes.json'), hot.url);
});
afterEach(async () => {
  await Promise.all(running.splice(0).map((i) => i.crash()));
  await Promise.all([hot.stop(), meter.stop()]);
});

/** The settings of `npm start` in one checkout: the defaults, a routing map and the meter. */
const settings = (extra: Record<string, string> = {}) => ({
  ROUTES_FILE: 'routes.json',
  METER_URL: meter.url,
  METER_TOKEN: 'tok',
  ...extra,
});

async function instance(extra: Record<string, string> = {}): Promise<Instance> {
  const i = await startInstance(cwd, settings(extra));
  running.push(i);
  return i;
}

/** Every answered call's event stored once: none lost, none stored twice. */
function expectStoredOnce(n: number): void {
  expect(meter.stored).toHaveLength(n);
  expect(new Set(meter.stored).size).toBe(n);
}

/** Stored once and also posted once: with one process per spool folder no event is even sent twice. */
function expectEachOnce(n: number): void {
  expectStoredOnce(n);
  expect(meter.posts.reduce((a, b) => a + b, 0)).toBe(n);
}

describe('meter events across instances, without Redis', () => {
  it('two instances on the default spool folder deliver every event once, also after one of them compacts its spool', async () => {
    const [a, b] = [await instance(), await instance()];
    const first = await chats([a.url], 3000); // over 1 MiB: a's spool is compacted once delivered
    expect(first.every((s) => s === 200)).toBe(true);
    await until('3000 events at the meter', () => meter.stored.length >= 3000, 30_000);
    const spools = readdirSync(join(cwd, '.data')).filter((f) => f.startsWith('meter-spool'));
    await until('a spool compacted', () => spools.some((d) => existsSync(join(cwd, '.data', d, 'spool.jsonl.done'))), 5000);
    const more = await chats([a.url, b.url], 100);
    expect(more.every((s) => s === 200)).toBe(true);
    await until('the next 100 events at the meter', () => meter.stored.length >= 3100, 15_000);
    expectEachOnce(3100);
  }, 90_000);
});

describe('meter events across instances, without Redis: a crash', () => {
  it('a gateway killed with events in its spool: the next one started takes its folder over and delivers them', async () => {
    meter.mode = 'down'; // events wait in the spools
    const [a, b] = [await instance(), await instance()];
    expect((await chats([a.url, b.url], 200)).every((s) => s === 200)).toBe(true);
    await a.crash();
    meter.mode = 'ok';
    const again = await instance(); // a restarted: the first free folder is the dead one's
    await until('200 events at the meter', () => meter.stored.length >= 200, 20_000);
    expectEachOnce(200);
    expect(readFileSync(join(cwd, '.data/meter-spool/lock'), 'utf8')).toMatch(new RegExp(`^${again.pid}\n`));
    expect(b.output()).toContain('.data/meter-spool is held by process');
  }, 60_000);
});

describe('meter events across instances, with Redis', () => {
  const REDIS_URL = TEST_REDIS_URL;
  const prefix = `test-meter-fleet-${process.pid}`;
  const stream = `${prefix}:meter:events`;
  const redis = new Redis(REDIS_URL);
  afterEach(async () => {
    const keys = await redis.keys(`${prefix}:*`);
    if (keys.length) await redis.del(...keys);
  });
  afterAll(() => redis.disconnect());

  // Short, for the test; a loaded machine may still claim a batch whose post is slow: it is posted
  // twice and stored once (at least once to the meter, once in the sheet by event_id).
  const shared = { QUEUE_STORE_URL: REDIS_URL, REDIS_PREFIX: prefix, METER_CLAIM_IDLE_MS: '1500' };
  /** Events pending with the consumers of the meter group, by the pid in the consumer's name. */
  async function pendingOf(pid: number): Promise<number> {
    const [, , , consumers] = (await redis.xpending(stream, 'meter')) as [number, string, string, Array<[string, string]> | null];
    return Number((consumers ?? []).find(([name]) => name.split(':')[1] === String(pid))?.[1] ?? 0);
  }

  it('a kill -9 of one instance with events pending: the other claims them, each event reaches the meter once, and a restart goes on', async () => {
    const a = await instance(shared);
    meter.hold(); // the meter is slow: a batch stays pending with the instance that read it
    expect((await chats([a.url], 300)).every((s) => s === 200)).toBe(true);
    await until('events pending with instance a', async () => (await pendingOf(a.pid)) > 0);
    const b = await instance(shared);
    await a.crash();
    // a's held post may still reach the meter (its body had arrived) or not; either way its events
    // stay pending under a (never acknowledged) until b claims them.
    meter.release();
    await until('300 events at the meter', () => meter.stored.length >= 300, 15_000);
    await until('b to claim what a left pending', () => /claimed \d+ event\(s\) left pending by another gateway/.test(b.output()), 15_000);

    const again = await instance(shared); // a restarted in the same folder
    expect((await chats([again.url, b.url], 100)).every((s) => s === 200)).toBe(true);
    await until('400 events at the meter', () => meter.stored.length >= 400, 15_000);
    expectStoredOnce(400);
    await until('the stream emptied of what the meter has', async () => (await redis.xlen(stream)) === 0);
    expect(await pendingOf(a.pid)).toBe(0);
  }, 60_000);
});

// One contract, two implementations of the Cold queue: BullMQ in the real Redis (db 9, a prefix of
// its own per test, removed afterwards) run by BullMQ's Worker, and the in-process queue run by its
// own worker. Every case runs against both, through the ColdQueue interface, with the same processor:
// what a client polling GET /v1/jobs/:id or an operator reading /health sees must not depend on
// whether the gateway has Redis.
import { spawn } from '../children';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { UnrecoverableError } from 'bullmq';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it, onTestFinished, vi } from 'vitest';
import { DeferJob, type ColdPayload, type ColdQueue, type Deferral, type QueueOptions } from '../../gateway/src/cold-queue';
import { MemoryColdQueue } from '../../gateway/src/cold-queue-memory';
import { BullColdQueue } from '../../gateway/src/cold-queue-redis';
import { within } from '../../gateway/src/within';
import { TEST_REDIS_DB, hasRedisServer } from '../redis-db';
import { OwnRedis } from '../own-redis';
import { RedisProxy } from '../redis-proxy';

const connection = { host: '127.0.0.1', port: 6379, db: TEST_REDIS_DB };
let redis: Redis;
let n = 0;
const cleanup: Array<() => Promise<void>> = [];

beforeAll(() => {
  redis = new Redis(connection);
});
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});
afterAll(async () => {
  const keys = await redis.keys(`test-cq-${process.pid}-*`);
  if (keys.length) await redis.del(...keys);
  redis.disconnect();
});

type Processor = (payload: ColdPayload, deferred: Deferral | null) => Promise<unknown>;
interface Twin {
  queue: ColdQueue;
  /** Starts a worker with `processor`; closed after the test. */
  work(processor: Processor): { close(): Promise<void> };
}

const twins: Record<string, (options: QueueOptions) => Twin & { prefix?: string }> = {
  'BullMQ (Redis)': (options) => {
    const prefix = `test-cq-${process.pid}-${++n}`;
    const queue = new BullColdQueue(connection, prefix, options);
    cleanup.push(() => queue.close());
    return {
      queue,
      prefix,
      work(processor) {
        // BullMQ's Worker, as the gateway's worker runs it, with the test's processor in place of the routing.
        const handle = queue.work(processor);
        cleanup.push(handle.close);
        return handle;
      },
    };
  },
  'in process': (options) => {
    const queue = new MemoryColdQueue(options);
    return {
      queue,
      work(processor) {
        const handle = queue.work(processor);
        cleanup.push(handle.close);
        return handle;
      },
    };
  },
};

const payload = (key: string): ColdPayload => ({
  body: { model: 'gpt-4o-mini', messages: [{ role: 'user', content: key }] },
  idempotencyKey: key,
  userId: 'u1',
  jobId: `client-${key}`,
  customerId: 'acme',
  jobType: 'summary',
  reason: 'all_failed',
  reviewRequired: false,
  enqueuedAt: '2026-11-23T10:00:00.000Z',
});

async function until<T>(check: () => Promise<T | null | undefined | false>, ms = 10_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await check();
    if (v) return v;
    if (Date.now() > end) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 10));
  }
}
const stateIs = (q: ColdQueue, id: string, state: string) => until(async () => ((await q.get(id))?.state === state ? q.get(id) : null));
const noCounts = { waiting: 0, delayed: 0, active: 0, completed: 0, failed: 0, dead_lettered: 0 };

/** Two instances' queues on one prefix, closed after the test. */
function twoInstances(): [BullColdQueue, BullColdQueue] {
  const prefix = `test-cq-${process.pid}-${++n}`;
  const pair: [BullColdQueue, BullColdQueue] = [
    new BullColdQueue(connection, prefix, { backoffMs: 20 }),
    new BullColdQueue(connection, prefix, { backoffMs: 20 }),
  ];
  cleanup.push(...pair.map((q) => () => q.close()));
  return pair;
}

/** A job of `key`'s payload that its provider refused for good: dead-lettered; its id. */
async function deadJob(queue: BullColdQueue, key: string, error = 'refused'): Promise<string> {
  const failing = queue.work(async () => {
    throw new UnrecoverableError(error);
  });
  const { jobId } = await queue.enqueue(payload(key));
  await stateIs(queue, jobId, 'dead-lettered');
  await failing.close();
  return jobId;
}

describe.each(Object.keys(twins))('Cold queue contract: %s', (name) => {
  const make = (backoffMs = 20, options: QueueOptions = {}) => twins[name]({ backoffMs, ...options });

  it('the same request enqueued twice at once (a retry reaching two instances): one job, created (and so notified) once', async () => {
    const { queue } = make();
    const both = await Promise.all([queue.enqueue(payload('k2')), queue.enqueue(payload('k2'))]);
    expect(both.map((r) => r.jobId)).toEqual([both[0].jobId, both[0].jobId]);
    expect(both.map((r) => r.created).sort()).toEqual([false, true]);
    expect((await queue.counts()).waiting).toBe(1);
  });

  it('a new job waits; the same idempotency key answers the same job and adds none', async () => {
    const { queue } = make();
    const first = await queue.enqueue(payload('k1'));
    expect(first).toEqual({ jobId: expect.stringMatching(/^llm-[0-9a-f]{40}$/), created: true });
    expect(await queue.enqueue(payload('k1'))).toEqual({ jobId: first.jobId, created: false });
    expect(await queue.get(first.jobId)).toEqual({
      id: first.jobId,
      state: 'waiting',
      attempts: 0,
      maxAttempts: 5,
      lastError: null,
      deferred: null,
      result: null,
      reason: 'all_failed',
      customerId: 'acme',
      enqueuedAt: '2026-11-23T10:00:00.000Z',
      finishedAt: null,
    });
    expect(await queue.counts()).toEqual({ ...noCounts, waiting: 1 });
    expect(await queue.get('llm-unknown')).toBeNull();
  });

  it('a job queued for later is delayed until its time, then runs', async () => {
    const twin = make();
    const { jobId } = await twin.queue.enqueue(payload('later'), { delayMs: 400 });
    expect((await twin.queue.get(jobId))?.state).toBe('delayed');
    expect(await twin.queue.counts()).toEqual({ ...noCounts, delayed: 1 });
    twin.work(async () => 'done');
    expect(await stateIs(twin.queue, jobId, 'completed')).toMatchObject({ attempts: 1, result: 'done' });
  });

  it('a job is active while it runs, then completed with its result, once', async () => {
    const twin = make();
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let runs = 0;
    twin.work(async (p) => {
      runs++;
      await gate;
      return { status: 200, body: { echo: p.idempotencyKey } };
    });
    const { jobId } = await twin.queue.enqueue(payload('ok'));
    expect(await stateIs(twin.queue, jobId, 'active')).toMatchObject({ attempts: 0, finishedAt: null });
    expect(await twin.queue.counts()).toEqual({ ...noCounts, active: 1 });
    release();
    const done = await stateIs(twin.queue, jobId, 'completed');
    expect(done).toMatchObject({ attempts: 1, lastError: null, result: { status: 200, body: { echo: 'ok' } } });
    expect(Date.parse(done!.finishedAt!)).not.toBeNaN();
    expect(await twin.queue.counts()).toEqual({ ...noCounts, completed: 1 });
    expect(await twin.queue.enqueue(payload('ok'))).toEqual({ jobId, created: false });
    expect(runs).toBe(1);
  });

  it('a failed run is retried after the backoff: shown as failed with its error, counted among the delayed (as BullMQ counts)', async () => {
    const twin = make(1500);
    let runs = 0;
    twin.work(async () => {
      if (++runs === 1) throw new Error('provider down');
      return 'second time lucky';
    });
    const { jobId } = await twin.queue.enqueue(payload('retry'));
    const failed = await stateIs(twin.queue, jobId, 'failed');
    expect(failed).toMatchObject({ attempts: 1, lastError: 'provider down', finishedAt: null });
    expect(await twin.queue.counts()).toEqual({ ...noCounts, delayed: 1 });
    expect(await stateIs(twin.queue, jobId, 'completed')).toMatchObject({
      attempts: 2,
      result: 'second time lucky',
      lastError: 'provider down',
    });
  });

  it('all 5 attempts used: dead-lettered with the last error, listed; moved back, it runs again with fresh attempts', async () => {
    const twin = make();
    let runs = 0;
    const worker = twin.work(async () => {
      throw new Error(`boom ${++runs}`);
    });
    const { jobId } = await twin.queue.enqueue(payload('dead'));
    const dead = await stateIs(twin.queue, jobId, 'dead-lettered');
    expect(dead).toMatchObject({ attempts: 5, lastError: 'boom 5' });
    expect(Date.parse(dead!.finishedAt!)).not.toBeNaN();
    expect(await twin.queue.counts()).toEqual({ ...noCounts, dead_lettered: 1 });
    expect((await twin.queue.deadLettered()).map((j) => j.id)).toEqual([jobId]);
    await worker.close();

    expect(await twin.queue.retryDeadLettered(jobId)).toBe(true);
    expect(await twin.queue.get(jobId)).toMatchObject({ state: 'waiting', attempts: 0, lastError: null, finishedAt: null });
    expect(await twin.queue.deadLettered()).toEqual([]);
    twin.work(async () => 'healed');
    expect(await stateIs(twin.queue, jobId, 'completed')).toMatchObject({ attempts: 1, result: 'healed' });
    expect(await twin.queue.retryDeadLettered(jobId)).toBe(false); // not dead-lettered
    expect(await twin.queue.retryDeadLettered('llm-unknown')).toBe(false);
  });

  it('an UnrecoverableError dead-letters at once; the list is newest first and honours its limit', async () => {
    const twin = make();
    twin.work(async (p) => {
      throw new UnrecoverableError(`refused ${p.idempotencyKey}`);
    });
    const ids: string[] = [];
    for (const key of ['a', 'b', 'c']) {
      const { jobId } = await twin.queue.enqueue(payload(key));
      expect(await stateIs(twin.queue, jobId, 'dead-lettered')).toMatchObject({ attempts: 1, lastError: `refused ${key}` });
      ids.push(jobId);
    }
    expect((await twin.queue.deadLettered(2)).map((j) => j.id)).toEqual([ids[2], ids[1]]);
  });

  // The dead job answered every later copy of its request for the 30 days it is kept: the client was
  // told 202 queued, and nothing ran it, nor was anybody told of it.
  it('the same request sent again after its job was dead-lettered gets a new job, created (and so notified), which runs', async () => {
    const twin = make();
    let fail = true;
    twin.work(async (p) => {
      if (fail) throw new UnrecoverableError(`refused ${p.idempotencyKey}`);
      return { answered: p.enqueuedAt };
    });
    const { jobId } = await twin.queue.enqueue(payload('again'));
    await stateIs(twin.queue, jobId, 'dead-lettered');
    fail = false;
    const later = { ...payload('again'), enqueuedAt: '2026-11-24T10:00:00.000Z' };
    expect(await twin.queue.enqueue(later)).toEqual({ jobId, created: true });
    expect(await stateIs(twin.queue, jobId, 'completed')).toMatchObject({
      attempts: 1,
      result: { answered: '2026-11-24T10:00:00.000Z' },
      enqueuedAt: '2026-11-24T10:00:00.000Z',
    });
    expect(await twin.queue.deadLettered()).toEqual([]);
    expect(await twin.queue.enqueue(later)).toEqual({ jobId, created: false }); // an answered job is found as before
  });

  // In process, the new job took the dead one's place in the queue: it ran before the jobs that
  // were waiting when it came, where BullMQ's runs after them.
  it('the new job of a request sent again after its job was dead-lettered waits behind the jobs already waiting', async () => {
    const twin = make();
    const failing = twin.work(async (p) => {
      throw new UnrecoverableError(`refused ${p.idempotencyKey}`);
    });
    const { jobId } = await twin.queue.enqueue(payload('first'));
    await stateIs(twin.queue, jobId, 'dead-lettered');
    await failing.close();
    const waiting = await twin.queue.enqueue(payload('waiting'));
    await twin.queue.enqueue(payload('first'));
    const ran: string[] = [];
    twin.work(async (p) => void ran.push(p.idempotencyKey));
    await stateIs(twin.queue, jobId, 'completed');
    await stateIs(twin.queue, waiting.jobId, 'completed');
    expect(ran).toEqual(['waiting', 'first']);
  });

  it('a deferred job waits, saying why and until when, without spending an attempt; then it runs', async () => {
    const twin = make();
    const seen: Array<Deferral | null> = [];
    twin.work(async (_p, deferred) => {
      seen.push(deferred);
      if (seen.length === 1) throw new DeferJob(Date.now() + 600, 'every route is open');
      return 'ran';
    });
    const { jobId } = await twin.queue.enqueue(payload('deferred'));
    const waiting = await until(async () => {
      const j = await twin.queue.get(jobId);
      return j?.deferred ? j : null;
    });
    expect(waiting).toMatchObject({ state: 'delayed', attempts: 0, lastError: null, deferred: { reason: 'every route is open' } });
    expect(Date.parse(waiting!.deferred!.until)).toBeGreaterThan(Date.now());
    // Counted among the delayed once the worker has moved it there (the view says so a moment sooner).
    expect(await until(async () => ((await twin.queue.counts()).delayed === 1 ? twin.queue.counts() : null))).toEqual({
      ...noCounts,
      delayed: 1,
    });
    expect(await stateIs(twin.queue, jobId, 'completed')).toMatchObject({ attempts: 1, result: 'ran' });
    expect(seen[1]).toMatchObject({ reason: 'every route is open', since: waiting!.deferred!.since }); // the run knows since when
  });

  it('a client polling while jobs are deferred and run sees each job in one state: a deferral still ahead is delayed, a completed job has its attempt', async () => {
    const twin = make();
    const runs = new Map<string, number>();
    twin.work(async (p) => {
      const n = (runs.get(p.idempotencyKey) ?? 0) + 1;
      runs.set(p.idempotencyKey, n);
      if (n === 1) throw new DeferJob(Date.now() + 150, 'every route is open');
      return 'ran';
    });
    const keys = Array.from({ length: 12 }, (_, i) => `poll-${i}`);
    const wrong: unknown[] = [];
    const poll = async (jobId: string) => {
      for (;;) {
        const j = await twin.queue.get(jobId);
        // A deferral still ahead when the answer came: the job cannot have left `delayed` yet.
        if (j?.deferred && Date.parse(j.deferred.until) > Date.now() && j.state !== 'delayed') wrong.push(j);
        if (j?.state === 'completed' && j.attempts !== 1) wrong.push(j);
        if (j?.state === 'completed') return;
        await new Promise((r) => setImmediate(r)); // as fast as the store answers, yet letting timers run
      }
    };
    const ids = await Promise.all(keys.map(async (k) => (await twin.queue.enqueue(payload(k))).jobId));
    await within(Promise.all(ids.flatMap((id) => [poll(id), poll(id)])), 10_000);
    expect(wrong).toEqual([]);
  });

  it('completed jobs: only the newest are kept (10,000; 3 here), as dead-lettered ones (10,000; 2 here)', async () => {
    const twin = make(20, { keepCompleted: 3, keepDead: 2 });
    twin.work(async (p) => {
      if (p.idempotencyKey.startsWith('bad')) throw new UnrecoverableError('refused');
      return 'ok';
    });
    const done: string[] = [];
    for (const key of ['c1', 'c2', 'c3', 'c4', 'c5']) {
      const { jobId } = await twin.queue.enqueue(payload(key));
      await stateIs(twin.queue, jobId, 'completed');
      done.push(jobId);
    }
    const dead: string[] = [];
    for (const key of ['bad1', 'bad2', 'bad3']) {
      const { jobId } = await twin.queue.enqueue(payload(key));
      await stateIs(twin.queue, jobId, 'dead-lettered');
      dead.push(jobId);
    }
    expect(await twin.queue.counts()).toEqual({ ...noCounts, completed: 3, dead_lettered: 2 });
    expect(await twin.queue.get(done[0])).toBeNull();
    expect((await twin.queue.get(done[4]))?.result).toBe('ok');
    expect((await twin.queue.deadLettered()).map((j) => j.id)).toEqual([dead[2], dead[1]]);
  });

  it('a finished job leaves once past its age (7 days, 30 for a dead letter; 1 s here) also when no job finishes after it', async () => {
    // The bounds used to be applied only as another job finished: the last dead letter of a quiet
    // queue, prompt and all, was kept for good.
    const twin = make(20, { keepCompletedS: 1, keepDeadS: 1, sweepMs: 100 });
    twin.work(async (p) => {
      if (p.idempotencyKey === 'bad') throw new UnrecoverableError('refused');
      return 'ok';
    });
    const done = (await twin.queue.enqueue(payload('good'))).jobId;
    await stateIs(twin.queue, done, 'completed');
    const dead = (await twin.queue.enqueue(payload('bad'))).jobId;
    await stateIs(twin.queue, dead, 'dead-lettered');
    await until(async () => (await twin.queue.get(done)) === null && (await twin.queue.get(dead)) === null);
    expect(await twin.queue.counts()).toEqual(noCounts);
  });
});

describe('a worker killed mid-job (Redis)', () => {
  /** A worker in a process of its own (so kill -9 is real), with 1 s locks; `hang`: its runs never end. */
  function workerProcess(prefix: string, hang: boolean) {
    const source = join(import.meta.dirname, '../../gateway/src/cold-queue-redis.ts');
    const code = `import(${JSON.stringify(source)}).then(({ BullColdQueue }) => {
      const queue = new BullColdQueue(${JSON.stringify(connection)}, ${JSON.stringify(prefix)});
      queue.work(async () => { console.log('running'); return ${hang} ? new Promise(() => {}) : 'answered'; }, { lockMs: 1000 });
    });`;
    const child = spawn(process.execPath, ['--import', 'tsx', '-e', code], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    cleanup.push(async () => void child.kill('SIGKILL'));
    return { running: () => until(async () => out.includes('running')), kill: () => child.kill('SIGKILL') };
  }

  it('is taken back and run again, also after a second kill', async () => {
    const prefix = `test-cq-${process.pid}-${++n}`;
    const queue = new BullColdQueue(connection, prefix, { backoffMs: 20 });
    cleanup.push(() => queue.close());
    const { jobId } = await queue.enqueue(payload('stalled'));
    for (let kill = 1; kill <= 2; kill++) {
      const w = workerProcess(prefix, true);
      await w.running();
      w.kill();
    }
    const last = workerProcess(prefix, false);
    await last.running();
    expect(await stateIs(queue, jobId, 'completed')).toMatchObject({ result: 'answered' });
  }, 30_000);

  // A job dead-lettered by a third kill and moved back (npm run ops -- dlq move) kept the count of
  // its kills: the first kill after the move dead-lettered it again, where a job is taken back twice.
  it('dead-lettered by a third kill and moved back, it is taken back again after a kill', async () => {
    const prefix = `test-cq-${process.pid}-${++n}`;
    const queue = new BullColdQueue(connection, prefix, { backoffMs: 20 });
    cleanup.push(() => queue.close());
    const { jobId } = await queue.enqueue(payload('killed-thrice'));
    const killOnce = async () => {
      const w = workerProcess(prefix, true);
      await w.running();
      w.kill();
    };
    for (let kill = 1; kill <= 3; kill++) await killOnce();
    const fourth = workerProcess(prefix, true); // takes the killed run back: the third kill was one too many
    expect(await stateIs(queue, jobId, 'dead-lettered')).toMatchObject({ lastError: 'job stalled more than allowable limit' });
    fourth.kill();
    expect(await queue.retryDeadLettered(jobId)).toBe(true);
    await killOnce();
    const last = workerProcess(prefix, false);
    await last.running();
    expect(await stateIs(queue, jobId, 'completed')).toMatchObject({ result: 'answered' });
  }, 60_000);
});

describe('a job whose claim a killed run left (Redis)', () => {
  it('waits for that claim to lapse, and its client is not told that Redis did not answer', async () => {
    const prefix = `test-cq-${process.pid}-${++n}`;
    const queue = new BullColdQueue(connection, prefix, { backoffMs: 20 });
    cleanup.push(() => queue.close());
    const { jobId } = await queue.enqueue(payload('claimed'));
    await redis.hset(`${queue.queue.qualifiedName}:run:${jobId}`, 'token', 'a-killed-run'); // its worker died mid-call
    await redis.pexpire(`${queue.queue.qualifiedName}:run:${jobId}`, 60_000);
    let called = 0;
    cleanup.push(queue.work(async () => ++called, { runMs: 60_000 }).close);
    const waiting = await until(async () => ((await queue.get(jobId))?.deferred ? queue.get(jobId) : null));
    expect(called).toBe(0);
    // before: "(its lock lapsed while Redis did not answer)", with Redis well and the worker killed
    expect(waiting!.deferred!.reason).toMatch(/^another run of this job holds it/);
    expect(waiting!.deferred!.reason).toMatch(/worker was stopped/);
  });
});

// Two instances given the request again (a client's retry reaching both) both found its job dead;
// the one slower to remove it removed the new job the other had just added in its place, added its
// own and said it created it too: a person was told of one job twice.
/**
 * `b` reads the dead job's state, then `a` replaces the job before `b` goes on: one new job (`a`'s),
 * and only `a` says it created it.
 */
async function expectReplacedOnce(a: BullColdQueue, b: BullColdQueue, jobId: string, fromA: ColdPayload, fromB: ColdPayload) {
  let aAnswer: unknown;
  const getJobState = b.queue.getJobState.bind(b.queue);
  vi.spyOn(b.queue, 'getJobState').mockImplementationOnce(async (id) => {
    const state = await getJobState(id);
    aAnswer = await a.enqueue(fromA);
    return state;
  });
  const bAnswer = await b.enqueue(fromB);
  expect(aAnswer).toEqual({ jobId, created: true });
  expect(bAnswer).toEqual({ jobId, created: false });
  expect(await b.get(jobId)).toMatchObject({ state: 'waiting', enqueuedAt: fromA.enqueuedAt });
}

describe('a new job whose creation mark Redis took and whose answer was lost (Redis)', () => {
  it('the mark sent again on the new connection (ioredis does) still tells the job created, so a person is notified', async () => {
    const proxy = await new RedisProxy().start();
    cleanup.push(() => proxy.stop());
    const queue = new BullColdQueue({ ...connection, port: proxy.port }, `test-cq-${process.pid}-${++n}`, { backoffMs: 20 });
    cleanup.push(() => queue.close());
    expect((await queue.enqueue(payload('first'))).created).toBe(true); // connected, its scripts loaded
    proxy.loseReplyTo(':created:');
    // before: created false, as if another instance had added the job, and nobody was told of it
    expect(await queue.enqueue(payload('k1'))).toEqual({ jobId: expect.stringMatching(/^llm-/), created: true });
    expect((await queue.enqueue(payload('k1'))).created).toBe(false); // the same request again: the job it added
  });
});

describe('a dead-lettered job two instances replace at once (Redis)', () => {
  it('is replaced once: the new job stays, and one instance says it created it', async () => {
    const [a, b] = twoInstances();
    const jobId = await deadJob(a, 'raced');
    const fromA = { ...payload('raced'), enqueuedAt: '2026-11-24T10:00:00.000Z' };
    const fromB = { ...payload('raced'), enqueuedAt: '2026-11-24T10:00:00.001Z' };
    // b finds the job dead; a replaces it before b goes on.
    await expectReplacedOnce(a, b, jobId, fromA, fromB);
  });
});

// The job and its state are read together but not in one step: the job read just before its last
// attempt failed (not yet finished) and its state just after (dead). The instance that read so
// took the replacement's mark under that unfinished job's name, not the dead job's, so it found the
// mark free although another instance held the dead job's: both replaced the job, the slower one
// removing the new job the other had just added, and both said they created it.
describe('a dead-lettered job found by an instance that read it as it died (Redis)', () => {
  it('is still replaced once: the new job stays, and one instance says it created it', async () => {
    const [a, b] = twoInstances();
    const jobId = await deadJob(a, 'read-dying');
    const fromA = { ...payload('read-dying'), enqueuedAt: '2026-11-24T10:00:00.000Z' };
    const fromB = { ...payload('read-dying'), enqueuedAt: '2026-11-24T10:00:00.001Z' };
    // b read the job as it was before its attempt failed: not finished yet.
    const getJob = b.queue.getJob.bind(b.queue);
    vi.spyOn(b.queue, 'getJob').mockImplementationOnce(async (id) => {
      const job = (await getJob(id))!;
      job.finishedOn = undefined;
      return job;
    });
    // Its state was read once it had died; a replaces it before b goes on.
    await expectReplacedOnce(a, b, jobId, fromA, fromB);
  });
});

// The same request sent again replaced its dead job: the dead job was removed, then the new one
// added. An add Redis refused (at its maxmemory, filled meanwhile) left neither: the client was told
// 503 and the operator had lost the dead-letter entry, its prompt and its error.
describe('a dead-lettered job whose replacement Redis refuses (Redis)', () => {
  it.skipIf(!hasRedisServer)(
    'stays in the dead-letter list as it was, and the request sent again once there is room replaces it',
    async () => {
      const own = await new OwnRedis(['--appendonly', 'no', '--maxmemory-policy', 'noeviction']).start();
      onTestFinished(() => own.end());
      const queue = new BullColdQueue({ host: '127.0.0.1', port: own.port }, 'dead-kept', { backoffMs: 20 });
      onTestFinished(() => queue.close());
      const jobId = await deadJob(queue, 'kept', 'refused by the provider');
      const probe = new Redis(own.url);
      onTestFinished(() => void probe.disconnect());
      // Redis fills up (other writers) between the dead job set aside and the new one added.
      const add = queue.queue.add.bind(queue.queue);
      vi.spyOn(queue.queue, 'add').mockImplementationOnce(async (...args) => {
        await probe.config('SET', 'maxmemory', '1');
        return add(...args);
      });
      onTestFinished(() => void vi.restoreAllMocks());
      await expect(queue.enqueue(payload('kept'))).rejects.toMatchObject({ name: 'QueueFull' });
      await probe.config('SET', 'maxmemory', '0');
      expect(await queue.deadLettered()).toMatchObject([{ id: jobId, state: 'dead-lettered', lastError: 'refused by the provider' }]);
      expect(await probe.hget(`dead-kept:ai-tasks:${jobId}`, 'data')).toContain('kept'); // its prompt, for the operator to move it back
      expect(await queue.enqueue(payload('kept'))).toEqual({ jobId, created: true });
      expect(await queue.get(jobId)).toMatchObject({ state: 'waiting', attempts: 0 });
      expect(await queue.deadLettered()).toEqual([]);
    },
  );
});

// A job whose add Redis answered after the time-to-answer was made after its client was told 503
// (cold_queue_unavailable): the SDK's retry was answered live, and the job ran later all the same,
// a second provider call and a notice of work nobody waits for.
describe('a job added after its client was told 503 (Redis)', () => {
  /** `queue`'s next add: its client is answered (503) while the add is under way; `meanwhile` runs once it is in. */
  const answeredDuringAdd = (queue: BullColdQueue, meanwhile: () => Promise<unknown> = async () => undefined) => {
    const answered = new AbortController();
    const add = queue.queue.add.bind(queue.queue);
    vi.spyOn(queue.queue, 'add').mockImplementationOnce(async (...args) => {
      const adding = add(...args);
      answered.abort();
      const job = await adding;
      await meanwhile();
      return job;
    });
    onTestFinished(() => void vi.restoreAllMocks());
    return answered.signal;
  };

  it('is taken out again and not told of; the request sent again makes its job', async () => {
    const queue = new BullColdQueue(connection, `test-cq-${process.pid}-${++n}`, { backoffMs: 20 });
    cleanup.push(() => queue.close());
    const late = await queue.enqueue(payload('late'), { signal: answeredDuringAdd(queue) });
    expect(late).toMatchObject({ created: false, withdrawn: true });
    expect(await queue.get(late.jobId)).toBeNull();
    expect(await queue.counts()).toMatchObject({ waiting: 0, delayed: 0 });
    expect(await queue.enqueue(payload('late'))).toEqual({ jobId: late.jobId, created: true });
  });

  it('stays when the request sent again found it meanwhile (its client was told it is queued)', async () => {
    const [a, b] = twoInstances();
    let retried: unknown;
    const signal = answeredDuringAdd(a, async () => (retried = await b.enqueue(payload('found'))));
    const late = await a.enqueue(payload('found'), { signal });
    expect(retried).toEqual({ jobId: late.jobId, created: false });
    expect(late.created).toBe(true); // the one notice of the job
    expect(await a.get(late.jobId)).toMatchObject({ state: 'waiting' });
  });

  // The request sent again (b) touched the job before the call given up on (a) did, found none, and
  // its add met a's job: its client was told 202, and a's withdrawal, seeing a's own touch the last,
  // took the job out. b's client polled a job that was no longer there (404).
  it('stays when the request sent again touched it first and was told of it', async () => {
    const [a, b] = twoInstances();
    await Promise.all([a.get('none'), b.get('none')]); // both connected: their touches are not refused
    const answered = new AbortController();
    let aDone!: Promise<unknown>;
    let bRead!: () => void;
    const bHasRead = new Promise<void>((resolve) => (bRead = resolve));
    let aWithdrawing!: () => void;
    const aIsWithdrawing = new Promise<void>((resolve) => (aWithdrawing = resolve));
    const [getJobOfA, getJobOfB, addOfA, addOfB] = [
      a.queue.getJob.bind(a.queue),
      b.queue.getJob.bind(b.queue),
      a.queue.add.bind(a.queue),
      b.queue.add.bind(b.queue),
    ];
    // b has touched the job; a touches it too (its read comes after its touch), then b reads: no job yet.
    vi.spyOn(b.queue, 'getJob').mockImplementationOnce(async (id) => {
      const aHasRead = new Promise<void>((resolve) => {
        vi.spyOn(a.queue, 'getJob').mockImplementationOnce(async (jobId) => {
          const job = await getJobOfA(jobId);
          resolve();
          return job;
        });
      });
      aDone = a.enqueue(payload('both'), { signal: answered.signal });
      await aHasRead;
      const job = await getJobOfB(id);
      bRead();
      return job;
    });
    // a adds the job once b has read, and its client is told 503 meanwhile.
    vi.spyOn(a.queue, 'add').mockImplementationOnce(async (...args) => {
      await bHasRead;
      const adding = addOfA(...args);
      answered.abort();
      return adding;
    });
    // b adds once a has added and marked the job (a duplicate: b's client is told 202), before a takes it out.
    vi.spyOn(b.queue, 'add').mockImplementationOnce(async (...args) => {
      await aIsWithdrawing;
      return addOfB(...args);
    });
    const withdrawing = a as unknown as { withdraw(...args: unknown[]): Promise<boolean> };
    const withdrawOfA = withdrawing.withdraw.bind(a);
    vi.spyOn(withdrawing, 'withdraw').mockImplementationOnce(async (...args) => {
      aWithdrawing();
      await bDone;
      return withdrawOfA(...args);
    });
    onTestFinished(() => void vi.restoreAllMocks());
    let told: string | undefined;
    const bDone = b.enqueue(payload('both'), { added: (id) => (told = id) });
    const fromB = await bDone;
    await aDone;
    expect(fromB).toMatchObject({ created: false });
    expect(told).toBeDefined(); // b's client was told 202 of the job
    expect(await b.get(told!)).toMatchObject({ state: 'waiting' });
  });

  it('that replaced a dead-lettered job leaves the dead job where it was', async () => {
    const queue = new BullColdQueue(connection, `test-cq-${process.pid}-${++n}`, { backoffMs: 20 });
    cleanup.push(() => queue.close());
    const jobId = await deadJob(queue, 'dead-late', 'refused by the provider');
    expect(await queue.enqueue(payload('dead-late'), { signal: answeredDuringAdd(queue) })).toEqual({
      jobId,
      created: false,
      withdrawn: true,
    });
    expect(await queue.deadLettered()).toMatchObject([{ id: jobId, state: 'dead-lettered', lastError: 'refused by the provider' }]);
  });
});

// A dead-lettered job set aside for its replacement went back when the add was refused, also when
// the request sent again had meanwhile found no job there and was adding its own: that add met the
// dead job put back and kept it, and its client was told 202 (and a person notified) of a job that
// was dead-lettered and never ran.
describe('a dead-lettered job whose replacement is refused while the request sent again adds its own (Redis)', () => {
  it('gives way: the job of the request sent again is the one queued', async () => {
    const [a, b] = twoInstances();
    const jobId = await deadJob(a, 'gives-way', 'refused by the provider');
    let aDone!: () => void;
    const aFinished = new Promise<void>((resolve) => (aDone = resolve));
    let retried!: Promise<unknown>;
    const addOfB = b.queue.add.bind(b.queue);
    vi.spyOn(a.queue, 'add').mockImplementationOnce(async () => {
      // The request sent again (b) finds no job (a set it aside) and is about to add its own ...
      const bAdding = new Promise<void>((resolve) => {
        vi.spyOn(b.queue, 'add').mockImplementationOnce(async (...args) => {
          resolve();
          await aFinished;
          return addOfB(...args);
        });
      });
      retried = b.enqueue(payload('gives-way'));
      await bAdding;
      // ... when Redis refuses a's add.
      throw new Error('Connection is closed.');
    });
    onTestFinished(() => void vi.restoreAllMocks());
    await expect(a.enqueue(payload('gives-way'))).rejects.toThrow('Connection is closed.');
    aDone();
    expect(await retried).toEqual({ jobId, created: true });
    expect(await b.get(jobId)).toMatchObject({ state: 'waiting', attempts: 0 });
    expect(await b.deadLettered()).toEqual([]);
  });
});

describe('what a completed job keeps', () => {
  it('Redis: the request body (the prompt) leaves Redis once the job is answered', async () => {
    const twin = twins['BullMQ (Redis)']({ backoffMs: 20 });
    const asked = payload('prompt');
    (asked.body.messages as Array<{ content: string }>)[0].content = 'secret prompt text';
    const { jobId } = await twin.queue.enqueue(asked);
    expect(await redis.hget(`${twin.prefix}:ai-tasks:${jobId}`, 'data')).toContain('secret prompt text');
    twin.work(async () => 'answered');
    await stateIs(twin.queue, jobId, 'completed');
    await until(async () => !(await redis.hget(`${twin.prefix}:ai-tasks:${jobId}`, 'data'))!.includes('secret prompt text'));
    expect((await twin.queue.get(jobId))?.result).toBe('answered');
  });

  it("Redis: the answer does not outlive its job in the queue's event stream (7 days; 1 s here)", async () => {
    // BullMQ writes each completed job's answer into its event stream too, which nothing here reads and
    // which kept it, after the job was gone, until 10,000 newer events pushed it out.
    const twin = twins['BullMQ (Redis)']({ backoffMs: 20, keepCompletedS: 1, sweepMs: 100 });
    const events = `${twin.prefix}:ai-tasks:events`;
    const { jobId } = await twin.queue.enqueue(payload('answer'));
    twin.work(async () => 'the secret answer');
    await stateIs(twin.queue, jobId, 'completed');
    expect(JSON.stringify(await redis.xrange(events, '-', '+'))).toContain('the secret answer');
    await until(async () => (await twin.queue.get(jobId)) === null);
    await until(async () => !JSON.stringify(await redis.xrange(events, '-', '+')).includes('the secret answer'));
  });

  it('Redis: a worker sweeps as it starts, not only an hour later (instances restarted more often never swept)', async () => {
    const twin = twins['BullMQ (Redis)']({ backoffMs: 20, keepCompletedS: 1 }); // sweeps an hour apart
    const before = twin.work(async () => 'answered');
    const { jobId } = await twin.queue.enqueue(payload('old'));
    await stateIs(twin.queue, jobId, 'completed');
    const answeredAt = Date.now();
    await before.close();
    await until(async () => Date.now() - answeredAt > 1500); // past its age of 1 s
    expect(await twin.queue.get(jobId)).not.toBeNull();
    twin.work(async () => 'answered'); // the instance restarted
    await until(async () => (await twin.queue.get(jobId)) === null);
  });

  it('in process: 20 answered requests of 5 MB each are not kept in memory', async () => {
    setFlagsFromString('--expose-gc');
    const gc = runInNewContext('gc') as () => void;
    const queue = new MemoryColdQueue({ backoffMs: 20 });
    cleanup.push(queue.work(async () => 'answered').close);
    // Large strings made from buffers live outside the V8 heap (external): count both.
    const used = () => process.memoryUsage().heapUsed + process.memoryUsage().external;
    gc();
    const before = used();
    for (let i = 0; i < 20; i++) {
      const big = payload(`big-${i}`);
      (big.body.messages as Array<{ content: string }>)[0].content = randomBytes(3.75 * 1024 * 1024).toString('base64'); // 5 MB of flat text
      const { jobId } = await queue.enqueue(big);
      await stateIs(queue, jobId, 'completed');
    }
    for (let i = 0; i < 3; i++) {
      gc(); // external memory is released as its strings are swept: a few rounds, with turns between
      await new Promise((r) => setImmediate(r));
    }
    const grown = (used() - before) / 1024 ** 2;
    expect(grown).toBeLessThan(30); // 100 MB of prompts, none kept
  });
});

describe('the in-process queue is bounded', () => {
  it('past its limit of held request bytes a new job is refused as full (503 cold_queue_full); room comes back as jobs are answered', async () => {
    const queue = new MemoryColdQueue({ backoffMs: 20, maxBytes: 64 * 1024 });
    const big = (key: string) => {
      const p = payload(key);
      (p.body.messages as Array<{ content: string }>)[0].content = 'x'.repeat(20 * 1024);
      return p;
    };
    for (const key of ['a', 'b', 'c']) await queue.enqueue(big(key));
    await expect(queue.enqueue(big('d'))).rejects.toMatchObject({ name: 'QueueFull' });
    expect(await queue.enqueue(big('a'))).toMatchObject({ created: false }); // a repeat still finds its job
    cleanup.push(queue.work(async () => 'answered').close);
    await until(async () => (await queue.counts()).completed === 3);
    expect(await queue.enqueue(big('d'))).toMatchObject({ created: true });
  });
});

describe("the in-process queue counts completed jobs' answers", () => {
  // Only requests counted: answers of 30 MB (an embeddings answer for 2,048 inputs), kept a week
  // for GET /v1/jobs/:id, piled up past the limit through a long outage until the process ran out of memory.
  it('answers of 30 MB each: the oldest are dropped to stay within 256 MB, the newest kept whole', async () => {
    const queue = new MemoryColdQueue({ backoffMs: 20 });
    const embedding = 'x'.repeat(30 * 1024 * 1024); // the same string each time: the queue counts each answer's bytes
    cleanup.push(queue.work(async () => ({ status: 200, body: { object: 'list', data: [{ embedding }] } })).close);
    const ids: string[] = [];
    for (let i = 0; i < 24; i++) {
      const { jobId } = await queue.enqueue(payload(`embed-${i}`));
      await stateIs(queue, jobId, 'completed');
      ids.push(jobId);
    }
    const jobs = await Promise.all(ids.map((id) => queue.get(id)));
    const kept = jobs.filter((j) => j?.result !== null);
    const keptBytes = kept.reduce((sum, j) => sum + Buffer.byteLength(JSON.stringify(j!.result)), 0);
    expect(keptBytes).toBeLessThanOrEqual(256 * 1024 * 1024);
    expect(kept.length).toBe(8); // 8 × 30 MB fit
    expect(jobs.slice(-8)).toEqual(kept); // the newest
    expect(jobs[0]).toMatchObject({ state: 'completed', result: null, answerDropped: true });
    expect(await queue.counts()).toMatchObject({ completed: 24 });
  });

  it('kept answers never refuse new work: a request that fits is taken, the oldest answers dropped for it', async () => {
    const queue = new MemoryColdQueue({ backoffMs: 20, maxBytes: 64 * 1024 });
    const answer = 'y'.repeat(20 * 1024);
    cleanup.push(queue.work(async () => answer).close);
    const first = await queue.enqueue(payload('a'));
    await stateIs(queue, first.jobId, 'completed');
    const second = await queue.enqueue(payload('b'));
    await stateIs(queue, second.jobId, 'completed');
    // 40 KB of answers kept: a 40 KB request fits only once the oldest answer is dropped.
    const big = payload('c');
    (big.body.messages as Array<{ content: string }>)[0].content = 'z'.repeat(40 * 1024);
    expect(await queue.enqueue(big)).toMatchObject({ created: true });
    const [dropped, kept] = [await queue.get(first.jobId), await queue.get(second.jobId)];
    expect([dropped?.answerDropped, dropped?.result]).toEqual([true, null]);
    expect(kept?.result === answer).toBe(true);
  });

  // Found, such a job answered the request sent again 202 with its id, and every poll 410: the
  // request could never be answered again, however often it was sent.
  it('a request sent again whose answer was dropped runs again: a new job under its id, created (and so notified), answered', async () => {
    const queue = new MemoryColdQueue({ backoffMs: 20, maxBytes: 64 * 1024 });
    let runs = 0;
    cleanup.push(queue.work(async () => `${++runs}`.padEnd(40 * 1024, 'y')).close);
    const first = await queue.enqueue(payload('a'));
    await stateIs(queue, first.jobId, 'completed');
    await stateIs(queue, (await queue.enqueue(payload('b'))).jobId, 'completed'); // its answer drops the first one's
    expect(await queue.get(first.jobId)).toMatchObject({ answerDropped: true, result: null });
    expect(await queue.enqueue(payload('a'))).toEqual({ jobId: first.jobId, created: true });
    const again = await until(async () => {
      const j = await queue.get(first.jobId);
      return j?.state === 'completed' && !j.answerDropped ? j : null;
    });
    expect(String(again.result).startsWith('3y')).toBe(true);
    expect(await queue.counts()).toMatchObject({ completed: 2 });
  });
});

describe('the in-process queue counts all of a request it holds', () => {
  it("a Responses request's chat translation counts against the limit as its body does", async () => {
    const queue = new MemoryColdQueue({ maxBytes: 64 * 1024 });
    const text = 'x'.repeat(20 * 1024);
    const responses = (key: string): ColdPayload => ({
      ...payload(key),
      api: 'responses',
      body: { model: 'gpt-4o-mini', input: text },
      asChat: { model: 'gpt-4o-mini', messages: [{ role: 'user', content: text }] },
    });
    // Each holds about 40 KB (its body and its translation): the second would pass 64 KB.
    await queue.enqueue(responses('a'));
    await expect(queue.enqueue(responses('b'))).rejects.toMatchObject({ name: 'QueueFull' });
  });

  // Only the body was counted: a small request whose routing headers (x-customer-id, x-job-id,
  // x-user-id: up to 1,000 characters each) and job record held 60 times what was
  // counted, so a caller sending such requests while they are queued (a time-to-answer no route
  // meets) took the process far past its limit: 50,000 of them held 160 MB, counted as 2.7 MB.
  it('small requests with long routing headers: what the queue holds in memory stays within its limit', async () => {
    setFlagsFromString('--expose-gc');
    const gc = runInNewContext('gc') as () => void;
    const maxBytes = 2 * 1024 * 1024;
    const queue = new MemoryColdQueue({ maxBytes });
    const small = (): ColdPayload => {
      const long = () => randomBytes(500).toString('hex'); // 1,000 characters, a new string each
      return { ...payload(long()), userId: long(), jobId: long(), customerId: long() };
    };
    gc();
    const before = process.memoryUsage().heapUsed;
    let held = 0;
    for (; held < 100_000; held++) {
      const refused = await queue.enqueue(small()).then(
        () => null,
        (error: Error) => error,
      );
      if (refused) {
        expect(refused).toMatchObject({ name: 'QueueFull' });
        break;
      }
    }
    gc();
    const grown = process.memoryUsage().heapUsed - before;
    expect(held * JSON.stringify(small()).length).toBeLessThanOrEqual(maxBytes); // each counted at least as its JSON
    expect(grown).toBeLessThanOrEqual(maxBytes);
  });
});

describe('the Redis queue near its maxmemory', () => {
  // Redis's memory was read again once the last read was a second old by the wall clock: set back
  // an hour (an NTP step, a virtual machine resumed), the last figure was kept for that hour, with
  // every job added since counted on it, so the Cold tier refused all work with Redis empty.
  it.skipIf(!hasRedisServer)("refused as full, it takes jobs again once Redis has room, the machine's clock set back or not", async () => {
    const own = await new OwnRedis(['--appendonly', 'no', '--maxmemory', '16mb', '--maxmemory-policy', 'noeviction']).start();
    onTestFinished(() => own.end());
    const queue = new BullColdQueue({ host: '127.0.0.1', port: own.port }, 'clock');
    onTestFinished(() => queue.close());
    const big = (key: string) => {
      const p = payload(key);
      (p.body.messages as Array<{ content: string }>)[0].content = 'x'.repeat(215 * 1024);
      return p;
    };
    const added: string[] = [];
    const refusal = async (key: string) => {
      try {
        added.push((await queue.enqueue(big(key))).jobId);
        return null;
      } catch (error) {
        if ((error as Error).name === 'QueueFull') return error;
        throw error;
      }
    };
    let refused: unknown = null;
    for (let i = 0; !refused && i < 200; i++) refused = await refusal(`full-${i}`);
    expect(refused).toMatchObject({ name: 'QueueFull' });
    const wall = Date.now.bind(Date);
    vi.spyOn(Date, 'now').mockImplementation(() => wall() - 3_600_000);
    onTestFinished(() => void vi.restoreAllMocks());
    for (const id of added.splice(0)) await queue.queue.remove(id); // room again
    let n = 0;
    await expect.poll(() => refusal(`again-${n++}`), { timeout: 10_000, interval: 200 }).toBeNull();
  });
});

describe('the in-process queue and the wall clock', () => {
  // Its jobs fell due by the wall clock: set back an hour (an NTP step, a virtual machine resumed)
  // while a job waited for its retry, the job waited that hour too.
  it("a job's retry falls due after its backoff, the machine's clock set back an hour or not", async () => {
    const queue = new MemoryColdQueue({ backoffMs: 50 });
    const wall = Date.now.bind(Date);
    onTestFinished(() => void vi.restoreAllMocks());
    let runs = 0;
    const onFailed = () => void vi.spyOn(Date, 'now').mockImplementation(() => wall() - 3_600_000); // once the retry is set
    const processor = async () => {
      if (++runs === 1) throw new Error('every route failed');
      return 'answered';
    };
    cleanup.push(queue.work(processor, { onFailed }).close);
    const { jobId } = await queue.enqueue(payload('clock'));
    await expect.poll(async () => (await queue.get(jobId))?.state, { timeout: 5000 }).toBe('completed');
    expect(runs).toBe(2);
  });
});

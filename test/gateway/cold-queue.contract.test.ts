// One contract, two implementations of the Cold queue: BullMQ in the real Redis (db 9, a prefix of
// its own per test, removed afterwards) run by BullMQ's Worker, and the in-process queue run by its
// own worker. Every case runs against both, through the ColdQueue interface, with the same processor:
// what a client polling GET /v1/jobs/:id or an operator reading /health sees must not depend on
// whether the gateway has Redis.
import { UnrecoverableError, Worker } from 'bullmq';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { BullColdQueue, JOB_NAME, MemoryColdQueue, QUEUE_NAME, type ColdPayload, type ColdQueue } from '../../gateway/src/cold-queue';

const connection = { host: '127.0.0.1', port: 6379, db: 9 };
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

type Processor = (payload: ColdPayload) => Promise<unknown>;
interface Twin {
  queue: ColdQueue;
  /** Starts a worker with `processor`; closed after the test. */
  work(processor: Processor): { close(): Promise<void> };
}

const twins: Record<string, (backoffMs: number) => Twin> = {
  'BullMQ (Redis)': (backoffMs) => {
    const prefix = `test-cq-${process.pid}-${++n}`;
    const queue = new BullColdQueue(connection, prefix, { backoffMs });
    cleanup.push(() => queue.close());
    return {
      queue,
      work(processor) {
        // As startBullWorker runs it, with the test's processor in place of the routing.
        const worker = new Worker<ColdPayload>(QUEUE_NAME, (job) => processor(job.data), {
          connection,
          prefix,
          concurrency: 4,
          name: JOB_NAME,
        });
        const handle = { close: () => worker.close() };
        cleanup.push(handle.close);
        return handle;
      },
    };
  },
  'in process': (backoffMs) => {
    const queue = new MemoryColdQueue({ backoffMs });
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

describe.each(Object.keys(twins))('Cold queue contract: %s', (name) => {
  const make = (backoffMs = 20) => twins[name](backoffMs);

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
});

// `npm run ops -- dlq move --all` on a store that answers, only slowly (a narrow link, a Redis far
// away): the commands' 5 s wait is for a store that answers nothing, not for one still sending.
// The move read every dead-lettered job whole (request bodies of up to 20 MB) in one answer, to
// take their ids: past 5 s of it, it said the store did not answer and moved nothing, every time;
// `dlq list` read them so too.
import { UnrecoverableError } from 'bullmq';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BullColdQueue } from '../../gateway/src/cold-queue-redis';
import type { ColdPayload } from '../../gateway/src/cold-queue';
import { ops } from '../../gateway/src/ops';
import { TEST_REDIS_DB, TEST_REDIS_URL } from '../redis-db';
import { RedisProxy } from '../redis-proxy';

const prefix = `test-ops-slow-${process.pid}`;
const JOBS = 30;
/** Each job's request: a long conversation, as dead-lettered jobs hold them. */
const TEXT = 'x'.repeat(200_000);
const redis = new Redis(TEST_REDIS_URL, { maxRetriesPerRequest: null });
let proxy: RedisProxy;

const payload = (n: number): ColdPayload => ({
  body: { model: 'gpt-4o-mini', messages: [{ role: 'user', content: `${n} ${TEXT}` }] },
  idempotencyKey: `slow-${n}`,
  userId: 'u1',
  jobId: `client-slow-${n}`,
  customerId: 'acme',
  jobType: 'summary',
  reason: 'all_failed',
  reviewRequired: false,
  enqueuedAt: '2026-11-23T10:00:00.000Z',
});

beforeAll(async () => {
  const queue = new BullColdQueue(redis, prefix);
  for (let n = 0; n < JOBS; n++) await queue.enqueue(payload(n));
  let dead = 0;
  const done = new Promise<void>((resolve) => {
    const worker = queue.work(
      async () => {
        throw new UnrecoverableError('provider refused');
      },
      {
        onFailed: () => {
          if (++dead === JOBS) void worker.close().then(() => resolve());
        },
      },
    );
  });
  await done;
  await queue.close();
  proxy = await new RedisProxy().start();
  proxy.bytesPerS = 1_000_000; // the jobs, some 6 MB, take 6 s to come through whole
}, 60_000);

afterAll(async () => {
  await proxy.stop();
  const keys = await redis.keys(`${prefix}:*`);
  if (keys.length) await redis.del(...keys);
  redis.disconnect();
});

/** `npm run ops -- <args>` through the slow link. */
async function run(args: string[]) {
  const out: string[] = [];
  const err: string[] = [];
  const code = await ops(
    args,
    { QUEUE_STORE_URL: proxy.url(TEST_REDIS_DB), REDIS_PREFIX: prefix },
    (l) => out.push(l),
    (l) => err.push(l),
  );
  return { code, out, err };
}

describe('npm run ops on a slow store', () => {
  it('dlq list lists every dead-lettered job, however long reading them all would take', async () => {
    const r = await run(['dlq', 'list']);
    expect([r.code, r.err]).toEqual([0, []]);
    expect(r.out).toHaveLength(JOBS + 1);
    expect(r.out.at(-1)).toBe(`${JOBS} dead-lettered job(s)`);
    expect(r.out[0]).toMatch(/^llm-[0-9a-f]{40} {2}tenant=acme {2}attempts=1 .* last error: provider refused$/);
  }, 60_000);

  it('dlq move --all moves every dead-lettered job back, however long reading them all would take', async () => {
    const r = await run(['dlq', 'move', '--all']);
    expect([r.code, r.out, r.err]).toEqual([0, [`moved ${JOBS} job(s) back to the queue`], []]);
    expect(await redis.zcard(`${prefix}:ai-tasks:failed`)).toBe(0);
  }, 60_000);
});

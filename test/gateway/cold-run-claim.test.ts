// A Cold job's run claim (cold-run-claim.ts) in the real Redis, keys under a prefix of this process.
import { Redis } from 'ioredis';
import { expect, it } from 'vitest';
import { CallMarks } from '../../gateway/src/cold-call-marks';
import { RunClaims } from '../../gateway/src/cold-run-claim';
import { TEST_REDIS_DB } from '../redis-db';
import { redisUnderPrefix } from '../redis-prefix';
import { RedisProxy } from '../redis-proxy';

const db = redisUnderPrefix('cold-run-claim');

/** Polls until the claim of this job is gone from Redis (its time ran out). */
async function lapsed(jobId: string): Promise<void> {
  while ((await db.redis.exists(`${db.prefix}:run:${jobId}`)) === 1) await new Promise((r) => setTimeout(r, 10));
}

it('a run that outlasts its claim (Redis away longer than that) keeps its answer: the run taking the job back is given it and calls nothing', async () => {
  const claims = new RunClaims(db.redis, db.prefix, 50);
  expect(await claims.take('job-1', 'first')).toEqual({ kind: 'mine' });
  await lapsed('job-1'); // the first run's call goes on while its claim runs out
  await claims.finish('job-1', 'first', { body: 'first answer' });
  // before: {kind: 'mine'}, the second run called the provider again
  expect(await claims.take('job-1', 'second')).toEqual({ kind: 'done', result: { body: 'first answer' } });
});

it('a run that outlasts its claim does not overwrite the claim another run took meanwhile', async () => {
  const claims = new RunClaims(db.redis, db.prefix, 50);
  await claims.take('job-2', 'first');
  await lapsed('job-2');
  expect(await claims.take('job-2', 'second')).toEqual({ kind: 'mine' });
  await claims.finish('job-2', 'first', { body: 'first answer' });
  expect(await claims.take('job-2', 'third')).toEqual({ kind: 'busy' });
  expect(await db.redis.pttl(`${db.prefix}:run:job-2`)).toBeGreaterThan(0);
});

it("a killed run's call marks: two runs taking them at the same moment get them once between them", async () => {
  const marks = new CallMarks(db.redis, db.prefix);
  const killed = marks.of('job-3');
  const call = { route: 'hot-1', provider: 'openai', model: 'gpt-4o-mini', inputTokens: 12, at: Date.now() };
  await killed.begin(call);
  await killed.begin({ ...call, route: 'warm-1' });
  const taken = await Promise.all([marks.of('job-3').takeAbandoned(), marks.of('job-3').takeAbandoned()]);
  expect(
    taken
      .flat()
      .map((c) => c.route)
      .sort(),
  ).toEqual(['hot-1', 'warm-1']);
  expect(taken.some((t) => t.length === 0)).toBe(true);
});

it("a call's mark goes once its meter event is durable, and a run's marks are settled before its claim is freed", async () => {
  const run = new CallMarks(db.redis, db.prefix).of('job-4');
  const mark = await run.begin({ route: 'hot-1', provider: 'openai', model: 'gpt-4o-mini', inputTokens: 12, at: Date.now() });
  let written!: () => void;
  run.end(mark, new Promise<void>((r) => (written = r)));
  expect(await db.redis.hlen(`${db.prefix}:calls:job-4`)).toBe(1); // the event not yet on disk: still marked
  written();
  await run.settled();
  expect(await db.redis.exists(`${db.prefix}:calls:job-4`)).toBe(0);
});

it("a take whose answer was lost with its connection, sent again on the next (ioredis does), is still the run's: the job runs, not deferred until its own claim lapses", async () => {
  const proxy = await new RedisProxy().start();
  const redis = new Redis(proxy.url(TEST_REDIS_DB), { maxRetriesPerRequest: null }); // as the worker's connection
  try {
    const claims = new RunClaims(redis, db.prefix, 150_000);
    await redis.ping();
    proxy.loseNextReply();
    // before: busy, and the job waited 150 s for a claim that was its own
    expect(await claims.take('job-5', 'run')).toEqual({ kind: 'mine' });
    expect(await claims.take('job-5', 'another run')).toEqual({ kind: 'busy' });
  } finally {
    redis.disconnect();
    await proxy.stop();
  }
});

it("a take of a killed run's marks whose answer was lost with its connection, sent again on the next (ioredis does), still gets them: those calls are metered", async () => {
  const killed = new CallMarks(db.redis, db.prefix).of('job-6');
  await killed.begin({ route: 'hot-1', provider: 'openai', model: 'gpt-4o-mini', inputTokens: 12, at: Date.now() });
  const proxy = await new RedisProxy().start();
  const redis = new Redis(proxy.url(TEST_REDIS_DB), { maxRetriesPerRequest: null }); // as the worker's connection
  try {
    await redis.ping();
    proxy.loseNextReply();
    // before: none, the marks gone with the first take, and the killed run's call never metered
    expect((await new CallMarks(redis, db.prefix).of('job-6').takeAbandoned()).map((c) => c.route)).toEqual(['hot-1']);
    expect(await new CallMarks(db.redis, db.prefix).of('job-6').takeAbandoned()).toEqual([]); // another run: taken already
  } finally {
    redis.disconnect();
    await proxy.stop();
  }
});

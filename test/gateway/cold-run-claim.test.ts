// A Cold job's run claim (cold-run-claim.ts) in the real Redis, keys under a prefix of this process.
import { expect, it } from 'vitest';
import { RunClaims } from '../../gateway/src/cold-run-claim';
import { redisUnderPrefix } from '../redis-prefix';

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

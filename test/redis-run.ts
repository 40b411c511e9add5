// Vitest's global setup: claims a Redis database for this run (databases 1-15, the first whose
// claim key this run sets and that holds nothing else, or only what an aborted run left), hands it
// to the tests in TEST_REDIS_DB (test/redis-db.ts), and empties it when the run ends. Two runs on
// one machine (two checkouts, CI beside a developer) thus never share a key, and data that is not a
// test run's is never touched. No Redis: the tests that need one say so.
import { Redis } from 'ioredis';

const CLAIM = 'test-run:claim';
/** Left in a database a run used: what an aborted run left there (its claim expired) may be emptied. */
const OWNED = 'test-run:owned';
const CLAIM_SECONDS = 2 * 3600;

async function claim(): Promise<number | null> {
  for (let db = 1; db <= 15; db++) {
    const redis = new Redis({ host: '127.0.0.1', port: 6379, db, lazyConnect: true, maxRetriesPerRequest: 1 });
    try {
      await redis.connect();
      if ((await redis.set(CLAIM, `${process.pid}`, 'EX', CLAIM_SECONDS, 'NX')) !== 'OK') continue;
      if ((await redis.dbsize()) > 1 && !(await redis.exists(OWNED))) {
        await redis.del(CLAIM); // someone's data: not ours to use or empty
        continue;
      }
      await redis.multi().flushdb().set(CLAIM, `${process.pid}`, 'EX', CLAIM_SECONDS).set(OWNED, '1').exec();
      return db;
    } catch {
      return null;
    } finally {
      redis.disconnect();
    }
  }
  throw new Error('no empty Redis database among 1-15 for this test run: empty one (FLUSHDB) or end the runs holding them');
}

export default async function setup(): Promise<() => Promise<void>> {
  const db = await claim();
  if (db === null) return async () => {};
  process.env.TEST_REDIS_DB = String(db);
  return async () => {
    const redis = new Redis({ host: '127.0.0.1', port: 6379, db });
    await redis.flushdb();
    redis.disconnect();
  };
}

// The commands (`npm run ops`, `npm run keys`, `npm start`, `npm run worker`) against a QUEUE_STORE_URL
// naming a database the store does not have: a Redis of the test's own with two databases, so that
// nothing lands in a shared one.
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { keysCli } from '../../gateway/src/keys-cli';
import { ops } from '../../gateway/src/ops';
import { OwnRedis } from '../own-redis';
import { hasRedisServer } from '../redis-db';

let redis: OwnRedis;
beforeEach(async () => {
  if (hasRedisServer) redis = await new OwnRedis(['--databases', '2']).start();
});
afterEach(async () => redis?.end());

/** Every key in the store's database 0, where ioredis went on when its SELECT was refused. */
async function keysInDatabaseZero(): Promise<string[]> {
  const c = new Redis(redis.url);
  try {
    return await c.keys('*');
  } finally {
    c.disconnect();
  }
}

describe.skipIf(!hasRedisServer)('a one-off command on a database the store does not have', () => {
  it('ops pause and keys create say the database was refused, exit 1, and write nothing to database 0', async () => {
    const env = { QUEUE_STORE_URL: `redis://127.0.0.1:${redis.port}/5` };
    const err: string[] = [];
    const done = (line: string) => expect.fail(`a result where none is expected: ${line}`);
    expect(await ops(['pause'], env, done, (l) => err.push(l))).toBe(1);
    expect(await keysCli(['create', 'acme'], env, done, (l) => err.push(l))).toBe(1);
    expect(err).toEqual([
      'QUEUE_STORE_URL names database 5, which the store refused: ERR DB index is out of range',
      'key store: QUEUE_STORE_URL names database 5, which the store refused: ERR DB index is out of range',
    ]);
    expect(await keysInDatabaseZero()).toEqual([]);
  });
});

const root = join(import.meta.dirname, '..', '..');

// They said "Redis unreachable", then "reachable again", and ran on in database 0 until stopped.
describe.skipIf(!hasRedisServer)('npm start and npm run worker on a database the store does not have', () => {
  for (const [file, what] of [
    ['main.js', 'gateway'],
    ['worker.js', 'worker'],
  ]) {
    it(`the ${what} ends, exit 1, naming QUEUE_STORE_URL and the database`, () => {
      const r = spawnSync(process.execPath, [join(root, 'gateway/dist', file)], {
        cwd: root,
        env: { PATH: process.env.PATH, PORT: '0', LOG_LEVEL: 'silent', QUEUE_STORE_URL: `redis://127.0.0.1:${redis.port}/5` },
        encoding: 'utf8',
        timeout: 8_000, // a process that ran on ends the test (exit 0 on the SIGTERM) rather than hangs it
      });
      expect([r.status, r.stderr]).toEqual([
        1,
        `${what} did not start:\nQUEUE_STORE_URL names database 5, which the store refused: ERR DB index is out of range\n`,
      ]);
    });
  }
});

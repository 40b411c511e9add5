// `npm run keys` and `npm run ops` when the link to Redis dies mid-command without a word (a host
// lost, a failover behind the same address): the store answered the connect's ping, then nothing.
// The command waited for ever; it now says the store did not answer, exit 1, within seconds.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { keysCli } from '../../gateway/src/keys-cli';
import { ops } from '../../gateway/src/ops';
import { TEST_REDIS_DB } from '../redis-db';
import { RedisProxy } from '../redis-proxy';

const prefix = `test-command-stall-${process.pid}`;
let proxy: RedisProxy;
beforeEach(async () => {
  proxy = await new RedisProxy().start();
});
afterEach(() => proxy.stop());

/** The command's exit code, what it wrote, and how long it took; it is not waited for past 20 s. */
async function timed(command: typeof ops, args: string[]) {
  const out: string[] = [];
  const err: string[] = [];
  const env = { QUEUE_STORE_URL: proxy.url(TEST_REDIS_DB), REDIS_PREFIX: prefix };
  const started = performance.now();
  const ran = command(
    args,
    env,
    (l) => out.push(l),
    (l) => err.push(l),
  );
  let timer: NodeJS.Timeout | undefined;
  const waited = new Promise<'still waiting'>((r) => (timer = setTimeout(() => r('still waiting'), 20_000)));
  const code = await Promise.race([ran, waited]).finally(() => clearTimeout(timer));
  return { code, out, err: err.join('\n'), ms: performance.now() - started };
}

describe('a one-off command whose store stops answering mid-command', () => {
  it('keys list: exit 1 within seconds, naming the store; nothing on stdout', async () => {
    proxy.cutOn('hvals');
    const r = await timed(keysCli, ['list']);
    expect([r.code, r.out]).toEqual([1, []]);
    expect(r.err).toMatch(/^key store: the store at QUEUE_STORE_URL did not answer within 5 s/);
    expect(r.ms).toBeLessThan(15_000);
  }, 30_000);

  it('ops pause: exit 1 within seconds, naming the command and the store; nothing on stdout', async () => {
    proxy.cutOn('pause_ai_tasks');
    const r = await timed(ops, ['pause']);
    expect([r.code, r.out]).toEqual([1, []]);
    expect(r.err).toMatch(/^pause failed: the store at QUEUE_STORE_URL did not answer within 5 s/);
    expect(r.ms).toBeLessThan(15_000);
  }, 30_000);

  // A store that takes the connection and answers nothing (rediss:// to a plain Redis, a wrong port):
  // the command's own wait is ioredis's, whose "Command timed out" names neither the store nor the wait.
  it('a store that never answers, from the first command: the wait is named, exit 1', async () => {
    proxy.cutOn('');
    const r = await timed(ops, ['status']);
    expect([r.code, r.out]).toEqual([1, []]);
    expect(r.err).toBe('the store at QUEUE_STORE_URL did not answer: no answer within 5 s');
  }, 30_000);
});

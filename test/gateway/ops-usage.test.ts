// npm run ops: what was typed is checked before the store is asked, so a typo is a usage error (exit 2) whatever the store does.
// Errors go to stderr, never stdout: a script that reads the output gets only results.
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { BullColdQueue } from '../../gateway/src/cold-queue-redis';
import { ops } from '../../gateway/src/ops';
import { Redis } from 'ioredis';
import { TEST_REDIS_DB, TEST_REDIS_URL } from '../redis-db';
import { RedisProxy } from '../redis-proxy';
import { redisUnderPrefix } from '../redis-prefix';

const USAGE = 'usage: npm run ops -- status | pause | resume | dlq list | dlq move <id>|--all | job <id>';
/** A store that is not there: a command that reached it would answer 1, "did not answer". */
const away = { QUEUE_STORE_URL: 'redis://127.0.0.1:1/0' };
const root = join(import.meta.dirname, '..', '..');
/** Every key the commands write goes under this prefix, removed after each test (the queue's metadata too). */
const db = redisUnderPrefix('ops');

/** Results where none is expected. */
const fail = (line: string) => expect.fail(`npm run ops wrote a result: ${line}`);

/** `npm run ops` as it runs: the built gateway/dist/ops.js. */
const run = (args: string[], env: NodeJS.ProcessEnv) =>
  spawnSync(process.execPath, [join(root, 'gateway/dist/ops.js'), ...args], { env: { PATH: process.env.PATH, ...env }, encoding: 'utf8' });

describe('npm run ops usage', () => {
  it('an unknown command, a missing id and extra arguments are usage errors naming what came, exit 2', async () => {
    for (const args of [
      ['stauts'],
      [],
      ['dlq'],
      ['dlq', 'move'],
      ['dlq', 'move', 'a', 'b'],
      ['dlq', 'move', '--al'],
      ['dlq', 'move', 'llm-abc'],
      ['pause', 'now'],
      ['dlq', 'list', 'x'],
      ['job'],
      ['job', 'x'],
    ]) {
      const lines: string[] = [];
      expect(
        await ops(
          args,
          away,
          () => {},
          (l) => lines.push(l),
        ),
        args.join(' '),
      ).toBe(2);
      expect(lines.at(-1)).toBe(USAGE);
      expect(lines.join('\n')).not.toContain('did not answer');
    }
  });

  // A QUEUE_STORE_URL that is no URL was reported as a store that "did not answer" (exit 1), and a
  // REDIS_PREFIX the gateways refuse was read as it came: an empty queue, where none could be.
  it('a QUEUE_STORE_URL or REDIS_PREFIX the gateways would refuse is named, exit 2, before any store is asked', async () => {
    for (const [env, named] of [
      [{ QUEUE_STORE_URL: 'localhost:6379' }, 'QUEUE_STORE_URL: expected an absolute redis or rediss URL'],
      [{ ...away, REDIS_PREFIX: 'bad prefix' }, 'REDIS_PREFIX: expected 1-64 letters, digits, . _ : -, got "bad prefix"'],
      // A database that is no number went to ioredis as SELECT NaN: a stack trace, after writing to database 0.
      [{ QUEUE_STORE_URL: 'redis://127.0.0.1:1/abc' }, 'QUEUE_STORE_URL: expected the database as a number after the port'],
    ] as const) {
      const lines: string[] = [];
      expect(await ops(['status'], env, fail, (l) => lines.push(l)), named).toBe(2);
      expect(lines.join('\n')).toContain(named);
      expect(lines.join('\n')).not.toContain('did not answer');
    }
  });

  it('errors go to stderr with a non-zero exit, results to stdout: usage 2, no store 2, the store away 1, a job it cannot move 1', async () => {
    const typo = run(['stauts'], away);
    expect([typo.status, typo.stdout, typo.stderr]).toEqual([2, '', `unknown command "stauts"\n${USAGE}\n`]);
    const unset = run(['status'], {});
    expect([unset.status, unset.stdout]).toEqual([2, '']);
    expect(unset.stderr).toMatch(/^QUEUE_STORE_URL is not set/);
    const down = run(['status'], away);
    expect([down.status, down.stdout]).toEqual([1, '']);
    expect(down.stderr).toMatch(/^the store at QUEUE_STORE_URL did not answer: /);
    const prefix = `${db.prefix}:move`;
    const unknown = `llm-${'0'.repeat(40)}`;
    const moved = run(['dlq', 'move', unknown], { QUEUE_STORE_URL: TEST_REDIS_URL, REDIS_PREFIX: prefix });
    expect([moved.status, moved.stdout, moved.stderr]).toEqual([
      1,
      'moved 0 job(s) back to the queue\n',
      `${unknown}: not a dead-lettered job (npm run ops -- dlq list shows them)\n`,
    ]);
  }, 20_000);

  // A human-review notice sent the person on call to GET /v1/jobs/<id>, which answers only the job's
  // tenant: with client keys (production's default) no operator could read the jobs it named.
  it("job <id> shows any tenant's job to the operator: state, tenant, why it was queued; an unknown one exit 1", async () => {
    const prefix = `${db.prefix}:job`;
    const queue = new BullColdQueue({ host: '127.0.0.1', port: 6379, db: Number(new URL(TEST_REDIS_URL).pathname.slice(1)) }, prefix);
    const { jobId } = await queue.enqueue({
      body: { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'a refund over the cap' }] },
      idempotencyKey: 'review-me',
      userId: '',
      jobId: '',
      customerId: 'acme',
      jobType: '',
      reason: 'human_review',
      reviewRequired: true,
      enqueuedAt: '2026-11-29T00:00:00.000Z',
    });
    await queue.close();
    const env = { QUEUE_STORE_URL: TEST_REDIS_URL, REDIS_PREFIX: prefix };
    const shown = run(['job', jobId], env);
    expect([shown.status, shown.stderr]).toEqual([0, '']);
    expect(shown.stdout).toBe(
      `${jobId}  waiting  tenant=acme  reason=human_review  attempts=0/5  enqueued=2026-11-29T00:00:00.000Z  finished=-\n`,
    );
    const unknown = `llm-${'0'.repeat(40)}`;
    const missing = run(['job', unknown], env);
    expect([missing.status, missing.stdout, missing.stderr]).toEqual([
      1,
      '',
      `${unknown}: no such job (answered jobs are kept 7 days, dead-lettered ones 30)\n`,
    ]);
  }, 20_000);

  // `npm run ops` builds the gateway first, and the build's line went to stdout ahead of the results.
  it('npm run -s ops writes only its results to stdout, the build before it included', () => {
    const env = { PATH: process.env.PATH, QUEUE_STORE_URL: TEST_REDIS_URL, REDIS_PREFIX: `${db.prefix}:npm` };
    const status = spawnSync('npm', ['run', '-s', 'ops', '--', 'status'], { cwd: root, env, encoding: 'utf8' });
    expect(status.status).toBe(0);
    expect(status.stdout.split('\n')).toEqual([
      expect.stringMatching(/^paused: /),
      'queue ai-tasks: waiting 0, delayed 0, active 0, completed 0, failed 0, dead_lettered 0',
      '',
    ]);
  }, 30_000);

  it('an error the store answers mid-command is one line on stderr naming the command, exit 1, not a stack trace', async () => {
    const prefix = `${db.prefix}:broken`;
    await db.redis.set(`${prefix}:ai-tasks:failed`, 'not a job list'); // a key of another type: Redis answers WRONGTYPE
    for (const args of [['status'], ['dlq', 'list']]) {
      const broken = run(args, { QUEUE_STORE_URL: TEST_REDIS_URL, REDIS_PREFIX: prefix });
      expect([broken.status, broken.stdout], args.join(' ')).toEqual([1, '']);
      expect(broken.stderr).toMatch(new RegExp(`^${args.join(' ')} failed: the store at QUEUE_STORE_URL answered an error: [^\\n]+\\n$`));
    }
  }, 20_000);

  // "resumed" on a store that was not paused (a QUEUE_STORE_URL naming another database than the
  // gateways') left the operator sure the paused deployment ran again; a second pause said "paused".
  it('pause and resume say whether they changed anything; each is safe to repeat, exit 0', async () => {
    const env = { QUEUE_STORE_URL: TEST_REDIS_URL, REDIS_PREFIX: `${db.prefix}:pause` };
    const said = async (command: string) => {
      const lines: string[] = [];
      expect(await ops([command], env, (l) => lines.push(l), fail)).toBe(0);
      return lines;
    };
    const redis = new Redis(TEST_REDIS_URL);
    try {
      await redis.del('pause_ai_tasks');
      expect(await said('resume')).toEqual(['not paused: nothing to resume (pause_ai_tasks was not set in the store at QUEUE_STORE_URL)']);
      const after =
        'queued jobs wait, no attempt spent, until resume (a job still waiting after 24 h is dead-lettered); running jobs finish; no notification is sent';
      expect(await said('pause')).toEqual([`paused: ${after}`]);
      expect(await said('pause')).toEqual([`already paused: ${after}`]);
      expect(await redis.get('pause_ai_tasks')).toBe('1');
      expect(await said('resume')).toEqual(['resumed']);
      expect(await redis.get('pause_ai_tasks')).toBeNull();
    } finally {
      await redis.del('pause_ai_tasks', 'pause_ai_tasks:mark', 'pause_ai_tasks:set');
      redis.disconnect();
    }
  });

  // resume read the flag, then cleared it: a pause set in between (another instance's budget pause, or
  // the gateways putting back one Redis lost) was lifted, and resume said nothing had been paused.
  it('resume says resumed when it lifts a pause set just before its clear', async () => {
    const proxy = await new RedisProxy().start();
    const redis = new Redis(TEST_REDIS_URL);
    try {
      await redis.del('pause_ai_tasks');
      // The clear, held until another instance has paused.
      proxy.holdUntil(
        (chunk) => chunk.includes('\r\neval') && chunk.includes('pause_ai_tasks:mark'),
        () => redis.set('pause_ai_tasks', '1'),
      );
      const lines: string[] = [];
      const env = { QUEUE_STORE_URL: proxy.url(TEST_REDIS_DB), REDIS_PREFIX: `${db.prefix}:pause` };
      expect(await ops(['resume'], env, (l) => lines.push(l), fail)).toBe(0);
      expect(await redis.get('pause_ai_tasks')).toBeNull();
      expect(lines).toEqual(['resumed']);
    } finally {
      await redis.del('pause_ai_tasks', 'pause_ai_tasks:mark', 'pause_ai_tasks:set');
      redis.disconnect();
      await proxy.stop();
    }
  });
});

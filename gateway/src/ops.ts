/**
 * `npm run ops -- <command>`: the runbook's operator commands, against the store at
 * QUEUE_STORE_URL (the same Redis the gateways and workers use).
 *   status                 pause flag and queue counts
 *   pause | resume         set or clear `pause_ai_tasks`
 *   dlq list               dead-lettered jobs (all attempts used)
 *   dlq move <id>|--all    move dead-lettered jobs back to the queue with fresh attempts
 *   job <id>               one job, of any tenant: its state, tenant, why it was queued, its attempts
 */
import type { Redis } from 'ioredis';
import { RedisPause } from './budget';
import { COLD_JOB_ID } from './cold-queue';
import { BullColdQueue } from './cold-queue-redis';
import { commandStore, NO_ANSWER, timedOut } from './command-store';
import { readEnv, type GatewayEnv } from './env';
import { asksForHelp } from './help';

/** A control character as JSON writes one (`\n`, `\u001b`); JSON leaves DEL and C1 as they are. */
const escaped = (c: string) => (c < ' ' ? JSON.stringify(c).slice(1, -1) : `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);

/**
 * Text from callers or providers (a provider's error often echoes the request) with its control
 * characters escaped: nothing in it moves the operator's cursor, clears the screen or starts a line
 * that reads as another job.
 */
const shown = (text: string | null) => String(text).replace(/\p{Cc}/gu, escaped);

const USAGE = 'usage: npm run ops -- status | pause | resume | dlq list | dlq move <id>|--all | job <id>';
const WHERE = "acts on the Redis at QUEUE_STORE_URL, the gateways' store: docs/operations.md#runbook-commands";

/** What is wrong with the arguments, or null: checked before the store is asked, so a typo never reaches it. */
function usageProblem(args: string[]): string | null {
  const [command, sub, ...rest] = args;
  if (command === 'status' || command === 'pause' || command === 'resume')
    return sub === undefined ? null : `${command}: expected no arguments, got "${args.slice(1).join(' ')}"`;
  if (command === 'job')
    return COLD_JOB_ID.test(sub ?? '') && !rest.length
      ? null
      : `job: expected one job id (llm- and 40 hex digits), got ${sub === undefined ? 'nothing' : `"${shown(args.slice(1).join(' '))}"`}`;
  if (command !== 'dlq') return command === undefined ? 'command: expected one' : `unknown command "${command}"`;
  if (sub === 'list') return rest.length ? `dlq list: expected no arguments, got "${rest.join(' ')}"` : null;
  // A job id as `job` takes it: `--al` (a typo of --all) went to the store as an id, and came back "not a dead-lettered job".
  if (sub === 'move')
    return rest.length === 1 && (rest[0] === '--all' || COLD_JOB_ID.test(rest[0]))
      ? null
      : `dlq move: expected one job id (llm- and 40 hex digits) or --all, got ${rest.length ? `"${shown(rest.join(' '))}"` : 'nothing'}`;
  return `dlq: expected list or move, got ${sub === undefined ? 'nothing' : `"${sub}"`}`;
}

/**
 * Runs one command. Results go to `out` (stdout), errors to `err` (stderr): a script that reads the
 * output never takes an error for data. Exit code: 0 done (or `--help`, which asks nothing of the store), 1 failed, 2 usage.
 */
export async function ops(
  args: string[],
  env: NodeJS.ProcessEnv,
  out: (line: string) => void,
  err: (line: string) => void,
): Promise<number> {
  if (asksForHelp(args)) {
    out(`${USAGE}\n${WHERE}`);
    return 0;
  }
  const problem = usageProblem(args);
  if (problem) {
    err(problem);
    err(USAGE);
    return 2;
  }
  const store = await openStore(env, err);
  if (typeof store === 'number') return store;
  const { settings, redis } = store;
  const pause = new RedisPause(redis, 60_000);
  const queue = new BullColdQueue(redis, settings.REDIS_PREFIX);
  try {
    return await runCommand(args, pause, queue, out, err);
  } catch (error) {
    // An error Redis answers mid-command (a key of another type, memory full, a lost connection), or
    // no answer within the command's wait: one line naming the command, not Node's stack trace.
    const answer = String((error as Error).message).split('\n')[0];
    err(`${args.join(' ')} failed: ${timedOut(error) ? NO_ANSWER : `the store at QUEUE_STORE_URL answered an error: ${answer}`}`);
    return 1;
  } finally {
    pause.close();
    await queue.close();
    redis.disconnect();
  }
}

/** The settings and the store the gateways use, or the exit code when there is none to act on (said on `err`). */
async function openStore(env: NodeJS.ProcessEnv, err: (line: string) => void): Promise<{ settings: GatewayEnv; redis: Redis } | number> {
  if (!env.QUEUE_STORE_URL) {
    err('QUEUE_STORE_URL is not set: operator commands act on the Redis the gateways use');
    return 2;
  }
  // Read as the gateways read it: a URL that is none was reported as a store that did not answer,
  // and a prefix they refuse was read as it came (an empty queue, where no gateway could put one).
  let settings: GatewayEnv;
  try {
    settings = readEnv(env);
  } catch (error) {
    err((error as Error).message);
    return 2;
  }
  // A store that is away is said in one line within seconds, not waited for (and logged) for ever.
  let redis: Redis;
  try {
    redis = await commandStore(settings.QUEUE_STORE_URL!);
  } catch (error) {
    err((error as Error).message);
    return 1;
  }
  return { settings, redis };
}

/** One checked command against the store; its exit code. */
async function runCommand(
  args: string[],
  pause: RedisPause,
  queue: BullColdQueue,
  out: (line: string) => void,
  err: (line: string) => void,
): Promise<number> {
  const [command, sub, arg] = args;
  switch (command) {
    case 'status':
      return await status(pause, queue, out);
    // Each says whether it changed anything: "resumed" on a store that was not paused (another
    // database than the gateways') left the operator sure the paused deployment was running again.
    case 'pause': {
      const fresh = await pause.set();
      out(
        `${fresh ? 'paused' : 'already paused'}: queued jobs wait, no attempt spent, until resume (a job still waiting after 24 h is dead-lettered); running jobs finish; no notification is sent`,
      );
      return 0;
    }
    case 'resume': {
      // Told by the clear itself: a read before it missed a pause set in between (another instance's
      // budget pause, or one the gateways put back after Redis lost it), lifted and said "not paused".
      const was = await pause.clear();
      out(was ? 'resumed' : 'not paused: nothing to resume (pause_ai_tasks was not set in the store at QUEUE_STORE_URL)');
      return 0;
    }
    case 'job':
      return await showJob(queue, sub, out, err);
    case 'dlq': {
      if (sub === 'list') return await listDeadLettered(queue, out);
      if (sub === 'move' && arg) return await moveDeadLettered(queue, arg, out, err);
      break;
    }
  }
  err(USAGE);
  return 2;
}

async function status(pause: RedisPause, queue: BullColdQueue, out: (line: string) => void): Promise<number> {
  const counts = await queue.counts();
  out(`paused: ${(await pause.refresh()) ? 'yes (pause_ai_tasks = 1)' : 'no'}`);
  out(
    `queue ai-tasks: ${Object.entries(counts)
      .map(([k, v]) => `${k} ${v}`)
      .join(', ')}`,
  );
  return 0;
}

/**
 * One job as an operator reads it, whatever its tenant: GET /v1/jobs/:id answers only the tenant that
 * queued it, and a human-review notice sends the person on call to the jobs it names.
 */
async function showJob(queue: BullColdQueue, id: string, out: (line: string) => void, err: (line: string) => void): Promise<number> {
  const j = await queue.get(id);
  if (!j) {
    err(`${id}: no such job (answered jobs are kept 7 days, dead-lettered ones 30)`);
    return 1;
  }
  const deferred = j.deferred ? `  deferred until ${j.deferred.until}: ${shown(j.deferred.reason)}` : '';
  out(
    `${j.id}  ${j.state}  tenant=${shown(j.customerId || '-')}  reason=${j.reason}  attempts=${j.attempts}/${j.maxAttempts}  enqueued=${j.enqueuedAt}  finished=${j.finishedAt ?? '-'}${deferred}`,
  );
  if (j.lastError) out(`last error: ${shown(j.lastError)}`);
  return 0;
}

/** The most `dlq list` shows, the newest first. */
const LIST_MAX = 1000;

async function listDeadLettered(queue: BullColdQueue, out: (line: string) => void): Promise<number> {
  const jobs = await queue.deadLettered(LIST_MAX);
  for (const j of jobs)
    out(
      `${j.id}  tenant=${shown(j.customerId || '-')}  attempts=${j.attempts}  enqueued=${j.enqueuedAt}  last error: ${shown(j.lastError)}`,
    );
  // Past the list's limit the count is the queue's own: the list's length said 1000 of any number.
  const total = jobs.length < LIST_MAX ? jobs.length : (await queue.counts()).dead_lettered;
  out(total > jobs.length ? `${total} dead-lettered job(s), the newest ${jobs.length} shown` : `${jobs.length} dead-lettered job(s)`);
  return 0;
}

/** Moves one job (or `--all`) back with fresh attempts; 1 when one named was not dead-lettered. */
async function moveDeadLettered(
  queue: BullColdQueue,
  arg: string,
  out: (line: string) => void,
  err: (line: string) => void,
): Promise<number> {
  const ids = arg === '--all' ? await queue.deadLetteredIds(10_000) : [arg];
  let moved = 0;
  for (const id of ids) {
    if (await queue.retryDeadLettered(id)) moved++;
    else err(`${id}: not a dead-lettered job (npm run ops -- dlq list shows them)`);
  }
  out(`moved ${moved} job(s) back to the queue`);
  return moved === ids.length ? 0 : 1;
}

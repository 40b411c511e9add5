/**
 * The Redis a one-off command (`npm run ops`, `npm run keys`) acts on: connected and answering
 * within seconds, in the database QUEUE_STORE_URL names, or an error that names QUEUE_STORE_URL.
 * Without the ping, a store that is away was said only as ioredis's "Reached the max retries per
 * request limit", which names neither the store nor the setting.
 */
import { Redis } from 'ioredis';
import { NoAnswer, within } from './within';

const WAIT_MS = 5000;

export async function commandStore(url: string): Promise<Redis> {
  // commandTimeout: a link that dies without a word after the ping (a host lost, a failover behind the
  // same address) held the command for ever, with no word of what it waited for.
  const redis = new Redis(url, { maxRetriesPerRequest: 1, connectTimeout: WAIT_MS, commandTimeout: WAIT_MS });
  // The connection's own error (ECONNREFUSED, a wrong password) says why; the ping's says only that it gave up.
  let cause: Error | null = null;
  redis.on('error', (error: Error) => (cause = error));
  try {
    await within(redis.ping(), WAIT_MS, 'the store at QUEUE_STORE_URL');
  } catch (error) {
    redis.disconnect();
    const failure = cause ?? (error as Error);
    // No answer at all: the ping's own wait (commandTimeout) or ours, said as such.
    const why = timedOut(failure) || failure instanceof NoAnswer ? `no answer within ${WAIT_MS / 1000} s` : failure.message;
    throw new Error(`the store at QUEUE_STORE_URL did not answer: ${why}`, { cause: error });
  }
  await inDatabase(redis);
  return redis;
}

/**
 * Asks for the URL's database once more, now that the store answers. ioredis selects it on connect,
 * and when the store has no such database (`/99` on a store of 16) it says so only as an 'error'
 * event and sends every command on to database 0: a `pause` or a new key, reported as done, landed
 * in another deployment's database.
 */
async function inDatabase(redis: Redis): Promise<void> {
  const db = redis.options.db ?? 0;
  if (!db) return;
  try {
    await within(redis.select(db), WAIT_MS, 'the store at QUEUE_STORE_URL');
  } catch (error) {
    redis.disconnect();
    throw new Error(`QUEUE_STORE_URL names database ${db}, which the store refused: ${(error as Error).message}`, { cause: error });
  }
}

/** A command's error when the store gave no answer within the command's wait (commandTimeout). */
export const timedOut = (error: unknown): boolean => (error as Error | null)?.message === 'Command timed out';
/** How a command that the store left unanswered is said: ioredis's "Command timed out" names neither the store nor the wait. */
export const NO_ANSWER = `the store at QUEUE_STORE_URL did not answer within ${WAIT_MS / 1000} s`;

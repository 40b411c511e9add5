/**
 * The Redis a one-off command (`npm run ops`, `npm run keys`) acts on: connected and answering
 * within seconds, or an error that names QUEUE_STORE_URL. Without the ping, a store that is away
 * was said only as ioredis's "Reached the max retries per request limit", which names neither the
 * store nor the setting.
 */
import { Redis } from 'ioredis';
import { within } from './within';

const WAIT_MS = 5000;

export async function commandStore(url: string): Promise<Redis> {
  const redis = new Redis(url, { maxRetriesPerRequest: 1, connectTimeout: WAIT_MS });
  // The connection's own error (ECONNREFUSED, a wrong password) says why; the ping's says only that it gave up.
  let cause: Error | null = null;
  redis.on('error', (error: Error) => (cause = error));
  try {
    await within(redis.ping(), WAIT_MS, 'the store at QUEUE_STORE_URL');
    return redis;
  } catch (error) {
    redis.disconnect();
    const why = (cause ?? (error as Error)).message;
    throw new Error(`the store at QUEUE_STORE_URL did not answer: ${why}`, { cause: error });
  }
}

/**
 * Commands a request sends to Redis and waits for only briefly: a rate-limit check, an idempotency
 * claim, a client key's lookup, a response's owner. While Redis is away (down, restarting, never
 * reached, a host that drops packets) ioredis holds every command in memory until Redis is back,
 * however long that takes, and sends them all then; each request had long stopped waiting for its
 * own. An outage thus grew the process by every request it took: 2,000 requests left 4,015
 * commands held, an hour at 1,000 requests a second millions.
 *
 * Past MAX_HELD commands held on a connection that is not up (not yet sent, or sent on the link
 * lost and not answered), such a command is not sent: the caller gets NotSent at once and does what
 * it does when Redis does not answer in time (a limit fails open, a claim runs without replay, a
 * key not cached is refused 503, an owner check 503). A connection that is up sends it however many
 * are in flight: a slow Redis answers them (at 2,500 requests a second and a second a command,
 * 10,000 are in flight, and a revocation, a new key or a continued response must still get through),
 * and a link that died silently is given up after DEAD_LINK_MS (stores.ts), its commands counted
 * then. Reading the status, and while it is not up two lengths, is all it costs a request.
 */
import type { Redis } from 'ioredis';

export const MAX_HELD = 10_000;

/** Not sent: Redis has not answered the commands already held for it. */
export class NotSent extends Error {}

/** ioredis's queues: commands waiting for a connection, and commands sent and not answered. */
interface Queues {
  offlineQueue?: { length: number };
  commandQueue?: { length: number };
}

/** How many commands the connection holds (not sent yet, or not answered yet). */
function heldCommands(redis: Redis): number {
  const q = redis as unknown as Queues;
  return (q.offlineQueue?.length ?? 0) + (q.commandQueue?.length ?? 0);
}

/** True when a request's command may be sent: the connection is up, or holds fewer than MAX_HELD. */
export function maySend(redis: Redis): boolean {
  return redis.status === 'ready' || heldCommands(redis) < MAX_HELD;
}

/** Throws NotSent when the connection already holds MAX_HELD commands. */
export function mustSend(redis: Redis): void {
  if (!maySend(redis)) throw new NotSent(`Redis has not answered the ${MAX_HELD} commands held for it: not sent`);
}

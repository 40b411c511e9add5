/**
 * The shared state behind the gateway, chosen in one place: Redis when QUEUE_STORE_URL is set
 * (every instance sees the same flags, pause, queue and limits), else in-process stand-ins that
 * behave the same within one process (queued work then does not survive a restart).
 */
import { Redis } from 'ioredis';
import { MemoryPause, RedisPause, type PauseFlag } from './budget';
import type { KeyStore } from './client-keys';
import { FileKeyStore } from './client-keys-file';
import { RedisKeyStore } from './client-keys-redis';
import type { ColdQueue, QueueOptions } from './cold-queue';
import { MemoryColdQueue } from './cold-queue-memory';
import { BullColdQueue } from './cold-queue-redis';
import type { GatewayEnv } from './env';
import { ConfigError } from './errors';
import { LocalFlags, RedisFlags, type FlagStore } from './flags';
import { MemoryLimiter, RedisLimiter, type Limiter } from './rate-limit';
import { MemoryReplayStore, type ReplayStore } from './replay-store';
import { RedisReplayStore } from './replay-store-redis';
import { MemoryResponseOwners, RedisResponseOwners, type ResponseOwners } from './response-owners';
import type { RoutesMapConfig } from './routes-map';

/**
 * A connection whose commands get no byte back for this long is taken for dead and made again. A
 * link that dies without a reset (Redis's host lost, a failover behind the same address, a
 * firewall dropping the connection's state) otherwise looks open until the kernel gives up on it,
 * about 15 minutes: all that time new client keys and Cold requests got 503 and the worker took no
 * job, while Redis answered every other client. Above BullMQ's longest blocking read (10 s) on the
 * worker's connections, which inherit it; a slow Redis (a second or two a command) never reaches it.
 */
const DEAD_LINK_MS = 15_000;

/**
 * A write refused READONLY: the connection reached a primary that a failover has since demoted to a
 * replica (a managed Redis moves its address to the new primary; connections opened before stay on
 * the old one, healthy, refusing every write for as long as the process runs). The write fails as
 * before, and the connection is made again through the address (1), so the next ones reach the new
 * primary. Not resent: on a Redis that stays read-only (a replica named by mistake) a resent write
 * would reconnect and fail again, many times a second, never answered. The connections the Cold
 * queue and the worker make from this one inherit it.
 */
const reconnectOnError = (error: Error): 1 | false => (error.message.includes('READONLY') ? 1 : false);

export interface Stores {
  redis: Redis | null;
  /** Key prefix for the gateway's own Redis keys (BullMQ's default prefix when unset). */
  prefix: string | undefined;
  flags: FlagStore;
  pause: PauseFlag;
  queue: ColdQueue;
  limiter: Limiter;
  /** Client keys: in Redis with the rest, else in CLIENT_KEYS_FILE (the gateway and `npm run keys` use this). */
  keys: KeyStore;
  /** Idempotent replay's claims and answers. */
  replay: ReplayStore;
  /** Which tenant owns each stored response. */
  owners: ResponseOwners;
}

export function keyStoreFor(env: GatewayEnv, redis: Redis | null): KeyStore {
  return redis ? new RedisKeyStore(redis, env.REDIS_PREFIX ?? 'gateway') : new FileKeyStore(env.CLIENT_KEYS_FILE);
}

/**
 * `pauseKey`: the pause flag's key in Redis when not `pause_ai_tasks` (a drill's own);
 * `warn`: told when this instance puts back a pause Redis lost.
 */
export function createStores(
  env: GatewayEnv,
  map: RoutesMapConfig,
  queueOptions: QueueOptions = {},
  pauseKey?: string,
  warn?: (message: string) => void,
): Stores {
  if (!env.QUEUE_STORE_URL && env.production) {
    throw new ConfigError('QUEUE_STORE_URL is required with NODE_ENV=production (queued work must survive a restart)');
  }
  const prefix = env.REDIS_PREFIX;
  const limits = map.limits ?? {};
  if (!env.QUEUE_STORE_URL) {
    return {
      redis: null,
      prefix,
      flags: new LocalFlags(map.flags),
      pause: new MemoryPause(),
      queue: new MemoryColdQueue(queueOptions),
      limiter: new MemoryLimiter(limits),
      keys: keyStoreFor(env, null),
      replay: new MemoryReplayStore(),
      owners: new MemoryResponseOwners(),
    };
  }
  const redis = new Redis(env.QUEUE_STORE_URL, { maxRetriesPerRequest: null, socketTimeout: DEAD_LINK_MS, reconnectOnError });
  return {
    redis,
    prefix,
    flags: new RedisFlags(map.flags, redis, `${prefix ?? 'gateway'}:flags`),
    pause: new RedisPause(redis, undefined, pauseKey, warn),
    queue: new BullColdQueue(redis, prefix, queueOptions),
    limiter: new RedisLimiter(redis, prefix ?? 'gateway', limits),
    keys: keyStoreFor(env, redis),
    replay: new RedisReplayStore(redis, prefix ?? 'gateway'),
    owners: new RedisResponseOwners(redis, prefix ?? 'gateway'),
  };
}

/**
 * One log line when Redis becomes unreachable and one when it is back (ioredis reconnects by itself
 * and would otherwise print every failed attempt to stderr, outside the log).
 */
export function reportRedisState(redis: Redis, log: { error(m: string): void; info(m: string): void }): void {
  let down = false;
  redis.on('error', (error: Error) => {
    if (down) return;
    down = true;
    log.error(`Redis unreachable (${error.message}): live requests go on; Cold enqueues answer 503 until it is back`);
  });
  redis.on('ready', () => {
    if (!down) return;
    down = false;
    log.info('Redis reachable again');
  });
}

/**
 * Asks once for the database QUEUE_STORE_URL names, and hands a refusal to `refused`. ioredis selects
 * it on connect, and when the store has no such database (`/99` on a store of 16) it says so only
 * as an 'error' event, then sends every command on to database 0: the gateway logged "Redis
 * unreachable", then "reachable again", and ran its queue, keys and pause in another deployment's
 * database. Not waited for: with Redis away at start, the gateway starts as before.
 */
export function onDatabaseRefused(redis: Redis, refused: (error: ConfigError) => void): void {
  const db = redis.options.db ?? 0;
  if (!db) return;
  redis.select(db).catch((error: Error) => {
    if (error.name !== 'ReplyError') return; // the connection closing, not the store's answer
    refused(new ConfigError(`QUEUE_STORE_URL names database ${db}, which the store refused: ${error.message}`));
  });
}

/** Every key under a prefix and its value, whatever its type, as one text (to search for what must not be there). */
import type { Redis } from 'ioredis';

async function valueOf(redis: Redis, key: string): Promise<unknown> {
  switch (await redis.type(key)) {
    case 'string':
      return redis.getBuffer(key).then((b) => b?.toString('latin1'));
    case 'hash':
      return redis.hgetall(key);
    case 'list':
      return redis.lrange(key, 0, -1);
    case 'set':
      return redis.smembers(key);
    case 'zset':
      return redis.zrange(key, 0, -1, 'WITHSCORES');
    case 'stream':
      return redis.xrange(key, '-', '+');
    default:
      return null;
  }
}

export async function redisDump(redis: Redis, prefix: string): Promise<string> {
  const lines: string[] = [];
  let cursor = '0';
  do {
    const [next, keys] = await redis.scan(cursor, 'MATCH', `${prefix}:*`, 'COUNT', 500);
    cursor = next;
    for (const key of keys) lines.push(`${key} ${JSON.stringify(await valueOf(redis, key))}`);
  } while (cursor !== '0');
  return lines.join('\n');
}

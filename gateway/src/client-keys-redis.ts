/**
 * Client keys in Redis, under the gateway's prefix (`<prefix>:client-keys…`):
 *   <p>:client-keys            hash  key hash → record (JSON, without last-used)
 *   <p>:client-keys:ids        hash  key id → key hash
 *   <p>:client-keys:last-used  hash  key id → ISO time
 * Nothing in them is a key: records hold its SHA-256 only.
 */
import type { Redis } from 'ioredis';
import type { ClientKey, KeyStore } from './client-keys';
import { mustSend } from './redis-held';

type Stored = Omit<ClientKey, 'lastUsed'>;

/** HSET only when the field still holds what was read (1), else nothing (0). */
const REPLACE_IF_SAME = `
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
  return 1
end
return 0`;

/**
 * Each id's time set unless the one held is later (ISO times of one format compare as text): a batch
 * an instance sends late (kept through a Redis outage, or a write slowed) must not put a key's last
 * use back, and make a key still in use look idle.
 */
const LATER_ONLY = `
for i = 1, #ARGV, 2 do
  local held = redis.call('HGET', KEYS[1], ARGV[i])
  if not held or held < ARGV[i + 1] then redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
end
return 0`;

export class RedisKeyStore implements KeyStore {
  readonly where: string;
  private readonly records: string;
  private readonly ids: string;
  private readonly lastUsed: string;

  constructor(
    private readonly redis: Redis,
    prefix: string,
  ) {
    this.records = `${prefix}:client-keys`;
    this.ids = `${prefix}:client-keys:ids`;
    this.lastUsed = `${prefix}:client-keys:last-used`;
    this.where = `Redis ${this.records}`;
  }

  async add(record: ClientKey): Promise<boolean> {
    if (!(await this.redis.hsetnx(this.ids, record.id, record.hash))) return false;
    const { lastUsed: _, ...stored } = record;
    await this.redis.hset(this.records, record.hash, JSON.stringify(stored));
    return true;
  }

  async list(): Promise<ClientKey[]> {
    const [records, used] = await Promise.all([this.redis.hvals(this.records), this.redis.hgetall(this.lastUsed)]);
    return records.map((json) => {
      const r = JSON.parse(json) as Stored;
      return { ...r, lastUsed: used[r.id] ?? null };
    });
  }

  async find(hashes: string[]): Promise<Array<ClientKey | null>> {
    if (!hashes.length) return [];
    mustSend(this.redis); // Redis away: a key not cached is refused 503 at once, its lookup not held for later
    const found = await this.redis.hmget(this.records, ...hashes);
    // Last-used is not needed to check a key; the CLI's list reads it.
    return found.map((json) => (json ? { ...(JSON.parse(json) as Stored), lastUsed: null } : null));
  }

  /** The record revoked (now or before), null when there is none, 'raced' when it changed while read. */
  private async markRevoked(hash: string, at: Date): Promise<Stored | null | 'raced'> {
    const json = await this.redis.hget(this.records, hash);
    if (!json) return null;
    const record = JSON.parse(json) as Stored;
    if (record.revoked) return record;
    const revoked = { ...record, revoked: at.toISOString() };
    return (await this.redis.eval(REPLACE_IF_SAME, 1, this.records, hash, json, JSON.stringify(revoked))) ? revoked : 'raced';
  }

  async revoke(id: string, at: Date): Promise<ClientKey | null> {
    const hash = await this.redis.hget(this.ids, id);
    if (!hash) return null;
    // Written only over the record as read: of two revokes at once, the first time stands and both report it.
    let record: Stored | null | 'raced';
    do record = await this.markRevoked(hash, at);
    while (record === 'raced');
    return record && { ...record, lastUsed: (await this.redis.hget(this.lastUsed, id)) ?? null };
  }

  async touch(used: Map<string, number>): Promise<void> {
    if (!used.size) return;
    const fields = [...used].flatMap(([id, ms]) => [id, new Date(ms).toISOString()]);
    await this.redis.eval(LATER_ONLY, 1, this.lastUsed, ...fields);
  }
}

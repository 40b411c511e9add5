/**
 * Client keys in Redis, under the gateway's prefix (`<prefix>:client-keys…`):
 *   <p>:client-keys            hash  key hash → record (JSON, without last-used)
 *   <p>:client-keys:ids        hash  key id → key hash
 *   <p>:client-keys:last-used  hash  key id → ISO time
 * Nothing in them is a key: records hold its SHA-256 only.
 */
import type { Redis } from 'ioredis';
import type { ClientKey, KeyStore } from './client-keys';

type Stored = Omit<ClientKey, 'lastUsed'>;

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
    const found = await this.redis.hmget(this.records, ...hashes);
    // Last-used is not needed to check a key; the CLI's list reads it.
    return found.map((json) => (json ? { ...(JSON.parse(json) as Stored), lastUsed: null } : null));
  }

  async revoke(id: string, at: Date): Promise<ClientKey | null> {
    const hash = await this.redis.hget(this.ids, id);
    const json = hash ? await this.redis.hget(this.records, hash) : null;
    if (!hash || !json) return null;
    const record = JSON.parse(json) as Stored;
    record.revoked ??= at.toISOString();
    await this.redis.hset(this.records, hash, JSON.stringify(record));
    return { ...record, lastUsed: (await this.redis.hget(this.lastUsed, id)) ?? null };
  }

  async touch(used: Map<string, number>): Promise<void> {
    if (!used.size) return;
    const fields = [...used].flatMap(([id, ms]) => [id, new Date(ms).toISOString()]);
    await this.redis.hset(this.lastUsed, ...fields);
  }
}

/**
 * Response owners: which tenant each stored response (and its output items) belongs to, and which
 * provider stored it (a follow-up can be served only there). Every
 * tenant's request reaches a native Responses route with the operator's one provider key, so the
 * provider would continue any response it stored for anyone: with client keys, a request that names
 * a `previous_response_id` or a stored item (responses/ownership.ts) is served only when the
 * caller's tenant is the one the gateway answered it to (else OpenAI's own
 * `previous_response_not_found`, nothing called).
 * Owners are kept as long as OpenAI keeps stored responses, 30 days; in Redis (every instance sees
 * them) or, without it, in this process.
 */
import type { Redis } from 'ioredis';
import { mustSend } from './redis-held';

/** Who a stored response is for, and the provider (the routing map's `provider`) that keeps it. */
export interface Owner {
  tenant: string;
  provider: string;
}

export interface ResponseOwners {
  /** Records the owner of these ids; an id already owned keeps its owner. */
  claim(owner: Owner, ids: string[]): Promise<void>;
  /** The owners of these ids, in order (null: never answered through this gateway, or expired). */
  owners(ids: string[]): Promise<Array<Owner | null>>;
}

const TTL_S = 30 * 24 * 3600;

/** In Redis, `<tenant>\t<provider>` (a tenant has no tab: TENANT_PATTERN). */
const encode = (o: Owner) => `${o.tenant}\t${o.provider}`;
function decode(v: string | null): Owner | null {
  if (v === null) return null;
  const tab = v.indexOf('\t');
  return tab === -1 ? { tenant: v, provider: '' } : { tenant: v.slice(0, tab), provider: v.slice(tab + 1) };
}

/** Owners this instance has written or read, kept briefly: an id keeps its first owner, so none goes stale. */
const KNOWN_ENTRIES = 10_000;
const KNOWN_S = 600;

export class RedisResponseOwners implements ResponseOwners {
  /**
   * A follow-up of an answer given here needs no round trip, and an answer Redis gives after the
   * request stopped waiting serves its retry: on a Redis slower than the wait, every follow-up was
   * refused response_owner_unavailable.
   */
  private readonly known = new MemoryResponseOwners(KNOWN_ENTRIES, Date.now, KNOWN_S);

  constructor(
    private readonly redis: Redis,
    private readonly prefix: string,
  ) {}

  async claim(owner: Owner, ids: string[]): Promise<void> {
    mustSend(this.redis);
    const batch = this.redis.pipeline();
    for (const id of ids) batch.set(this.keyOf(id), encode(owner), 'EX', TTL_S, 'NX');
    const results = (await batch.exec()) ?? [];
    const failed = results.find(([error]) => error);
    if (failed) throw failed[0]!;
    await this.known.claim(
      owner,
      ids.filter((_, i) => results[i]?.[1] === 'OK'),
    );
  }

  async owners(ids: string[]): Promise<Array<Owner | null>> {
    const known = await this.known.owners(ids);
    if (known.every((o) => o !== null)) return known;
    mustSend(this.redis);
    const read = (await this.redis.mget(ids.map((id) => this.keyOf(id)))).map(decode);
    for (const [i, owner] of read.entries()) if (owner) await this.known.claim(owner, [ids[i]]);
    return read;
  }

  private keyOf(id: string): string {
    return `${this.prefix}:response-owner:${id}`;
  }
}

/** The in-process stand-in: the newest `maxEntries` ids (oldest forgotten first), for `ttlS` (30 days). */
export class MemoryResponseOwners implements ResponseOwners {
  private readonly entries = new Map<string, { owner: Owner; until: number }>();

  constructor(
    private readonly maxEntries = 100_000,
    private readonly now: () => number = Date.now,
    private readonly ttlS = TTL_S,
  ) {}

  claim(owner: Owner, ids: string[]): Promise<void> {
    for (const id of ids) {
      if (this.owner(id) !== null) continue;
      this.entries.set(id, { owner, until: this.now() + this.ttlS * 1000 });
      if (this.entries.size > this.maxEntries) this.entries.delete(this.entries.keys().next().value!);
    }
    return Promise.resolve();
  }

  owners(ids: string[]): Promise<Array<Owner | null>> {
    return Promise.resolve(ids.map((id) => this.owner(id)));
  }

  private owner(id: string): Owner | null {
    const e = this.entries.get(id);
    if (e && e.until > this.now()) return e.owner;
    if (e) this.entries.delete(id);
    return null;
  }
}

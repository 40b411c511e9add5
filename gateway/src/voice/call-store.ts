/**
 * Where calls live between the voice server's requests. In Redis (a day, or an hour after the call
 * ends), so any gateway instance can take the next event of a call; updates are compare-and-set on
 * a version, so two instances never lose each other's events; the monthly pause is a Redis flag
 * every instance honours. Without Redis, an in-process store with the same behaviour.
 */
import type { Redis } from 'ioredis';
import type { CallRecord } from '../../../schema/call-record';
import { ExpiringMap } from './expiring-map';
import type { CallState } from './spend-guard';

/** How long a call is kept: a day while it runs, an hour once it ended (tests shorten both). */
export interface CallTtl {
  liveS: number;
  endedS: number;
}
const CALL_TTL: CallTtl = { liveS: 24 * 3600, endedS: 3600 };

export interface StoredCall {
  /** The call record, once the call ended (ending again answers it). */
  record?: CallRecord;
  call_id: string;
  from: string;
  country: string | null;
  started_at: string;
  ended_at: string | null;
  action: 'answer' | 'voicemail';
  state: CallState;
  version: number;
}

export interface VoiceStore {
  /** Stores a new call; when the id exists already, the stored call is kept and answered. */
  create(call: StoredCall): Promise<StoredCall>;
  get(id: string): Promise<StoredCall | null>;
  /** Applies `change` atomically (retried on a concurrent update); null when there is no such call. */
  update(id: string, change: (call: StoredCall) => StoredCall): Promise<StoredCall | null>;
  monthlyPaused(): Promise<boolean>;
  setMonthlyPaused(paused: boolean): Promise<void>;
}

/** In process: the same lifetimes; every call in and out is a copy, as JSON in Redis is. */
export class MemoryVoiceStore implements VoiceStore {
  private readonly calls = new ExpiringMap<StoredCall>();
  private paused = false;
  constructor(private readonly ttl: CallTtl = CALL_TTL) {}
  async create(call: StoredCall) {
    const existing = this.calls.get(call.call_id);
    if (existing) return structuredClone(existing);
    this.calls.set(call.call_id, structuredClone(call), this.ttl.liveS);
    return structuredClone(call);
  }
  async get(id: string) {
    const c = this.calls.get(id);
    return c ? structuredClone(c) : null;
  }
  async update(id: string, change: (call: StoredCall) => StoredCall) {
    const c = this.calls.get(id);
    if (!c) return null;
    const next = { ...change(structuredClone(c)), version: c.version + 1 };
    this.calls.set(id, structuredClone(next), next.ended_at ? this.ttl.endedS : this.ttl.liveS);
    return next;
  }
  async monthlyPaused() {
    return this.paused;
  }
  async setMonthlyPaused(paused: boolean) {
    this.paused = paused;
  }
}

/** SET the call only if its stored version is still the one read. */
const CAS = `local cur = redis.call('GET', KEYS[1])
if not cur then return -1 end
if cjson.decode(cur).version ~= tonumber(ARGV[1]) then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[3])
return 1`;

export class RedisVoiceStore implements VoiceStore {
  constructor(
    private readonly redis: Redis,
    private readonly prefix: string,
    private readonly ttl: CallTtl = CALL_TTL,
  ) {}
  private key(id: string) {
    return `${this.prefix}:voice:call:${id}`;
  }
  async create(call: StoredCall) {
    const ok = await this.redis.set(this.key(call.call_id), JSON.stringify(call), 'EX', this.ttl.liveS, 'NX');
    return ok ? call : ((await this.get(call.call_id)) ?? call);
  }
  async get(id: string) {
    const text = await this.redis.get(this.key(id));
    return text ? (JSON.parse(text) as StoredCall) : null;
  }
  async update(id: string, change: (call: StoredCall) => StoredCall) {
    // Optimistic: each round one of the concurrent writers wins; a call has one voice server.
    for (let attempt = 0; attempt < 20; attempt++) {
      const current = await this.get(id);
      if (!current) return null;
      const next = { ...change(structuredClone(current)), version: current.version + 1 };
      const ttl = next.ended_at ? this.ttl.endedS : this.ttl.liveS;
      const done = (await this.redis.eval(CAS, 1, this.key(id), String(current.version), JSON.stringify(next), String(ttl))) as number;
      if (done === 1) return next;
      if (done === -1) return null;
    }
    throw new Error(`call ${id}: too many concurrent updates`);
  }
  async monthlyPaused() {
    return (await this.redis.get(`${this.prefix}:voice:monthly_paused`)) === '1';
  }
  async setMonthlyPaused(paused: boolean) {
    if (paused) await this.redis.set(`${this.prefix}:voice:monthly_paused`, '1');
    else await this.redis.del(`${this.prefix}:voice:monthly_paused`);
  }
}

/**
 * Rate limits: requests per minute per tenant, and tokens per minute per provider, in Redis so
 * they hold across gateway instances (in process without Redis). Fixed one-minute windows:
 * simple, exact across instances with one INCR, and the Retry-After is the rest of the window.
 * Values come from the routing map's `limits`. A request is counted against its tenant's limit and
 * its client key's `--rpm` in one step (one Lua script with Redis), and against neither when either
 * is full: a request refused by one limit takes nothing of the other.
 */
import type { Redis } from 'ioredis';
import { maySend, mustSend, NotSent } from './redis-held';
import { within } from './within';

export interface Limits {
  tenant_requests_per_minute?: number;
  provider_tokens_per_minute?: Record<string, number>;
}

/** A client key's requests per minute: its counter (as for countWindow) and its `--rpm`. */
export interface KeyRequests {
  counter: string;
  rpm: number;
}

/** The limit a request found full, and the seconds to wait; null: counted. */
export type RequestsOver = { limit: 'tenant' | 'key'; retryAfterS: number } | null;

export interface Limiter {
  /** Counts a request for the tenant and its key (the key's limit checked first), or for neither when one is full. */
  hitRequest(tenant: string, key?: KeyRequests): Promise<RequestsOver>;
  /** Seconds until the provider's token budget has room again; 0 when it has room now. */
  providerWait(provider: string): Promise<number>;
  spendTokens(provider: string, tokens: number): void;
  /** Adds `by` to a named counter of the current window (client keys' limits); its count after, and the seconds left. */
  countWindow(counter: string, by: number): Promise<{ count: number; retryAfterS: number }>;
}

const WINDOW_MS = 60_000;
const windowOf = (now: number) => Math.floor(now / WINDOW_MS);
const secondsLeft = (now: number) => Math.max(1, Math.ceil((WINDOW_MS - (now % WINDOW_MS)) / 1000));
/** Requests without a tenant have a counter of their own, apart from every tenant's (even one named "-"). */
const tenantKey = (tenant: string, window: number) => (tenant ? `rl:tenant:${tenant}:${window}` : `rl:anon:${window}`);
const tokensKey = (provider: string, window: number) => `tb:${provider}:${window}`;

/**
 * How long a limit check waits for Redis. Past it (Redis away or stalled) the caller admits the
 * request: a limiter that cannot count fails open rather than hold every request past its time-to-answer.
 */
const CHECK_MS = 250;

/** Counts one request on every counter (KEYS) when each is under its limit (ARGV); else the 1-based index of the first full one. */
const COUNT_IF_ROOM = `
for i, key in ipairs(KEYS) do
  if tonumber(redis.call('GET', key) or '0') >= tonumber(ARGV[i]) then return i end
end
for _, key in ipairs(KEYS) do
  redis.call('INCR', key)
  redis.call('PEXPIRE', key, ARGV[#KEYS + 1])
end
return 0`;

/** The counters a request is counted on, key first: their names and limits. */
function requestCounters(tenant: string, window: number, tenantLimit: number | undefined, key: KeyRequests | undefined) {
  const counters: Array<{ limit: 'tenant' | 'key'; name: string; max: number }> = [];
  if (key) counters.push({ limit: 'key', name: `rl:${key.counter}:${window}`, max: key.rpm });
  if (tenantLimit) counters.push({ limit: 'tenant', name: tenantKey(tenant, window), max: tenantLimit });
  return counters;
}

export class RedisLimiter implements Limiter {
  /**
   * Tokens spent while Redis held too many commands to take more (redis-held.ts), by counter: sent
   * with the next command once it takes them. The current window's only: a budget counts its own
   * minute, so at most one counter per provider budget and per client key with `--tpm`.
   */
  private unsent = new Map<string, number>();
  private unsentWindow = -1;
  constructor(
    private readonly redis: Redis,
    private readonly prefix: string,
    private readonly limits: Limits,
    private readonly now: () => number = Date.now,
    /** How long a check waits for Redis (tests of counting, not of a stall, give it longer). */
    private readonly checkMs = CHECK_MS,
  ) {}
  async countWindow(counter: string, by: number): Promise<{ count: number; retryAfterS: number }> {
    const now = this.now();
    const key = `${this.prefix}:rl:${counter}:${windowOf(now)}`;
    if (!maySend(this.redis)) {
      if (by) this.keep(key, by, windowOf(now));
      throw new NotSent('Redis holds too many commands: the window is not read');
    }
    this.sendUnsent();
    const [[, count]] = (await within(
      this.redis
        .multi()
        .incrby(key, by)
        .pexpire(key, WINDOW_MS * 2)
        .exec(),
      this.checkMs,
    )) as [[null, number], unknown];
    return { count, retryAfterS: secondsLeft(now) };
  }
  async hitRequest(tenant: string, key?: KeyRequests): Promise<RequestsOver> {
    const now = this.now();
    const counters = requestCounters(tenant, windowOf(now), this.limits.tenant_requests_per_minute, key);
    if (!counters.length) return null;
    mustSend(this.redis);
    this.sendUnsent();
    const names = counters.map((c) => `${this.prefix}:${c.name}`);
    const args = [...counters.map((c) => c.max), WINDOW_MS * 2];
    const full = (await within(this.redis.eval(COUNT_IF_ROOM, names.length, ...names, ...args), this.checkMs)) as number;
    return full ? { limit: counters[full - 1].limit, retryAfterS: secondsLeft(now) } : null;
  }
  async providerWait(provider: string): Promise<number> {
    const budget = this.limits.provider_tokens_per_minute?.[provider];
    if (!budget) return 0;
    mustSend(this.redis);
    this.sendUnsent();
    const now = this.now();
    const used = Number((await within(this.redis.get(`${this.prefix}:${tokensKey(provider, windowOf(now))}`), this.checkMs)) ?? 0);
    return used >= budget ? secondsLeft(now) : 0;
  }
  spendTokens(provider: string, tokens: number): void {
    if (!tokens || !this.limits.provider_tokens_per_minute?.[provider]) return;
    const window = windowOf(this.now());
    const key = `${this.prefix}:${tokensKey(provider, window)}`;
    if (!maySend(this.redis)) return this.keep(key, tokens, window);
    this.sendUnsent();
    void this.redis
      .multi()
      .incrby(key, tokens)
      .pexpire(key, WINDOW_MS * 2)
      .exec()
      .catch(() => undefined);
  }
  /** Counts `by` on `key` of `window` for later; a new window forgets the last one's. */
  private keep(key: string, by: number, window: number): void {
    if (window !== this.unsentWindow) {
      this.unsent.clear();
      this.unsentWindow = window;
    }
    this.unsent.set(key, (this.unsent.get(key) ?? 0) + by);
  }
  /** The tokens kept while Redis took no more, sent ahead of the command that follows (of their window only). */
  private sendUnsent(): void {
    if (!this.unsent.size) return;
    const kept = this.unsent;
    this.unsent = new Map();
    if (this.unsentWindow !== windowOf(this.now())) return;
    const multi = this.redis.multi();
    for (const [key, by] of kept) multi.incrby(key, by).pexpire(key, WINDOW_MS * 2);
    void multi.exec().catch(() => undefined);
  }
}

/** In process: the counters of the current window only (Redis lets older ones expire). */
export class MemoryLimiter implements Limiter {
  private counts = new Map<string, number>();
  private window = -Infinity;
  constructor(
    private readonly limits: Limits,
    private readonly now: () => number = Date.now,
  ) {}
  /** The counters of `window`; a new window starts them afresh. */
  private at(window: number): Map<string, number> {
    if (window !== this.window) {
      this.counts = new Map();
      this.window = window;
    }
    return this.counts;
  }
  async hitRequest(tenant: string, key?: KeyRequests): Promise<RequestsOver> {
    const now = this.now();
    const counts = this.at(windowOf(now));
    const counters = requestCounters(tenant, this.window, this.limits.tenant_requests_per_minute, key);
    const full = counters.find((c) => (counts.get(c.name) ?? 0) >= c.max);
    if (full) return { limit: full.limit, retryAfterS: secondsLeft(now) };
    for (const c of counters) counts.set(c.name, (counts.get(c.name) ?? 0) + 1);
    return null;
  }
  async providerWait(provider: string): Promise<number> {
    const budget = this.limits.provider_tokens_per_minute?.[provider];
    if (!budget) return 0;
    const now = this.now();
    return (this.at(windowOf(now)).get(tokensKey(provider, this.window)) ?? 0) >= budget ? secondsLeft(now) : 0;
  }
  spendTokens(provider: string, tokens: number): void {
    if (!tokens || !this.limits.provider_tokens_per_minute?.[provider]) return;
    const counts = this.at(windowOf(this.now()));
    const key = tokensKey(provider, this.window);
    counts.set(key, (counts.get(key) ?? 0) + tokens);
  }
  /** Client keys' counters, the current window only (apart from the counters above). */
  private keyWindow = { window: -1, counts: new Map<string, number>() };
  async countWindow(counter: string, by: number): Promise<{ count: number; retryAfterS: number }> {
    const now = this.now();
    if (this.keyWindow.window !== windowOf(now)) this.keyWindow = { window: windowOf(now), counts: new Map() };
    const count = (this.keyWindow.counts.get(counter) ?? 0) + by;
    this.keyWindow.counts.set(counter, count);
    return { count, retryAfterS: secondsLeft(now) };
  }
}

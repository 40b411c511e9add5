/**
 * Rate limits: requests per minute per tenant, and tokens per minute per provider, in Redis so
 * they hold across gateway instances (in process without Redis). Fixed one-minute windows:
 * simple, exact across instances with one INCR, and the Retry-After is the rest of the window.
 * Values come from the routing map's `limits`.
 */
import type { Redis } from 'ioredis';
import { within } from './within';

export interface Limits {
  tenant_requests_per_minute?: number;
  provider_tokens_per_minute?: Record<string, number>;
}

export interface Limiter {
  /** Counts a request for the tenant; the seconds to wait when over the limit, else 0. */
  hitTenant(tenant: string): Promise<number>;
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

export class RedisLimiter implements Limiter {
  constructor(
    private readonly redis: Redis,
    private readonly prefix: string,
    private readonly limits: Limits,
    private readonly now: () => number = Date.now,
  ) {}
  async countWindow(counter: string, by: number): Promise<{ count: number; retryAfterS: number }> {
    const now = this.now();
    const key = `${this.prefix}:rl:${counter}:${windowOf(now)}`;
    const [[, count]] = (await within(
      this.redis
        .multi()
        .incrby(key, by)
        .pexpire(key, WINDOW_MS * 2)
        .exec(),
      CHECK_MS,
    )) as [[null, number], unknown];
    return { count, retryAfterS: secondsLeft(now) };
  }
  async hitTenant(tenant: string): Promise<number> {
    const limit = this.limits.tenant_requests_per_minute;
    if (!limit) return 0;
    const now = this.now();
    const key = `${this.prefix}:${tenantKey(tenant, windowOf(now))}`;
    const [[, count]] = (await within(
      this.redis
        .multi()
        .incr(key)
        .pexpire(key, WINDOW_MS * 2)
        .exec(),
      CHECK_MS,
    )) as [[null, number], unknown];
    return count > limit ? secondsLeft(now) : 0;
  }
  async providerWait(provider: string): Promise<number> {
    const budget = this.limits.provider_tokens_per_minute?.[provider];
    if (!budget) return 0;
    const now = this.now();
    const used = Number((await within(this.redis.get(`${this.prefix}:${tokensKey(provider, windowOf(now))}`), CHECK_MS)) ?? 0);
    return used >= budget ? secondsLeft(now) : 0;
  }
  spendTokens(provider: string, tokens: number): void {
    if (!tokens || !this.limits.provider_tokens_per_minute?.[provider]) return;
    const key = `${this.prefix}:${tokensKey(provider, windowOf(this.now()))}`;
    void this.redis
      .multi()
      .incrby(key, tokens)
      .pexpire(key, WINDOW_MS * 2)
      .exec()
      .catch(() => undefined);
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
  async hitTenant(tenant: string): Promise<number> {
    const limit = this.limits.tenant_requests_per_minute;
    if (!limit) return 0;
    const now = this.now();
    const counts = this.at(windowOf(now));
    const key = tenantKey(tenant, this.window);
    const count = (counts.get(key) ?? 0) + 1;
    counts.set(key, count);
    return count > limit ? secondsLeft(now) : 0;
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

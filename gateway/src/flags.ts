/**
 * Feature flags: enable_warm_fallback, enable_cold_queue, and a kill-switch per
 * model. Defaults come from the routing map's `flags`; operators change them at run time with
 * `PUT /admin/flags`. With Redis configured they live in the hash `<prefix>flags`, so every
 * gateway instance sees a change within a second (one read at a time: while Redis does not answer,
 * the flags last read stay in force and no reads pile up behind it); requests read a local copy (no Redis round
 * trip on the request path).
 */
import type { Redis } from 'ioredis';
import type { Route } from './route';
import type { Scopes } from './scopes';

export interface Flags {
  enable_warm_fallback: boolean;
  enable_cold_queue: boolean;
  killed_models: string[];
}

/**
 * Whether the flags let live requests use this route: Warm only with warm fallback on, no killed
 * model. `model`: the one the call would name, when not the route's own (a scope's smaller model,
 * spend-cap routing's cheaper one): a killed model is not called through another route's entry.
 */
export function allowedBy(flags: Flags, route: Route, model = route.config.model): boolean {
  return (route.tier === 'hot' || flags.enable_warm_fallback) && !flags.killed_models.includes(model);
}

/** The models a call can name: the routes' own, the scopes' `smaller_model`s and the map's `cheaper_model`. */
interface CalledModels {
  routes: readonly Route[];
  scopes: Scopes;
  cheaperModel?: string;
}

/**
 * The killed models no call names: a typo, or another case. Matching stays exact (allowedBy), so
 * these switch nothing off; where flags are set, the operator is told so rather than left believing
 * a model is off.
 */
export function unmatchedKills(killed: readonly string[], called: CalledModels): string[] {
  const names = new Set<string | undefined>([
    ...called.routes.map((r) => r.config.model),
    ...Object.values(called.scopes).map((s) => s.smaller_model),
    called.cheaperModel,
  ]);
  return killed.filter((m) => !names.has(m));
}

/** The warning that names them. */
export const unmatchedKillsWarning = (names: string[]) =>
  `flags: killed_models ${names.map((n) => `"${n}"`).join(', ')} match no model a route calls (names are exact, case included): nothing is switched off for them`;

export interface FlagStore {
  get(): Flags;
  /** Reads the shared flags now (an instance does this before it takes traffic). */
  refresh(): Promise<Flags>;
  update(change: Partial<Flags>): Promise<Flags>;
  close(): void;
}

export class LocalFlags implements FlagStore {
  constructor(protected flags: Flags) {}
  get(): Flags {
    return this.flags;
  }
  async refresh(): Promise<Flags> {
    return this.flags;
  }
  async update(change: Partial<Flags>): Promise<Flags> {
    this.flags = { ...this.flags, ...change };
    return this.flags;
  }
  close(): void {}
}

export class RedisFlags extends LocalFlags {
  private timer: NodeJS.Timeout;
  /** A timed read is unanswered: the timer sends no other (commands wait for Redis rather than fail). */
  private polling = false;
  /** This instance's changes so far: a read answers for Redis as it was when the read was sent. */
  private writes = 0;
  constructor(
    private readonly defaults: Flags,
    private readonly redis: Redis,
    private readonly key: string,
    refreshMs = 1000,
  ) {
    super(defaults);
    this.timer = setInterval(() => this.poll(), refreshMs);
    this.timer.unref();
  }
  private poll(): void {
    if (this.polling) return;
    this.polling = true;
    void this.refresh().finally(() => (this.polling = false));
  }
  /**
   * Reads the shared flags; fields not set there are the defaults, as on an instance started now
   * (a Redis restarted empty must not leave the instances that ran before it on other flags).
   */
  async refresh(): Promise<Flags> {
    const writes = this.writes;
    const stored = await this.redis.hgetall(this.key).catch(() => null);
    // A read sent before this instance's own change says what Redis held before it (a slow Redis
    // answered the old flags after the change, and a killed model was called again).
    if (stored && writes === this.writes) {
      const next = { ...this.defaults };
      if (stored.enable_warm_fallback !== undefined) next.enable_warm_fallback = stored.enable_warm_fallback === '1';
      if (stored.enable_cold_queue !== undefined) next.enable_cold_queue = stored.enable_cold_queue === '1';
      if (stored.killed_models !== undefined) {
        next.killed_models = this.flags.killed_models; // a value someone wrote by hand that is not JSON: the last good list
        try {
          const list = JSON.parse(stored.killed_models) as unknown;
          if (Array.isArray(list)) next.killed_models = list.map(String);
        } catch {
          // kept
        }
      }
      this.flags = next;
    }
    return this.flags;
  }
  async update(change: Partial<Flags>): Promise<Flags> {
    const fields: Record<string, string> = {};
    if (change.enable_warm_fallback !== undefined) fields.enable_warm_fallback = change.enable_warm_fallback ? '1' : '0';
    if (change.enable_cold_queue !== undefined) fields.enable_cold_queue = change.enable_cold_queue ? '1' : '0';
    if (change.killed_models !== undefined) fields.killed_models = JSON.stringify(change.killed_models);
    // In force here at once, before Redis has it (Redis away: a kill-switch holds on this instance all the same).
    const before = this.flags;
    await super.update(change);
    this.writes++;
    if (!Object.keys(fields).length) return this.refresh();
    // The read goes out right behind the write, on the same connection: it reads the write, in one round trip.
    const written = this.redis.hset(this.key, fields);
    const read = this.refresh();
    // Refused (full, read-only): in force nowhere, here neither.
    await written.catch((error: Error) => {
      this.flags = before;
      throw error;
    });
    return read;
  }
  close(): void {
    clearInterval(this.timer);
  }
}

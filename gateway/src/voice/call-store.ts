/**
 * Where calls live between the voice server's requests. In Redis (a day, or an hour after the call
 * ends), so any gateway instance can take the next event of a call; the month's voice spend (what
 * its ended calls cost, and the last monthly rollup posted in it) is kept per UTC month in Redis
 * too, so every instance pauses new calls alike. Without Redis, an in-process store with the same
 * behaviour.
 *
 * A change to a call is data (`Op`), applied by the store's `reduce`. In Redis each change is
 * appended, atomically and in order, to the call's list of changes by one script, which answers
 * with the last saved call and the changes after it; the caller folds them (its own last) and
 * saves the result if nothing newer was saved, dropping the changes it holds. No change is ever
 * lost or refused however many arrive at once, and no one retries: the order is the list's.
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

/** How long a month's spend is kept: some 40 days, past the month's end. */
const MONTH_TTL_S = 40 * 86_400;

/** A UTC month's voice spend: what its ended calls cost (USD), and the last rollup posted in it (null: none). */
export interface MonthSpend {
  usd: number;
  rollup: number | null;
}

/** A stored amount: finite and >= 0, else none (0, or no rollup). */
const amount = (v: string | null | undefined): number | null => {
  const n = v === null || v === undefined ? NaN : Number(v);
  return Number.isFinite(n) && n >= 0 ? n : null;
};

export interface StoredCall {
  /** The call record, once the call ended (ending again answers it). */
  record?: CallRecord;
  /** Which end request made the record (so exactly one sends what follows the call). */
  endedBy?: string;
  call_id: string;
  from: string;
  country: string | null;
  started_at: string;
  ended_at: string | null;
  action: 'answer' | 'voicemail';
  /** Why a call went to voicemail without a conversation (after_hours, no_answer, network_issue, monthly_cap). */
  voicemail_reason?: string;
  state: CallState;
  /** Changes applied since the call was stored. */
  version: number;
  /** The last numbered batch of guard events applied (a batch sent again is skipped). */
  guardBatch?: GuardBatch;
  /** The Idempotency-Keys of the latest batches posted to the events endpoint with one (hashed, each with its batch's hash), oldest first. */
  eventKeys?: string[];
}

/** A guard feed's batch: its feed (one per call session) and its number there, rising. */
export interface GuardBatch {
  feed: string;
  n: number;
}

/** Applies one change to a call (a copy, to change in place or not). Pure: every instance folds the same. */
export type Reduce<Op> = (call: StoredCall, op: Op) => StoredCall;

export interface VoiceStore<Op> {
  /** Stores a new call; when the id exists already, the stored call is kept and answered. */
  create(call: StoredCall): Promise<StoredCall>;
  get(id: string): Promise<StoredCall | null>;
  /** Appends a change, atomically and in order; the call with every change up to it applied. Null: no such call. */
  apply(id: string, op: Op): Promise<StoredCall | null>;
  /** The spend of each month asked (`YYYY-MM`, UTC), in one read. */
  monthSpend(months: string[]): Promise<MonthSpend[]>;
  /** Adds a call's cost to its month, atomically; the month's spend before and after. */
  addMonthSpend(month: string, usd: number): Promise<{ before: MonthSpend; after: MonthSpend }>;
  /** Keeps a rollup as the month's last; the month's spend before and after. */
  setMonthRollup(month: string, usd: number): Promise<{ before: MonthSpend; after: MonthSpend }>;
  /** True for the first caller only, per month: who logs that the pause lifted at the month's turn. */
  firstAtMonth(month: string): Promise<boolean>;
  /**
   * Takes the pause an earlier version kept (`<p>:voice:monthly_paused`, set by a rollup at the cap
   * and lifted only by a lower one) and keeps it as `month`'s rollup at `cap`, in one step: true
   * for the first caller only, and only while it was set.
   */
  takeOldPause(month: string, cap: number): Promise<boolean>;
}

const ttlOf = (call: StoredCall, ttl: CallTtl) => (call.ended_at ? ttl.endedS : ttl.liveS);

/** In process: the same lifetimes; every call in and out is a copy, as JSON in Redis is. */
export class MemoryVoiceStore<Op> implements VoiceStore<Op> {
  private readonly calls = new ExpiringMap<StoredCall>();
  private readonly months = new Map<string, MonthSpend>();
  private readonly turns = new Set<string>();
  constructor(
    private readonly reduce: Reduce<Op>,
    private readonly ttl: CallTtl = CALL_TTL,
  ) {}
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
  async apply(id: string, op: Op) {
    const c = this.calls.get(id);
    if (!c) return null;
    const next = { ...this.reduce(structuredClone(c), structuredClone(op)), version: c.version + 1 };
    this.calls.set(id, structuredClone(next), ttlOf(next, this.ttl));
    return next;
  }
  private month(month: string): MonthSpend {
    return { ...(this.months.get(month) ?? { usd: 0, rollup: null }) };
  }
  async monthSpend(months: string[]) {
    return months.map((m) => this.month(m));
  }
  async addMonthSpend(month: string, usd: number) {
    const before = this.month(month);
    const after = { ...before, usd: before.usd + usd };
    this.months.set(month, after);
    return { before, after: { ...after } };
  }
  async setMonthRollup(month: string, usd: number) {
    const before = this.month(month);
    const after = { ...before, rollup: usd };
    this.months.set(month, after);
    return { before, after: { ...after } };
  }
  async firstAtMonth(month: string) {
    if (this.turns.has(month)) return false;
    this.turns.add(month);
    return true;
  }
  async takeOldPause() {
    return false; // in process, an earlier version's pause went with its process
  }
}

/** A new call: stored unless one with its id is; a leftover change list of an expired namesake goes. */
const CREATE = `if redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2], 'NX') then
  redis.call('DEL', KEYS[2], KEYS[3])
  return 1
end
return 0`;

/** Appends a change (numbered by the call's counter); answers the saved call, the change's number, and the list. */
const APPEND = `local saved = redis.call('GET', KEYS[1])
if not saved then return false end
local seq = redis.call('INCR', KEYS[3])
redis.call('RPUSH', KEYS[2], seq .. ':' .. ARGV[1])
redis.call('EXPIRE', KEYS[2], ARGV[2])
redis.call('EXPIRE', KEYS[3], ARGV[2])
return {saved, seq, redis.call('LRANGE', KEYS[2], 0, -1)}`;

/** Saves a folded call unless a newer one is saved; drops the changes it holds. */
const SAVE = `local saved = redis.call('GET', KEYS[1])
if not saved or cjson.decode(saved).version >= tonumber(ARGV[2]) then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[3])
redis.call('EXPIRE', KEYS[2], ARGV[3])
redis.call('EXPIRE', KEYS[3], ARGV[3])
while true do
  local head = redis.call('LINDEX', KEYS[2], 0)
  if not head or tonumber(string.match(head, '^(%d+):')) > tonumber(ARGV[2]) then break end
  redis.call('LPOP', KEYS[2])
end
return 1`;

/** Removes an earlier version's pause; while it was set, keeps it as the month's rollup at the cap. */
const TAKE_OLD_PAUSE = `local was = redis.call('GET', KEYS[1])
if was == '1' then redis.call('SET', KEYS[2], ARGV[1], 'EX', ARGV[2]) end
redis.call('DEL', KEYS[1])
if was == '1' then return 1 end
return 0`;

export class RedisVoiceStore<Op> implements VoiceStore<Op> {
  constructor(
    private readonly redis: Redis,
    private readonly prefix: string,
    private readonly reduce: Reduce<Op>,
    private readonly ttl: CallTtl = CALL_TTL,
  ) {}
  /** The saved call, its list of changes, and the counter that numbers them. */
  private keys(id: string): [string, string, string] {
    const call = `${this.prefix}:voice:call:${id}`;
    return [call, `${call}:changes`, `${call}:seq`];
  }
  async create(call: StoredCall) {
    const created = (await this.redis.eval(CREATE, 3, ...this.keys(call.call_id), JSON.stringify(call), String(this.ttl.liveS))) === 1;
    return created ? call : ((await this.get(call.call_id)) ?? call);
  }
  /** The saved call with the changes after it applied, up to change `upTo` (all when absent). */
  private fold(saved: string, changes: string[], upTo = Infinity): StoredCall {
    let call = JSON.parse(saved) as StoredCall;
    for (const entry of changes) {
      const colon = entry.indexOf(':');
      const seq = Number(entry.slice(0, colon));
      if (seq <= call.version || seq > upTo) continue;
      call = { ...this.reduce(call, JSON.parse(entry.slice(colon + 1)) as Op), version: seq };
    }
    return call;
  }
  async get(id: string) {
    const [call, changes] = this.keys(id);
    const [[, saved], [, list]] = (await this.redis.multi().get(call).lrange(changes, 0, -1).exec()) as [
      [null, string | null],
      [null, string[]],
    ];
    return saved ? this.fold(saved, list) : null;
  }
  async apply(id: string, op: Op) {
    const keys = this.keys(id);
    const out = (await this.redis.eval(APPEND, 3, ...keys, JSON.stringify(op), String(this.ttl.liveS))) as
      [string, number, string[]] | null;
    if (!out) return null;
    const [saved, seq, changes] = out;
    const next = this.fold(saved, changes, seq);
    // The change is in the list now, and every later fold applies it: a save Redis refuses (gone
    // read-only or away in between) only leaves the saved copy behind. Failing the change instead
    // had its sender send it again: a batch applied twice, or an end whose record went nowhere
    // (the end sent again was not the one that made it, so nothing followed it).
    await this.redis
      .eval(SAVE, 3, ...keys, JSON.stringify(next), String(next.version), String(ttlOf(next, this.ttl)))
      .catch(() => undefined);
    return next;
  }
  /** A month's keys: what its calls cost (INCRBYFLOAT), its last rollup, and the mark of its turn. */
  private monthKeys(month: string): [string, string, string] {
    const m = `${this.prefix}:voice:month:${month}`;
    return [`${m}:usd`, `${m}:rollup`, `${m}:turn`];
  }
  async monthSpend(months: string[]) {
    const values = await this.redis.mget(...months.flatMap((m) => this.monthKeys(m).slice(0, 2)));
    return months.map((_, i) => ({ usd: amount(values[2 * i]) ?? 0, rollup: amount(values[2 * i + 1]) }));
  }
  async addMonthSpend(month: string, usd: number) {
    const [spent, rollup] = this.monthKeys(month);
    const out = (await this.redis.multi().get(spent).incrbyfloat(spent, usd).expire(spent, MONTH_TTL_S).get(rollup).exec()) ?? [];
    const failed = out.find(([e]) => e);
    if (failed || out.length < 4) throw failed?.[0] ?? new Error('the month spend transaction was aborted');
    const r = amount(out[3]![1] as string | null);
    return {
      before: { usd: amount(out[0]![1] as string | null) ?? 0, rollup: r },
      after: { usd: amount(out[1]![1] as string) ?? 0, rollup: r },
    };
  }
  async setMonthRollup(month: string, usd: number) {
    const [spent, rollup] = this.monthKeys(month);
    const out = (await this.redis.multi().get(spent).get(rollup).set(rollup, String(usd), 'EX', MONTH_TTL_S).exec()) ?? [];
    const failed = out.find(([e]) => e);
    if (failed || out.length < 3) throw failed?.[0] ?? new Error('the month rollup transaction was aborted');
    const own = amount(out[0]![1] as string | null) ?? 0;
    return { before: { usd: own, rollup: amount(out[1]![1] as string | null) }, after: { usd: own, rollup: usd } };
  }
  async firstAtMonth(month: string) {
    return (await this.redis.set(this.monthKeys(month)[2], '1', 'EX', MONTH_TTL_S, 'NX')) === 'OK';
  }
  async takeOldPause(month: string, cap: number) {
    // One script: a rollup posted meanwhile on another instance comes after it (not overwritten by
    // the cap), and a failure leaves the old key for the next look (the pause is never lost).
    const taken = await this.redis.eval(
      TAKE_OLD_PAUSE,
      2,
      `${this.prefix}:voice:monthly_paused`,
      this.monthKeys(month)[1],
      String(cap),
      String(MONTH_TTL_S),
    );
    return taken === 1;
  }
}

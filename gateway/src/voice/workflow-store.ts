/**
 * The function-call workflow's store: one entry per idempotency key (an in-flight marker while the
 * first call runs, then its answer), and the dead letters the dead-letter URL did not take. In
 * Redis, so a replay on any gateway instance finds the first answer and dead letters survive a
 * restart; without Redis, an in-process store with the same behaviour. Answers are stored as JSON.
 *
 * Dead letters are posted again in rounds. A letter leaves the store only once the dead-letter URL
 * took it (a holder killed mid-post leaves it in place, posted again later: at least once), and one
 * round runs at a time across instances (a short lock, renewed with each delivery), so in the normal
 * case no letter is posted twice and they go oldest first.
 */
import { randomUUID } from 'node:crypto';
import type { Redis } from 'ioredis';
import { ExpiringMap } from './expiring-map';

/**
 * Answers are kept a week; an in-flight marker two minutes, so a crashed holder frees its key; a
 * dead-letter round a minute after its last delivery, well above one post's 10 s timeout, so a
 * crashed holder's round lapses (tests shorten all three).
 */
export interface WorkflowTtl {
  resultS: number;
  runningS: number;
  roundS?: number;
}
const WORKFLOW_TTL: Required<WorkflowTtl> = { resultS: 7 * 24 * 3600, runningS: 120, roundS: 60 };
/** The in-flight marker; an answer is JSON, never this text. */
const RUNNING = 'running';

export interface WorkflowStore<A> {
  /** Claims the key; false when another call holds it or it is done. */
  claim(key: string): Promise<boolean>;
  /** The stored answer; null while the key is free or still running. */
  result(key: string): Promise<A | null>;
  finish(key: string, answer: A): Promise<void>;
  /** Frees a claimed key (the call failed in a way that must not be remembered). */
  release(key: string): Promise<void>;
  pushDeadLetter(payload: string): Promise<void>;
  /** Opens a dead-letter round for `holder`; false while another holder's round is open. */
  openRound(holder: string): Promise<boolean>;
  /** Up to `n` dead letters, oldest first, left in the store. */
  peekDeadLetters(n: number): Promise<string[]>;
  /**
   * `payload` was delivered: removed if it is still the oldest, and the holder's round kept open.
   * False when it was not the oldest or the round is no longer the holder's: the round must stop.
   */
  delivered(holder: string, payload: string): Promise<boolean>;
  /** As `delivered`, for a letter the dead-letter URL refused for good: moved to the refused letters (the newest 10,000 kept). */
  setAside(holder: string, payload: string): Promise<boolean>;
  closeRound(holder: string): Promise<void>;
  /** Whether `payload` is still kept (not yet delivered). */
  holds(payload: string): Promise<boolean>;
}

/**
 * KEYS: the key, its claim's token; ARGV: this claim's token (new to each claim), the running marker,
 * its seconds. 1 when claimed: also when the key runs with this claim's own token, this claim sent
 * again (sent-again.ts), which would find the key running and wait for an answer nobody would give,
 * then 409. The marker itself stays `running` (what instances of an earlier version read).
 */
const CLAIM = `
if redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[3], 'NX') then
  redis.call('SET', KEYS[2], ARGV[1], 'EX', ARGV[3])
  return 1
end
if redis.call('GET', KEYS[1]) == ARGV[2] and redis.call('GET', KEYS[2]) == ARGV[1] then return 1 end
return 0`;

/** The refused letters kept for a person to look at. */
const REFUSED_KEPT = 10_000;
/** KEYS: pending list, round lock[, refused list]; ARGV: holder, payload, round ms[, refused kept]. */
const DELIVERED = `
local removed = 0
if redis.call('LINDEX', KEYS[1], 0) == ARGV[2] then
  redis.call('LPOP', KEYS[1]); removed = 1
  if KEYS[3] then redis.call('RPUSH', KEYS[3], ARGV[2]); redis.call('LTRIM', KEYS[3], -tonumber(ARGV[4]), -1) end
end
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return removed`;
/** KEYS: round lock; ARGV: holder. */
const CLOSE = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`;

export class RedisWorkflowStore<A> implements WorkflowStore<A> {
  constructor(
    private readonly redis: Redis,
    private readonly prefix: string,
    private readonly ttl: WorkflowTtl = WORKFLOW_TTL,
  ) {}
  private get pending() {
    return `${this.prefix}:wf:dlq-pending`;
  }
  private get round() {
    return `${this.prefix}:wf:dlq-round`;
  }
  private get roundMs() {
    return (this.ttl.roundS ?? WORKFLOW_TTL.roundS) * 1000;
  }
  private k(key: string) {
    return `${this.prefix}:wf:${key}`;
  }
  async claim(key: string) {
    return (await this.redis.eval(CLAIM, 2, this.k(key), `${this.k(key)}:claim`, randomUUID(), RUNNING, this.ttl.runningS)) === 1;
  }
  async result(key: string) {
    const v = await this.redis.get(this.k(key));
    return v && v !== RUNNING ? (JSON.parse(v) as A) : null;
  }
  async finish(key: string, answer: A) {
    await this.redis.set(this.k(key), JSON.stringify(answer), 'EX', this.ttl.resultS);
  }
  async release(key: string) {
    await this.redis.del(this.k(key));
  }
  async pushDeadLetter(payload: string) {
    await this.redis.rpush(this.pending, payload);
  }
  async openRound(holder: string) {
    return (await this.redis.set(this.round, holder, 'PX', this.roundMs, 'NX')) === 'OK';
  }
  async peekDeadLetters(n: number) {
    return this.redis.lrange(this.pending, 0, n - 1);
  }
  async delivered(holder: string, payload: string) {
    return (await this.redis.eval(DELIVERED, 2, this.pending, this.round, holder, payload, this.roundMs)) === 1;
  }
  async setAside(holder: string, payload: string) {
    const refused = `${this.prefix}:wf:dlq-refused`;
    return (await this.redis.eval(DELIVERED, 3, this.pending, this.round, refused, holder, payload, this.roundMs, REFUSED_KEPT)) === 1;
  }
  async closeRound(holder: string) {
    await this.redis.eval(CLOSE, 1, this.round, holder);
  }
  async holds(payload: string) {
    return (await this.redis.lpos(this.pending, payload)) !== null;
  }
}

/** In process: the same lifetimes for answers and in-flight markers. */
export class MemoryWorkflowStore<A> implements WorkflowStore<A> {
  private readonly keys = new ExpiringMap<string>();
  private readonly pending: string[] = [];
  /** Letters the dead-letter URL refused for good (the newest REFUSED_KEPT). */
  private readonly refused: string[] = [];
  private readonly round = new ExpiringMap<string>();
  constructor(private readonly ttl: WorkflowTtl = WORKFLOW_TTL) {}
  async claim(key: string) {
    if (this.keys.get(key) !== undefined) return false;
    this.keys.set(key, RUNNING, this.ttl.runningS);
    return true;
  }
  async result(key: string) {
    const v = this.keys.get(key);
    return v && v !== RUNNING ? (JSON.parse(v) as A) : null;
  }
  async finish(key: string, answer: A) {
    this.keys.set(key, JSON.stringify(answer), this.ttl.resultS);
  }
  async release(key: string) {
    this.keys.delete(key);
  }
  async pushDeadLetter(payload: string) {
    this.pending.push(payload);
  }
  async openRound(holder: string) {
    if (this.round.get('round') !== undefined) return false;
    this.round.set('round', holder, this.roundS);
    return true;
  }
  async peekDeadLetters(n: number) {
    return this.pending.slice(0, n);
  }
  async delivered(holder: string, payload: string) {
    const removed = this.pending[0] === payload;
    if (removed) this.pending.shift();
    if (this.round.get('round') !== holder) return false;
    this.round.set('round', holder, this.roundS);
    return removed;
  }
  async setAside(holder: string, payload: string) {
    const moved = this.pending[0] === payload;
    const held = await this.delivered(holder, payload);
    if (moved && this.refused.push(payload) > REFUSED_KEPT) this.refused.shift();
    return held;
  }
  async closeRound(holder: string) {
    if (this.round.get('round') === holder) this.round.delete('round');
  }
  async holds(payload: string) {
    return this.pending.includes(payload);
  }
  private get roundS() {
    return this.ttl.roundS ?? WORKFLOW_TTL.roundS;
  }
}

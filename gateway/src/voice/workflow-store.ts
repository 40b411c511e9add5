/**
 * The function-call workflow's store: one entry per idempotency key (an in-flight marker while the
 * first call runs, then its answer), and the dead letters the dead-letter URL did not take. In
 * Redis, so a replay on any gateway instance finds the first answer and dead letters survive a
 * restart; without Redis, an in-process store with the same behaviour. Answers are stored as JSON.
 */
import type { Redis } from 'ioredis';

/** Answers are kept a week; an in-flight marker two minutes (a crashed holder frees its key). */
const RESULT_TTL_S = 7 * 24 * 3600;
const RUNNING_TTL_S = 120;

export interface WorkflowStore<A> {
  /** Claims the key; false when another call holds it or it is done. */
  claim(key: string): Promise<boolean>;
  /** The stored answer; null while the key is free or still running. */
  result(key: string): Promise<A | null>;
  finish(key: string, answer: A): Promise<void>;
  /** Frees a claimed key (the call failed in a way that must not be remembered). */
  release(key: string): Promise<void>;
  pushDeadLetter(payload: string): Promise<void>;
  /** Takes up to `n` dead letters, oldest first. */
  takeDeadLetters(n: number): Promise<string[]>;
  /** Puts taken dead letters back at the front, in their order. */
  returnDeadLetters(payloads: string[]): Promise<void>;
}

export class RedisWorkflowStore<A> implements WorkflowStore<A> {
  constructor(
    private readonly redis: Redis,
    private readonly prefix: string,
  ) {}
  private k(key: string) {
    return `${this.prefix}:wf:${key}`;
  }
  async claim(key: string) {
    return (await this.redis.set(this.k(key), 'running', 'EX', RUNNING_TTL_S, 'NX')) === 'OK';
  }
  async result(key: string) {
    const v = await this.redis.get(this.k(key));
    return v && v !== 'running' ? (JSON.parse(v) as A) : null;
  }
  async finish(key: string, answer: A) {
    await this.redis.set(this.k(key), JSON.stringify(answer), 'EX', RESULT_TTL_S);
  }
  async release(key: string) {
    await this.redis.del(this.k(key));
  }
  async pushDeadLetter(payload: string) {
    await this.redis.rpush(`${this.prefix}:wf:dlq-pending`, payload);
  }
  async takeDeadLetters(n: number) {
    const items = await this.redis.lpop(`${this.prefix}:wf:dlq-pending`, n);
    return items ?? [];
  }
  async returnDeadLetters(payloads: string[]) {
    if (payloads.length) await this.redis.lpush(`${this.prefix}:wf:dlq-pending`, ...payloads.reverse());
  }
}

export class MemoryWorkflowStore<A> implements WorkflowStore<A> {
  private readonly keys = new Map<string, string>();
  readonly pending: string[] = [];
  async claim(key: string) {
    if (this.keys.has(key)) return false;
    this.keys.set(key, 'running');
    return true;
  }
  async result(key: string) {
    const v = this.keys.get(key);
    return v && v !== 'running' ? (JSON.parse(v) as A) : null;
  }
  async finish(key: string, answer: A) {
    this.keys.set(key, JSON.stringify(answer));
  }
  async release(key: string) {
    this.keys.delete(key);
  }
  async pushDeadLetter(payload: string) {
    this.pending.push(payload);
  }
  async takeDeadLetters(n: number) {
    return this.pending.splice(0, n);
  }
  async returnDeadLetters(payloads: string[]) {
    this.pending.unshift(...payloads);
  }
}

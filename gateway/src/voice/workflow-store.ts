/**
 * The function-call workflow's store: one entry per idempotency key (an in-flight marker while the
 * first call runs, then its answer), and the dead letters the dead-letter URL did not take. In
 * Redis, so a replay on any gateway instance finds the first answer and dead letters survive a
 * restart; without Redis, an in-process store with the same behaviour. Answers are stored as JSON.
 */
import type { Redis } from 'ioredis';
import { ExpiringMap } from './expiring-map';

/** Answers are kept a week; an in-flight marker two minutes, so a crashed holder frees its key (tests shorten both). */
export interface WorkflowTtl {
  resultS: number;
  runningS: number;
}
const WORKFLOW_TTL: WorkflowTtl = { resultS: 7 * 24 * 3600, runningS: 120 };
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
  /** Takes up to `n` dead letters, oldest first. */
  takeDeadLetters(n: number): Promise<string[]>;
  /** Puts taken dead letters back at the front, in their order. */
  returnDeadLetters(payloads: string[]): Promise<void>;
}

export class RedisWorkflowStore<A> implements WorkflowStore<A> {
  constructor(
    private readonly redis: Redis,
    private readonly prefix: string,
    private readonly ttl: WorkflowTtl = WORKFLOW_TTL,
  ) {}
  private k(key: string) {
    return `${this.prefix}:wf:${key}`;
  }
  async claim(key: string) {
    return (await this.redis.set(this.k(key), RUNNING, 'EX', this.ttl.runningS, 'NX')) === 'OK';
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
    await this.redis.rpush(`${this.prefix}:wf:dlq-pending`, payload);
  }
  async takeDeadLetters(n: number) {
    const items = await this.redis.lpop(`${this.prefix}:wf:dlq-pending`, n);
    return items ?? [];
  }
  async returnDeadLetters(payloads: string[]) {
    if (payloads.length) await this.redis.lpush(`${this.prefix}:wf:dlq-pending`, ...[...payloads].reverse());
  }
}

/** In process: the same lifetimes for answers and in-flight markers. */
export class MemoryWorkflowStore<A> implements WorkflowStore<A> {
  private readonly keys = new ExpiringMap<string>();
  private readonly pending: string[] = [];
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
  async takeDeadLetters(n: number) {
    return this.pending.splice(0, n);
  }
  async returnDeadLetters(payloads: string[]) {
    this.pending.unshift(...payloads);
  }
}

/**
 * The automation workflow (Document 3): `realtime.function_called` → the function's target.
 *   webhook     POST {call_id, function, args, idempotency_key} with `Idempotency-Key`
 *   static_url  answer the URL (the pricing page)
 *   dial        answer the number to dial (escalate_to_human)
 *
 * Idempotency: the key is sha256(call_id + function + canonical args), where canonical means key
 * order and whitespace do not matter. The first result is kept in Redis; a replay answers it with
 * `replayed: true` without calling the target, and a replay that arrives while the first call is
 * still running waits for it. Realtime APIs also emit function calls from interrupted responses;
 * the same rule makes them harmless.
 *
 * Errors: 5xx or a network failure is retried with exponential backoff, 3 attempts in all, then the
 * payload (function, args, call_id, key, last error) goes to the dead-letter URL and the answer
 * says so. A 4xx is not retried: the answer carries the target's message. When the dead-letter URL
 * is down too, the payload is kept in Redis and posted again later: nothing is lost.
 */
import { createHash } from 'node:crypto';
import type { Redis } from 'ioredis';
import type { Concierge } from './config';

const RESULT_TTL_S = 7 * 24 * 3600;
const RUNNING_TTL_S = 120;

/** JSON with object keys sorted at every level: the same arguments always give the same text. */
export function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (value && typeof value === 'object') {
    return `{${Object.keys(value)
      .sort()
      .filter((k) => (value as Record<string, unknown>)[k] !== undefined)
      .map((k) => `${JSON.stringify(k)}:${canonicalJson((value as Record<string, unknown>)[k])}`)
      .join(',')}}`;
  }
  return JSON.stringify(value);
}

export function workflowKey(callId: string, fn: string, args: unknown): string {
  return createHash('sha256')
    .update(`${callId}\u0000${fn}\u0000${canonicalJson(args ?? {})}`)
    .digest('hex');
}

export interface WorkflowAnswer {
  ok: boolean;
  result: unknown;
  idempotency_key: string;
  replayed: boolean;
  error?: string;
  dead_lettered?: boolean;
}

/** Where results, in-flight markers and undelivered dead letters are kept. */
interface WorkflowStore {
  /** Claims the key; false when another call holds it or it is done. */
  claim(key: string): Promise<boolean>;
  result(key: string): Promise<WorkflowAnswer | null>;
  finish(key: string, answer: WorkflowAnswer): Promise<void>;
  release(key: string): Promise<void>;
  pushDeadLetter(payload: string): Promise<void>;
  takeDeadLetters(n: number): Promise<string[]>;
  returnDeadLetters(payloads: string[]): Promise<void>;
}

export class RedisWorkflowStore implements WorkflowStore {
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
    return v && v !== 'running' ? (JSON.parse(v) as WorkflowAnswer) : null;
  }
  async finish(key: string, answer: WorkflowAnswer) {
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

export class MemoryWorkflowStore implements WorkflowStore {
  private readonly keys = new Map<string, string>();
  readonly pending: string[] = [];
  async claim(key: string) {
    if (this.keys.has(key)) return false;
    this.keys.set(key, 'running');
    return true;
  }
  async result(key: string) {
    const v = this.keys.get(key);
    return v && v !== 'running' ? (JSON.parse(v) as WorkflowAnswer) : null;
  }
  async finish(key: string, answer: WorkflowAnswer) {
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

export class WorkflowError extends Error {
  constructor(
    message: string,
    readonly status = 400,
  ) {
    super(message);
  }
}

export interface WorkflowDeps {
  config: Concierge;
  store: WorkflowStore;
  log: { warn: (m: string) => void; error: (m: string) => void };
  /** Backoff before retry n (1-based); tests shorten it. */
  backoffMs?: (n: number) => number;
  timeoutMs?: number;
  /** How long a replay waits for the first call to finish. */
  waitMs?: number;
}

type Attempt = { kind: 'ok'; result: unknown } | { kind: 'client'; message: string } | { kind: 'retry'; message: string };

export class Workflow {
  private timer: NodeJS.Timeout | null = null;
  constructor(private readonly deps: WorkflowDeps) {}

  /** Posts undelivered dead letters again every `everyMs` (nothing is lost while the DLQ is down). */
  startDeadLetterRetry(everyMs = 30_000): void {
    this.timer = setInterval(() => void this.flushDeadLetters().catch(() => undefined), everyMs);
    this.timer.unref();
  }
  stop(): void {
    if (this.timer) clearInterval(this.timer);
  }

  async called(input: { function: string; args: Record<string, unknown>; call_id: string }): Promise<WorkflowAnswer> {
    const fn = this.deps.config.functions.find((f) => f.name === input.function);
    if (!fn)
      throw new WorkflowError(
        `function: "${input.function}" is not in the configuration (${this.deps.config.functions.map((f) => f.name).join(', ')})`,
      );
    const key = workflowKey(input.call_id, input.function, input.args);
    if (fn.static_url) return { ok: true, result: { url: fn.static_url }, idempotency_key: key, replayed: false };
    if (fn.dial) return { ok: true, result: { dial: fn.dial }, idempotency_key: key, replayed: false };

    if (!(await this.deps.store.claim(key))) {
      // Done already, or running elsewhere: wait for its result rather than running twice.
      const deadline = Date.now() + (this.deps.waitMs ?? 60_000);
      for (;;) {
        const done = await this.deps.store.result(key);
        if (done) return { ...done, replayed: true };
        if (Date.now() > deadline) throw new WorkflowError('the first call with this key is still running; retry later', 409);
        if (await this.deps.store.claim(key)) break; // the first holder gave up: take over
        await new Promise((r) => setTimeout(r, 50));
      }
    }
    try {
      const answer = await this.run(fn.webhook!, input, key);
      await this.deps.store.finish(key, answer);
      return answer;
    } catch (error) {
      await this.deps.store.release(key);
      throw error;
    }
  }

  private async attempt(url: string, body: string, key: string): Promise<Attempt> {
    try {
      // Apps Script answers a POST with a 302 that must be fetched with GET; fetch does that.
      const res = await fetch(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': key },
        body,
        redirect: 'follow',
        signal: AbortSignal.timeout(this.deps.timeoutMs ?? 15_000),
      });
      const text = await res.text();
      let json: unknown = text;
      try {
        json = JSON.parse(text);
      } catch {
        /* plain text answer */
      }
      if (res.status >= 500) return { kind: 'retry', message: `HTTP ${res.status}` };
      if (res.status >= 400)
        return {
          kind: 'client',
          message: `HTTP ${res.status}: ${typeof json === 'object' ? JSON.stringify(json).slice(0, 500) : text.slice(0, 500)}`,
        };
      // The meter web app always answers 200; its `ok:false` is the real status.
      if (json && typeof json === 'object' && (json as { ok?: unknown }).ok === false) {
        const error = String((json as { error?: unknown }).error ?? 'refused');
        return /busy/.test(error) ? { kind: 'retry', message: error } : { kind: 'client', message: error };
      }
      return { kind: 'ok', result: json };
    } catch (error) {
      return {
        kind: 'retry',
        message: (error as Error).name === 'TimeoutError' ? 'timed out' : `network error (${(error as Error).message})`,
      };
    }
  }

  private async run(
    url: string,
    input: { function: string; args: Record<string, unknown>; call_id: string },
    key: string,
  ): Promise<WorkflowAnswer> {
    const body = JSON.stringify({ call_id: input.call_id, function: input.function, args: input.args, idempotency_key: key });
    let last = '';
    for (let n = 1; n <= 3; n++) {
      const a = await this.attempt(url, body, key);
      if (a.kind === 'ok') return { ok: true, result: a.result, idempotency_key: key, replayed: false };
      if (a.kind === 'client') return { ok: false, result: null, error: a.message, idempotency_key: key, replayed: false };
      last = a.message;
      if (n < 3) await new Promise((r) => setTimeout(r, (this.deps.backoffMs ?? ((i) => 500 * 2 ** (i - 1)))(n)));
    }
    const letter = JSON.stringify({
      function: input.function,
      args: input.args,
      call_id: input.call_id,
      idempotency_key: key,
      last_error: last,
      at: new Date().toISOString(),
    });
    const delivered = await this.postDeadLetter(letter);
    if (!delivered) await this.deps.store.pushDeadLetter(letter);
    this.deps.log.error(
      `workflow ${input.function} for call ${input.call_id} dead-lettered after 3 attempts: ${last}${delivered ? '' : ' (dead-letter URL down: kept, will retry)'}`,
    );
    return {
      ok: false,
      result: null,
      error: `target failed 3 times (${last}); dead-lettered`,
      dead_lettered: true,
      idempotency_key: key,
      replayed: false,
    };
  }

  private async postDeadLetter(letter: string): Promise<boolean> {
    try {
      const res = await fetch(this.deps.config.workflow.dlq_url, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: letter,
        signal: AbortSignal.timeout(10_000),
      });
      return res.ok;
    } catch {
      return false;
    }
  }

  /** Posts kept dead letters again, in order; stops at the first failure. */
  async flushDeadLetters(): Promise<number> {
    let sent = 0;
    for (;;) {
      const batch = await this.deps.store.takeDeadLetters(20);
      if (!batch.length) return sent;
      for (let i = 0; i < batch.length; i++) {
        if (!(await this.postDeadLetter(batch[i]))) {
          await this.deps.store.returnDeadLetters(batch.slice(i));
          return sent;
        }
        sent++;
      }
    }
  }
}

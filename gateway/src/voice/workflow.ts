/**
 * The automation workflow: `realtime.function_called` → the function's target.
 *   webhook     POST {call_id, function, args, idempotency_key, timezone} with `Idempotency-Key`
 *   static_url  answer the URL (the pricing page)
 *   dial        answer the number to dial (escalate_to_human)
 *
 * Idempotency: the key is sha256(call_id + function + canonical args), where canonical means key
 * order and whitespace do not matter. The first result is kept in Redis; a replay answers it with
 * `replayed: true` without calling the target, and a replay that arrives while the first call is
 * still running waits for it. Realtime APIs also emit function calls from interrupted responses;
 * the same rule makes them harmless.
 *
 * Errors: 5xx, 408, 429 or a network failure is retried with exponential backoff, 3 attempts in all,
 * then the payload (function, args, call_id, key, last error) goes to the dead-letter URL and the
 * answer says so. Another 4xx is not retried: the answer carries the target's message. When the dead-letter URL
 * is down too, the payload is kept in Redis and posted again later, one letter at a time and oldest
 * first however slowly the dead-letter URL answers: nothing is lost, also when the gateway is killed
 * in mid-post (at least once: such a letter is posted again; the receiver drops a repeat by key).
 *
 * Store: each step waits 2 s at most (its client holds commands while Redis is away). A claim or a
 * replay's read not answered in time is a 503 `workflow_store_unavailable` before the target is
 * called, so a retry is safe; an answer whose record is not answered in time is returned all the
 * same (the target is not asked twice) and its replay record may be missing.
 */
import { isPermanentRefusal } from '../../../schema/meter-reply';
import { createHash, randomUUID } from 'node:crypto';
import { retrying, type RetryPolicy } from '../backoff';
import { canonicalJson } from '../canonical-json';
import { cutText } from '../../../schema/cut-text';
import { within } from '../within';
import type { Concierge } from './config';
import type { WorkflowStore } from './workflow-store';

/** 3 attempts in all, 0.5 s then 1 s apart. */
const TARGET_RETRY: RetryPolicy = { attempts: 3, firstMs: 500 };
/** One post to the dead-letter URL; a new letter's caller waits no longer for its round. */
const DEAD_LETTER_POST_MS = 10_000;
/**
 * How long a store step may take: Redis answers in a millisecond, and the phone bridge's caller
 * waits in silence, so 2 s (the Cold queue's bound too) is the most a live call should lose to it.
 */
const STORE_MS = 2_000;
const STORE_UNAVAILABLE = 'workflow_store_unavailable';
/** Where a letter the dead-letter URL refuses for good goes, so it holds up none after it. */
const SET_ASIDE = '<prefix>:wf:dlq-refused';

/** What became of a post to the dead-letter URL. */
type Posted = 'taken' | 'failed' | { refused: number };

export function workflowKey(callId: string, fn: string, args: unknown): string {
  return createHash('sha256')
    .update(`${callId}\u0000${fn}\u0000${canonicalJson(args ?? {})}`)
    .digest('hex');
}

/**
 * A network error without the URLs in it: fetch quotes a URL it refuses whole (one with
 * user:password, say), and the message goes to the log, the dead letter and the model's answer.
 */
const withoutUrls = (message: string) => message.replace(/[a-z][a-z0-9+.-]*:\/\/\S*/gi, '<the target URL>');

/** An HTML page (by its type, or by its first tag when the type is missing or wrong), not a target's answer. */
function isHtml(contentType: string | null, text: string): boolean {
  return /\btext\/html\b/i.test(contentType ?? '') || /^\s*<(!doctype html|html)[\s>]/i.test(text);
}

export interface WorkflowAnswer {
  ok: boolean;
  result: unknown;
  idempotency_key: string;
  replayed: boolean;
  error?: string;
  dead_lettered?: boolean;
}

export class WorkflowError extends Error {
  constructor(
    message: string,
    readonly status = 400,
    /** A machine-readable code, for a failure a client tells apart (`workflow_store_unavailable`). */
    readonly code?: string,
    /** Seconds a client waits before calling again (`Retry-After`), when a retry is safe and soon worth it. */
    readonly retryAfterS?: number,
  ) {
    super(message);
  }
}

export interface WorkflowDeps {
  config: Concierge;
  store: WorkflowStore<WorkflowAnswer>;
  log: { warn: (m: string) => void; error: (m: string) => void };
  /** How a target that fails (5xx, network, meter busy) is retried; tests shorten it. */
  retry?: RetryPolicy;
  timeoutMs?: number;
  /** How long a replay waits for the first call to finish. */
  waitMs?: number;
}

/** One call of the target: an answer, a refusal retries cannot fix, or a failure worth a retry. */
type Attempt = { kind: 'ok'; result: unknown } | { kind: 'client'; message: string } | { kind: 'retry'; message: string };

export class Workflow {
  private timer: NodeJS.Timeout | null = null;
  /** The flush under way: one at a time, so letters go in order and a slow dead-letter URL is not piled on. */
  private flushing: Promise<number> | null = null;
  /** Names this instance's dead-letter rounds in the store. */
  private readonly holder = randomUUID();
  /** Stopped (a shutdown): no post starts. */
  private stopping = false;
  constructor(private readonly deps: WorkflowDeps) {}

  /** Posts undelivered dead letters again every `everyMs` (nothing is lost while the DLQ is down). */
  startDeadLetterRetry(everyMs = 30_000): void {
    this.timer = setInterval(() => void this.flushDeadLetters().catch(() => undefined), everyMs);
    this.timer.unref();
  }
  /**
   * Stops the retries. A round under way ends after the post it is making, that letter recorded
   * and the round given up, so another gateway goes on at once and posts none of them twice.
   */
  async stop(): Promise<void> {
    this.stopping = true;
    if (this.timer) clearInterval(this.timer);
    await this.flushing?.catch(() => undefined);
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

    if (!(await this.claim(key))) {
      // Done already, or running elsewhere: wait for its result rather than running twice (bounded
      // on the monotonic clock: one set back would hold the caller for the time given back).
      const deadline = performance.now() + (this.deps.waitMs ?? 60_000);
      for (;;) {
        const done = await this.bounded(this.deps.store.result(key), 'read', true);
        if (done) return { ...done, replayed: true };
        if (performance.now() > deadline) throw new WorkflowError('the first call with this key is still running; retry later', 409);
        if (await this.claim(key)) break; // the first holder gave up: take over
        await new Promise((r) => setTimeout(r, 50));
      }
    }
    let answer: WorkflowAnswer;
    try {
      answer = await this.run(fn.webhook!, input, key);
    } catch (error) {
      await this.bounded(this.deps.store.release(key), 'release').catch((e: Error) =>
        this.deps.log.warn(`workflow ${input.function} for call ${input.call_id}: key not freed (${e.message}); it lapses in 2 minutes`),
      );
      throw error;
    }
    // The target answered: that answer is the caller's whatever the store does now.
    await this.bounded(this.deps.store.finish(key, answer), 'record').catch((e: Error) =>
      this.deps.log.error(
        `workflow ${input.function} for call ${input.call_id}: answered, but its replay record may be missing (${e.message}); a replay after the in-flight marker lapses calls the target again`,
      ),
    );
    return answer;
  }

  /**
   * A store step within STORE_MS, or a 503 `workflow_store_unavailable` naming the store; before
   * the target is called (`before`), the message says a retry is safe.
   */
  private bounded<T>(step: Promise<T>, what: string, before = false): Promise<T> {
    return within(step, STORE_MS, 'the workflow store (Redis)').catch((error: Error) => {
      const message = `${error.message} (${what})${before ? ': nothing was called, call again' : ''}`;
      // Retry-After: 1, as the gateway's other 503s for a store that is away: a failover is seconds.
      throw new WorkflowError(message, 503, STORE_UNAVAILABLE, 1);
    });
  }

  /** Claims the key in time; a claim that lands after its caller gave up frees the key again, so a retry is not held off. */
  private async claim(key: string): Promise<boolean> {
    const claiming = this.deps.store.claim(key);
    try {
      return await this.bounded(claiming, 'claim', true);
    } catch (error) {
      void claiming.then((won) => (won ? this.deps.store.release(key) : undefined)).catch(() => undefined);
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
      // 408 and 429 ask for a later try (the target timed out waiting, or is rate-limited), as the
      // dead-letter posts take them: retried, then dead-lettered, never kept as a refusal for the key.
      if (res.status >= 500 || res.status === 408 || res.status === 429) return { kind: 'retry', message: `HTTP ${res.status}` };
      if (res.status >= 400)
        return {
          kind: 'client',
          message: `HTTP ${res.status}: ${cutText(typeof json === 'object' ? JSON.stringify(json) : text, 500)}`,
        };
      // A redirect fetch could not follow (a 302 without Location, a 300, a 304) reaches here as it
      // came: no answer of the target's either. Taken as one, its empty body was a booking made (and
      // replayed as one for a week); retried instead, then dead-lettered, as an HTML page is.
      if (res.status < 200 || res.status >= 300)
        return { kind: 'retry', message: `HTTP ${res.status}: a redirect not followed (no Location?), not the target's answer` };
      // Apps Script answers 200 whatever happened: a script that threw or ran out of time, or a
      // deployment that is not public (its sign-in page), comes back as an HTML page with a 200.
      // That is no answer of the target's: taken as one, a booking never made was a success (and
      // replayed as one); retried instead (the key makes that safe), then dead-lettered.
      if (isHtml(res.headers.get('content-type'), text))
        return {
          kind: 'retry',
          message: `HTTP ${res.status}: an HTML page, not the target's answer (an Apps Script error or sign-in page?)`,
        };
      // The meter web app always answers 200; its `ok:false` is the real status.
      if (json && typeof json === 'object' && (json as { ok?: unknown }).ok === false) {
        const { error, code } = json as { error?: unknown; code?: unknown };
        const message = String(error ?? 'refused');
        // By the meter's reply code: busy, a timeout half-way (internal) and code-less replies heal on a retry.
        return isPermanentRefusal(typeof code === 'string' ? code : undefined) ? { kind: 'client', message } : { kind: 'retry', message };
      }
      return { kind: 'ok', result: json };
    } catch (error) {
      return {
        kind: 'retry',
        message: (error as Error).name === 'TimeoutError' ? 'timed out' : `network error (${withoutUrls((error as Error).message)})`,
      };
    }
  }

  private async run(
    url: string,
    input: { function: string; args: Record<string, unknown>; call_id: string },
    key: string,
  ): Promise<WorkflowAnswer> {
    // The zone the caller's dates and times were agreed in: the back office books in its own, and refuses another.
    const timezone = this.deps.config.meta.timezone;
    const body = JSON.stringify({ call_id: input.call_id, function: input.function, args: input.args, idempotency_key: key, timezone });
    const policy = this.deps.retry ?? TARGET_RETRY;
    let last: string;
    try {
      const done = await retrying(async () => {
        const a = await this.attempt(url, body, key);
        if (a.kind === 'retry') throw new Error(a.message);
        return a;
      }, policy);
      return done.kind === 'ok'
        ? { ok: true, result: done.result, idempotency_key: key, replayed: false }
        : { ok: false, result: null, error: done.message, idempotency_key: key, replayed: false };
    } catch (error) {
      last = (error as Error).message;
    }
    const letter = JSON.stringify({
      function: input.function,
      args: input.args,
      call_id: input.call_id,
      idempotency_key: key,
      last_error: last,
      at: new Date().toISOString(),
    });
    let kept: boolean;
    try {
      kept = await this.deadLetter(letter);
    } catch (error) {
      // Neither kept nor delivered: answered as a failure, nothing remembered, so a call again runs it again.
      const message = `target failed ${policy.attempts} times (${last}); ${(error as Error).message}`;
      this.deps.log.error(`workflow ${input.function} for call ${input.call_id}: ${message}`);
      throw new WorkflowError(message, 503);
    }
    this.deps.log.error(
      `workflow ${input.function} for call ${input.call_id} dead-lettered after ${policy.attempts} attempts: ${last}${kept ? ' (kept: posted in its turn, after the letters before it)' : ''}`,
    );
    return {
      ok: false,
      result: null,
      error: `target failed ${policy.attempts} times (${last}); dead-lettered`,
      dead_lettered: true,
      idempotency_key: key,
      replayed: false,
    };
  }

  /**
   * Hands a new letter to the dead-letter URL behind those kept before it: it is kept first (a
   * crash in mid-post loses nothing), then a round posts the kept letters in order. True when it
   * is still kept after that round (the URL down, or another gateway's round posts it). Only with
   * the store refusing it is it posted at once, on its own; throws when that post fails too.
   */
  private async deadLetter(letter: string): Promise<boolean> {
    try {
      // Not kept in time: posted at once; should it land later it is posted again (at least once).
      await this.bounded(this.deps.store.pushDeadLetter(letter), 'dead letter');
    } catch (error) {
      if ((await this.postDeadLetter(letter)) === 'taken') return false;
      throw new Error(
        `the dead letter was neither kept (the store: ${(error as Error).message}) nor taken by the dead-letter URL: nothing is recorded for this call, call it again`,
        { cause: error },
      );
    }
    // The caller waits for one post at most, as before: a long round goes on without it.
    await within(this.flushDeadLetters(), DEAD_LETTER_POST_MS).catch(() => undefined);
    return this.bounded(this.deps.store.holds(letter), 'dead letter').catch(() => true);
  }

  /**
   * Posts a letter (a JSON text); its call's key goes as `Idempotency-Key` too, so a receiver drops
   * a repeat. `refused`: a 4xx other than 408 and 429, which no repeat of the same letter changes.
   */
  private async postDeadLetter(letter: string): Promise<Posted> {
    try {
      const key = (JSON.parse(letter) as { idempotency_key?: unknown }).idempotency_key;
      const res = await fetch(this.deps.config.workflow.dlq_url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...(typeof key === 'string' ? { 'idempotency-key': key } : {}) },
        body: letter,
        signal: AbortSignal.timeout(DEAD_LETTER_POST_MS),
      });
      await res.body?.cancel(); // the answer is not read: its connection is given back now, not at a collection
      if (res.ok) return 'taken';
      return res.status >= 400 && res.status < 500 && res.status !== 408 && res.status !== 429 ? { refused: res.status } : 'failed';
    } catch {
      return 'failed';
    }
  }

  /**
   * Posts kept dead letters again, in order; stops at the first failure. While one flush runs
   * (posts slower than the retry period) a second call joins it rather than posting beside it, and
   * while another instance's round runs this one posts nothing.
   */
  flushDeadLetters(): Promise<number> {
    return (this.flushing ??= this.postKept().finally(() => (this.flushing = null)));
  }

  private async postKept(): Promise<number> {
    const { store } = this.deps;
    let sent = 0;
    while (await store.openRound(this.holder)) {
      let round: { sent: number; drained: boolean };
      try {
        round = await this.postRound();
      } finally {
        await store.closeRound(this.holder);
      }
      sent += round.sent;
      // A letter kept after the round's last look, while it still held the lock, found it taken
      // and was left to this round: looked for once the lock is given up, not left to the timer.
      if (!round.drained || !(await store.peekDeadLetters(1)).length) return sent;
    }
    return sent;
  }

  /**
   * A letter leaves the store only after the dead-letter URL took it: a crash here loses none.
   * Drained: every letter delivered (not stopped by a failed post or a round lost).
   */
  private async postRound(): Promise<{ sent: number; drained: boolean }> {
    let sent = 0;
    for (;;) {
      const batch = await this.deps.store.peekDeadLetters(20);
      if (!batch.length) return { sent, drained: true };
      for (const letter of batch) {
        const posted = this.stopping ? 'failed' : await this.postDeadLetter(letter);
        if (posted === 'failed') return { sent, drained: false };
        if (posted === 'taken') sent++;
        else
          this.deps.log.error(
            `dead letter refused by the dead-letter URL (HTTP ${posted.refused}): set aside in ${SET_ASIDE}, the next one posted`,
          );
        const stillHeld =
          posted === 'taken' ? this.deps.store.delivered(this.holder, letter) : this.deps.store.setAside(this.holder, letter);
        if (!(await stillHeld)) return { sent, drained: false };
      }
    }
  }
}

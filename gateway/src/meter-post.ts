/**
 * Posting batches to the meter web app, shared by the file spool (meter-web-app.ts) and the Redis
 * stream (meter-stream.ts): `{"events":[...]}` with `?token=`, the web app's 302 followed with a GET
 * (fetch does that for a POST). A batch the meter could not take now starts a backoff (1 s doubling
 * up to `maxBackoffMs`); a batch it refuses as invalid is split in halves and each half sent again,
 * down to the single records it refuses, which are set aside with its reason. Each settled part is
 * handed to `done` in order, so the caller commits (moves its offset, acknowledges) only what the
 * meter has.
 */
import { isPermanentRefusal } from '../../schema/meter-reply';
import { backoffMs } from './backoff';
import type { Log } from './meter-sink';

export interface MeterPostOptions {
  url: string;
  /** The body key of a batch: `events` (default) or `calls`. */
  key?: string;
  token?: string;
  maxBackoffMs?: number;
  log: Log;
}

type Reply = { ok: boolean; error?: string; code?: string; appended?: number; duplicates?: number };

/** What happens to the items of a batch once the meter has answered for them. */
export interface Settling<I> {
  line: (item: I) => string;
  /** The meter has these (or they were set aside): commit them. */
  done: (items: I[]) => Promise<void>;
  /** The meter refused these for good, with its reason: keep them somewhere a person can read. */
  setAside: (items: I[], reason: string) => Promise<void>;
}

export class MeterPoster {
  /** Failed posts in a row: the next try waits backoffMs(failures). */
  private failures = 0;
  /** Monotonic ms: a wall clock set back during a backoff would hold every event for the time it went back. */
  private retryAt = 0;
  /** Delivery counters, read by tests and /health. */
  readonly stats = { delivered: 0, duplicates: 0, failedPosts: 0, rejected: 0 };

  constructor(private readonly opts: MeterPostOptions) {}

  /** True while the meter asked us to wait (a failed post's backoff). */
  waiting(): boolean {
    return performance.now() < this.retryAt;
  }

  /**
   * Delivers `items` in order; false when the meter could not take them now (nothing after the
   * failed part is committed: it is tried again after the backoff).
   */
  async settle<I>(items: I[], s: Settling<I>): Promise<boolean> {
    const reply = await this.post(items.map(s.line));
    if (!reply.ok && !isPermanentRefusal(reply.code)) {
      this.stats.failedPosts++;
      const wait = backoffMs(++this.failures, { firstMs: 1000, maxMs: this.opts.maxBackoffMs ?? 60_000 });
      this.retryAt = performance.now() + wait;
      this.opts.log.warn(`meter: ${reply.error ?? 'failed'}; ${items.length} event(s) stay spooled, retry in ${Math.round(wait / 1000)} s`);
      return false;
    }
    if (!reply.ok && items.length > 1) {
      const half = Math.ceil(items.length / 2);
      return (await this.settle(items.slice(0, half), s)) && (await this.settle(items.slice(half), s));
    }
    if (!reply.ok) {
      this.stats.rejected += items.length;
      await s.setAside(items, `refused by the meter: ${reply.error}`);
    } else {
      this.stats.delivered += reply.appended ?? 0;
      this.stats.duplicates += reply.duplicates ?? 0;
    }
    this.failures = 0;
    this.retryAt = 0;
    await s.done(items);
    return true;
  }

  private async post(lines: string[]): Promise<Reply> {
    const url = new URL(this.opts.url);
    if (this.opts.token) url.searchParams.set('token', this.opts.token);
    try {
      // Apps Script answers the POST with a 302; fetch follows it with a GET, as the web app needs.
      const res = await fetch(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: `{"${this.opts.key ?? 'events'}":[${lines.join(',')}]}`,
        redirect: 'follow',
        signal: AbortSignal.timeout(30_000),
      });
      if (!res.ok) return { ok: false, error: `HTTP ${res.status}` };
      return (await res.json().catch(() => ({ ok: false, error: 'the meter answered something that is not JSON' }))) as Reply;
    } catch (error) {
      return { ok: false, error: (error as Error).name === 'TimeoutError' ? 'timed out' : 'meter unreachable' };
    }
  }
}

/**
 * When a sink delivers: every `intervalMs` and when asked (`kick`), one delivery at a time, none
 * while the meter asked to wait. Shared by the file spool and the Redis stream.
 */
export class DeliveryLoop {
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<void> | null = null;
  private stopped = false;

  constructor(
    private readonly poster: MeterPoster,
    private readonly deliver: () => Promise<void>,
    private readonly onError: (error: Error) => void,
    private readonly intervalMs = 1000,
  ) {
    this.schedule();
  }

  /** Starts a delivery unless one runs or the meter asked us to wait. */
  kick(): void {
    if (this.poster.waiting()) return;
    this.running ??= this.deliver()
      .catch(this.onError)
      .finally(() => (this.running = null));
  }

  /** The delivery under way, if any. */
  get current(): Promise<void> | null {
    return this.running;
  }

  /** No more timed deliveries (a kick still delivers). */
  stop(): void {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
  }

  private schedule(): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => {
      this.kick();
      this.schedule();
    }, this.intervalMs);
    this.timer.unref();
  }
}

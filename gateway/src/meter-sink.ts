/**
 * Sends one meter event per provider call to the meter, off the request path.
 *
 * METER_URL set: events are appended to a spool file on disk first, then posted in batches of up
 * to 500 (`{"events":[...]}`) in order; the web app's 302 is followed with a GET (fetch does that
 * for a POST). Only a reply of `ok:true` moves the spool's committed offset, so while the meter is
 * unreachable events wait on disk and are replayed in order, also after a restart; the meter drops
 * event_ids it already has, so a batch sent twice (crash between post and commit) stores once. A
 * batch the meter refuses as invalid goes to `rejected.jsonl` beside the spool (kept, not retried).
 *
 * METER_URL unset: events are appended to a local CSV file with the events header.
 */
import { appendFile, mkdir, open, readFile, rename, stat, writeFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { GatewayEnv } from './env';
import { CSV_HEADER, eventToCsvLine, formatTimestamp, type EventRecord } from '../../schema/event-record';
import { backoffMs } from './backoff';
import { isPermanentRefusal } from '../../schema/meter-reply';

export interface MeterSink<T = EventRecord> {
  readonly kind: string;
  send(record: T): void;
  /** Writes what is pending (and, for the web app, tries to deliver it). */
  flush(): Promise<void>;
  close(): Promise<void>;
}

type Log = { warn: (msg: string) => void; info: (msg: string) => void; error: (msg: string) => void };

/** Serialises async file work: appends, reads and commits never interleave. */
class Chain {
  private tail: Promise<unknown> = Promise.resolve();
  run<T>(op: () => Promise<T>): Promise<T> {
    const next = this.tail.then(op, op);
    this.tail = next.catch(() => undefined);
    return next;
  }
}

export class CsvSink<T = EventRecord> implements MeterSink<T> {
  readonly kind = 'csv';
  private pending: T[] = [];
  private readonly chain = new Chain();
  private timer: NodeJS.Timeout | null = null;
  constructor(
    readonly file: string,
    private readonly header = CSV_HEADER,
    private readonly toLine: (record: T) => string = eventToCsvLine as unknown as (record: T) => string,
    /** A failed append (disk full, say) is reported here; it never crashes the gateway. */
    private readonly onError: (message: string) => void = (m) => process.stderr.write(`${m}\n`),
  ) {}
  // Records are turned into lines when flushed, off the request path.
  send(record: T): void {
    this.pending.push(record);
    this.timer ??= setTimeout(() => {
      this.flush().catch((error: Error) => this.onError(`meter CSV ${this.file}: ${error.message}`));
    }, 50);
  }
  flush(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    const lines = this.pending.map((r) => this.toLine(r));
    this.pending = [];
    if (lines.length === 0) return this.chain.run(async () => undefined);
    return this.chain.run(async () => {
      await mkdir(dirname(this.file), { recursive: true });
      const header = existsSync(this.file) ? '' : `${this.header}\n`;
      await appendFile(this.file, `${header}${lines.join('\n')}\n`);
    });
  }
  close(): Promise<void> {
    return this.flush();
  }
}

/** A meter event as JSON for the web app (timestamp as RFC 3339 UTC). */
function eventJson(event: EventRecord): Record<string, unknown> {
  return { ...event, timestamp: formatTimestamp(event.timestamp) };
}

export interface WebAppSinkOptions {
  url: string;
  /** The body key of a batch: `events` (default) or `calls`. */
  key?: string;
  token?: string;
  spoolDir: string;
  batchSize?: number;
  flushIntervalMs?: number;
  maxBackoffMs?: number;
  log: Log;
}

export class WebAppSink<T = EventRecord> implements MeterSink<T> {
  readonly kind = 'meter web app';
  private pending: T[] = [];
  /** Lines whose append to the spool failed, written before newer ones. */
  private unwritten: string[] = [];
  private readonly chain = new Chain();
  private readonly spool: string;
  private readonly offsetFile: string;
  private timer: NodeJS.Timeout | null = null;
  /** Failed posts in a row: the next try waits backoffMs(failures), 1 s doubling up to maxBackoffMs. */
  private failures = 0;
  private retryAt = 0;
  private delivering: Promise<void> | null = null;
  private closed = false;
  /** Delivery counters, read by tests. */
  readonly stats = { delivered: 0, duplicates: 0, failedPosts: 0, rejected: 0 };

  constructor(
    private readonly opts: WebAppSinkOptions,
    private readonly toJson: (record: T) => unknown = eventJson as unknown as (record: T) => unknown,
  ) {
    this.spool = join(opts.spoolDir, 'spool.jsonl');
    this.offsetFile = join(opts.spoolDir, 'spool.offset');
    this.schedule();
  }

  // Records are serialised when flushed, off the request path.
  send(record: T): void {
    this.pending.push(record);
    if (this.pending.length >= (this.opts.batchSize ?? 500)) void this.flush();
  }

  private schedule(): void {
    if (this.closed) return;
    this.timer = setTimeout(() => {
      this.flush()
        .catch((error: Error) => this.opts.log.error(`meter spool: ${error.message}; events stay in memory and are tried again`))
        .finally(() => this.schedule());
    }, this.opts.flushIntervalMs ?? 1000);
    this.timer.unref();
  }

  /** Appends pending events to the spool (durable), then delivers what the spool holds. */
  async flush(): Promise<void> {
    const lines = this.unwritten.concat(this.pending.map((r) => JSON.stringify(this.toJson(r))));
    this.pending = [];
    this.unwritten = [];
    if (lines.length) {
      try {
        await this.chain.run(async () => {
          await mkdir(this.opts.spoolDir, { recursive: true });
          await appendFile(this.spool, `${lines.join('\n')}\n`);
        });
      } catch (error) {
        this.unwritten = lines; // not on disk yet: kept, and written first next time (in order)
        throw error;
      }
    }
    if (Date.now() < this.retryAt) return;
    this.delivering ??= this.deliver().finally(() => (this.delivering = null));
    await this.delivering;
  }

  private async readOffset(): Promise<number> {
    try {
      return Number((await readFile(this.offsetFile, 'utf8')).trim()) || 0;
    } catch {
      return 0;
    }
  }

  /** Next batch from the committed offset: whole lines only. */
  private async nextBatch(offset: number): Promise<{ lines: string[]; bytes: number } | null> {
    if (!existsSync(this.spool)) return null;
    const size = (await stat(this.spool)).size;
    if (offset >= size) return null;
    const fh = await open(this.spool, 'r');
    try {
      const length = Math.min(size - offset, 4 * 1024 * 1024);
      const buf = Buffer.alloc(length);
      await fh.read(buf, 0, length, offset);
      const text = buf.toString('utf8');
      const end = text.lastIndexOf('\n');
      if (end < 0) return null;
      const lines = text
        .slice(0, end)
        .split('\n')
        .slice(0, this.opts.batchSize ?? 500);
      const bytes = lines.reduce((n, l) => n + Buffer.byteLength(l) + 1, 0);
      return { lines, bytes };
    } finally {
      await fh.close();
    }
  }

  private async post(lines: string[]): Promise<{ ok: boolean; error?: string; code?: string; appended?: number; duplicates?: number }> {
    const url = new URL(this.opts.url);
    if (this.opts.token) url.searchParams.set('token', this.opts.token);
    // Apps Script answers the POST with a 302; fetch follows it with a GET, as the web app needs.
    const res = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: `{"${this.opts.key ?? 'events'}":[${lines.join(',')}]}`,
      redirect: 'follow',
      signal: AbortSignal.timeout(30_000),
    });
    if (!res.ok) return { ok: false, error: `HTTP ${res.status}` };
    try {
      return (await res.json()) as { ok: boolean; error?: string };
    } catch {
      return { ok: false, error: 'the meter answered something that is not JSON' };
    }
  }

  private async deliver(): Promise<void> {
    for (;;) {
      const offset = await this.chain.run(() => this.readOffset());
      const batch = await this.chain.run(() => this.nextBatch(offset));
      if (!batch) {
        await this.chain.run(() => this.compact(offset));
        return;
      }
      let reply: { ok: boolean; error?: string; code?: string; appended?: number; duplicates?: number };
      try {
        reply = await this.post(batch.lines);
      } catch (error) {
        reply = { ok: false, error: (error as Error).name === 'TimeoutError' ? 'timed out' : 'meter unreachable' };
      }
      if (!reply.ok && !isPermanentRefusal(reply.code)) {
        this.stats.failedPosts++;
        const wait = backoffMs(++this.failures, { firstMs: 1000, maxMs: this.opts.maxBackoffMs ?? 60_000 });
        this.retryAt = Date.now() + wait;
        this.opts.log.warn(
          `meter: ${reply.error ?? 'failed'}; ${batch.lines.length} event(s) stay spooled, retry in ${Math.round(wait / 1000)} s`,
        );
        return;
      }
      if (!reply.ok) {
        this.stats.rejected += batch.lines.length;
        this.opts.log.error(`meter refused a batch (${reply.error}); kept in rejected.jsonl`);
        await appendFile(join(this.opts.spoolDir, 'rejected.jsonl'), `${batch.lines.join('\n')}\n`);
      } else {
        this.stats.delivered += reply.appended ?? 0;
        this.stats.duplicates += reply.duplicates ?? 0;
      }
      this.failures = 0;
      this.retryAt = 0;
      await this.chain.run(() => writeFile(this.offsetFile, String(offset + batch.bytes)));
    }
  }

  /** When everything is delivered, start the spool afresh so it does not grow forever. */
  private async compact(offset: number): Promise<void> {
    if (!existsSync(this.spool)) return;
    const size = (await stat(this.spool)).size;
    if (offset < size || size < 1024 * 1024) return;
    await rename(this.spool, `${this.spool}.done`);
    await writeFile(this.offsetFile, '0');
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    await this.flush();
  }
}

export function createMeterSink(
  env: Pick<GatewayEnv, 'METER_URL' | 'METER_TOKEN' | 'METER_SPOOL_DIR' | 'METER_CSV_FILE'>,
  log: Log,
): MeterSink {
  if (env.METER_URL) return new WebAppSink({ url: env.METER_URL, token: env.METER_TOKEN, spoolDir: env.METER_SPOOL_DIR, log });
  return new CsvSink(env.METER_CSV_FILE, CSV_HEADER, eventToCsvLine, (m) => log.error(m));
}

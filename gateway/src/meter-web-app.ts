/**
 * The meter web app as a sink: records are appended to a spool file (append-log.ts: `send`
 * resolves once a record is on disk), then posted in batches of up to 500 (`{"events":[...]}`) in
 * order; the web app's 302 is followed with a GET (fetch does that for a POST). Only a reply of
 * `ok:true` moves the spool's committed offset, so while the meter is unreachable records wait on
 * disk and are replayed in order, also after a restart; the meter drops event_ids it already has,
 * so a batch sent twice (crash between post and commit) stores once.
 *
 * A batch the meter refuses as invalid is split in halves and each half sent again, down to the
 * single records it refuses: those go to `rejected.jsonl` with the meter's reason, every other
 * record is delivered. A record that breaks the shared record's rules (`check`) is set aside there
 * before it is ever spooled. A backlog over `maxSpoolBytes` (1 GiB) is an error and a notice, again
 * at each further 10 %: nothing is dropped, the order stays oldest first.
 */
import { isPermanentRefusal } from '../../schema/meter-reply';
import { appendFile, open, readFile, rename, stat, writeFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { formatTimestamp, type EventRecord } from '../../schema/event-record';
import { AppendLog } from './append-log';
import { backoffMs } from './backoff';
import type { Log, MeterSink } from './meter-sink';

const DEFAULT_MAX_SPOOL_BYTES = 1024 ** 3;

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
  /** Bytes waiting in the spool above which the sink alerts (default 1 GiB). */
  maxSpoolBytes?: number;
  /** The reason the meter would refuse a record (its JSON), or null: checked before spooling. */
  check?: (json: unknown) => string | null;
  /** Told when the backlog passes maxSpoolBytes, and at each further 10 % (a notice to people). */
  onBacklog?: (message: string) => void;
  log: Log;
}

type Reply = { ok: boolean; error?: string; code?: string; appended?: number; duplicates?: number };

export class WebAppSink<T = EventRecord> implements MeterSink<T> {
  readonly kind = 'meter web app';
  private readonly spool: AppendLog;
  private readonly offsetFile: string;
  private timer: NodeJS.Timeout | null = null;
  /** Failed posts in a row: the next try waits backoffMs(failures), 1 s doubling up to maxBackoffMs. */
  private failures = 0;
  private retryAt = 0;
  private delivering: Promise<void> | null = null;
  private closed = false;
  private unsent = 0;
  /** Bytes spooled and not delivered (exact after each delivery, counted up between). */
  private backlog = 0;
  private alertedAt = 0;
  /** Delivery counters, read by tests and /health. */
  readonly stats = { delivered: 0, duplicates: 0, failedPosts: 0, rejected: 0 };

  constructor(
    private readonly opts: WebAppSinkOptions,
    private readonly toJson: (record: T) => unknown = eventJson as unknown as (record: T) => unknown,
  ) {
    this.spool = new AppendLog(join(opts.spoolDir, 'spool.jsonl'), { onError: (m) => opts.log.error(`meter spool ${m}`) });
    this.offsetFile = join(opts.spoolDir, 'spool.offset');
    this.schedule();
  }

  send(record: T): Promise<void> {
    const json = this.toJson(record);
    const line = JSON.stringify(json);
    const problem = this.opts.check?.(json) ?? null;
    if (problem) return this.setAside([line], `refused before spooling: ${problem}`).catch(() => undefined);
    this.backlog += line.length + 1;
    this.checkBacklog();
    const written = this.spool.append(line);
    if (++this.unsent >= (this.opts.batchSize ?? 500)) {
      this.unsent = 0;
      void written.then(() => this.kick());
    }
    return written;
  }

  private schedule(): void {
    if (this.closed) return;
    this.timer = setTimeout(() => {
      this.kick();
      this.schedule();
    }, this.opts.flushIntervalMs ?? 1000);
    this.timer.unref();
  }

  /** Starts a delivery unless one runs or the meter asked us to wait. */
  private kick(): void {
    if (Date.now() < this.retryAt) return;
    this.delivering ??= this.deliver()
      .catch((error: Error) => this.opts.log.error(`meter spool: ${error.message}; events stay spooled and are tried again`))
      .finally(() => (this.delivering = null));
  }

  /** Writes what was sent to the spool, then delivers what the spool holds (unless backing off). */
  async flush(): Promise<void> {
    await this.spool.written();
    if (Date.now() < this.retryAt) return;
    this.kick();
    await this.delivering;
  }

  private async readOffset(): Promise<number> {
    try {
      return Number((await readFile(this.offsetFile, 'utf8')).trim()) || 0;
    } catch {
      return 0;
    }
  }

  /** Next batch from the committed offset: whole lines only. An offset past the end (a replaced spool) starts over. */
  private async nextBatch(committed: number): Promise<{ lines: string[]; offset: number; size: number } | null> {
    if (!existsSync(this.spool.file)) return null;
    const size = (await stat(this.spool.file)).size;
    const offset = committed > size ? 0 : committed;
    this.backlog = size - offset;
    this.checkBacklog();
    if (offset >= size) return null;
    const fh = await open(this.spool.file, 'r');
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
      return { lines, offset, size };
    } finally {
      await fh.close();
    }
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

  private async deliver(): Promise<void> {
    for (;;) {
      const committed = await this.spool.chain.run(() => this.readOffset());
      const batch = await this.spool.chain.run(() => this.nextBatch(committed));
      if (!batch) {
        await this.spool.chain.run(() => this.compact(committed));
        return;
      }
      if (!(await this.settle(batch.lines, batch.offset))) return;
    }
  }

  /**
   * Delivers `lines` (spooled from byte `offset`) and commits past them. A refusal of the records
   * splits them in halves, each settled in order, down to the single records the meter refuses.
   * False when the meter could not take them now (they stay spooled, retried after the backoff).
   */
  private async settle(lines: string[], offset: number): Promise<boolean> {
    const reply = await this.post(lines);
    const end = offset + lines.reduce((n, l) => n + Buffer.byteLength(l) + 1, 0);
    if (!reply.ok && !isPermanentRefusal(reply.code)) {
      this.stats.failedPosts++;
      const wait = backoffMs(++this.failures, { firstMs: 1000, maxMs: this.opts.maxBackoffMs ?? 60_000 });
      this.retryAt = Date.now() + wait;
      this.opts.log.warn(`meter: ${reply.error ?? 'failed'}; ${lines.length} event(s) stay spooled, retry in ${Math.round(wait / 1000)} s`);
      return false;
    }
    if (!reply.ok && lines.length > 1) {
      const half = Math.ceil(lines.length / 2);
      const mid = offset + lines.slice(0, half).reduce((n, l) => n + Buffer.byteLength(l) + 1, 0);
      return (await this.settle(lines.slice(0, half), offset)) && (await this.settle(lines.slice(half), mid));
    }
    if (!reply.ok) await this.setAside(lines, `refused by the meter: ${reply.error}`);
    else {
      this.stats.delivered += reply.appended ?? 0;
      this.stats.duplicates += reply.duplicates ?? 0;
    }
    this.failures = 0;
    this.retryAt = 0;
    await this.spool.chain.run(() => writeFile(this.offsetFile, String(end)));
    return true;
  }

  /** Records that are never retried: kept in rejected.jsonl, one per line, with the reason. */
  private async setAside(lines: string[], reason: string): Promise<void> {
    this.stats.rejected += lines.length;
    this.opts.log.error(`meter: ${lines.length} event(s) ${reason}; kept in rejected.jsonl`);
    const at = new Date().toISOString();
    const text = lines.map((l) => `{"rejected_at":"${at}","reason":${JSON.stringify(reason)},"record":${l}}\n`).join('');
    await this.spool.chain.run(() => appendFile(join(this.opts.spoolDir, 'rejected.jsonl'), text));
  }

  /** When everything is delivered, start the spool afresh so it does not grow forever. */
  private async compact(offset: number): Promise<void> {
    if (!existsSync(this.spool.file)) return;
    const size = (await stat(this.spool.file)).size;
    if (offset < size || size < 1024 * 1024) return;
    await this.spool.release(); // later appends go to the new spool, not the renamed one
    await rename(this.spool.file, `${this.spool.file}.done`);
    await writeFile(this.offsetFile, '0');
  }

  private checkBacklog(): void {
    const limit = this.opts.maxSpoolBytes ?? DEFAULT_MAX_SPOOL_BYTES;
    if (this.backlog <= limit) {
      if (this.alertedAt) this.opts.log.info(`meter spool back under its limit (${mb(this.backlog)} waiting)`);
      this.alertedAt = 0;
      return;
    }
    if (this.backlog < this.alertedAt * 1.1) return;
    this.alertedAt = this.backlog;
    const message =
      `meter spool holds ${mb(this.backlog)} not yet delivered, over its ${mb(limit)} limit: the meter has not taken events ` +
      `for a while. Nothing is dropped (oldest first, on disk in ${this.opts.spoolDir}); check METER_URL, METER_TOKEN and the ` +
      `web app, and the disk's free space.`;
    this.opts.log.error(message);
    this.opts.onBacklog?.(message);
  }

  status(): Record<string, unknown> {
    const limit = this.opts.maxSpoolBytes ?? DEFAULT_MAX_SPOOL_BYTES;
    return {
      kind: this.kind,
      spool_backlog_bytes: this.backlog,
      spool_limit_bytes: limit,
      over_limit: this.backlog > limit,
      unwritten: this.spool.unwritten,
      ...this.stats,
    };
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    try {
      await this.flush();
    } finally {
      await this.spool.close();
    }
  }
}

const mb = (bytes: number) => `${(bytes / 1024 ** 2).toFixed(1)} MB`;

/**
 * The meter web app as a sink: records are appended to a spool file (append-log.ts: `send`
 * resolves once a record is on disk), then posted in batches of up to 500 (meter-post.ts) in
 * order. Only what the meter has moves the spool's committed offset, so while the meter is
 * unreachable records wait on disk and are replayed in order, also after a restart; the meter
 * drops event_ids it already has, so a batch sent twice (crash between post and commit) stores once.
 *
 * The spool folder belongs to one process (meter-spool-lock.ts): a second gateway in the same
 * working directory takes `<dir>.2`, and a restarted one takes over the folder of a dead one.
 *
 * Records the meter refuses for good go to `rejected.jsonl` with the meter's reason, every other
 * record of their batch is delivered. A record that breaks the shared record's rules (`check`) is
 * set aside there before it is ever spooled. A backlog over `maxSpoolBytes` (1 GiB) is an error and a notice, again
 * at each further 10 %: nothing is dropped, the order stays oldest first.
 */
import { appendFile, open, readFile, rename, stat, writeFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { formatTimestamp, type EventRecord } from '../../schema/event-record';
import { AppendLog } from './append-log';
import { DeliveryLoop, MeterPoster } from './meter-post';
import { takeSpoolFolder, type SpoolFolder } from './meter-spool-lock';
import type { Log, MeterSink } from './meter-sink';

const DEFAULT_MAX_SPOOL_BYTES = 1024 ** 3;

/** A meter event as JSON for the web app (timestamp as RFC 3339 UTC). */
export function eventJson(event: EventRecord): Record<string, unknown> {
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

export class WebAppSink<T = EventRecord> implements MeterSink<T> {
  readonly kind = 'meter web app';
  private readonly spool: AppendLog;
  private readonly offsetFile: string;
  private readonly folder: SpoolFolder;
  private readonly poster: MeterPoster;
  private readonly loop: DeliveryLoop;
  private unsent = 0;
  /** Bytes spooled and not delivered (exact after each delivery, counted up between). */
  private backlog = 0;
  private alertedAt = 0;

  constructor(
    private readonly opts: WebAppSinkOptions,
    private readonly toJson: (record: T) => unknown = eventJson as unknown as (record: T) => unknown,
  ) {
    this.folder = takeSpoolFolder(opts.spoolDir);
    if (this.folder.heldBy)
      opts.log.warn(`meter spool: ${opts.spoolDir} is held by process ${this.folder.heldBy}; this gateway spools to ${this.folder.dir}`);
    if (this.folder.problem) opts.log.error(`meter spool: cannot lock ${this.folder.dir}: ${this.folder.problem}`);
    this.poster = new MeterPoster(opts);
    this.spool = new AppendLog(join(this.folder.dir, 'spool.jsonl'), { onError: (m) => opts.log.error(`meter spool ${m}`) });
    this.offsetFile = join(this.folder.dir, 'spool.offset');
    this.loop = new DeliveryLoop(
      this.poster,
      () => this.deliver(),
      (error) => opts.log.error(`meter spool: ${error.message}; events stay spooled and are tried again`),
      opts.flushIntervalMs,
    );
  }

  /** Delivery counters, read by tests and /health. */
  get stats() {
    return this.poster.stats;
  }

  /** The folder this process spools to (the one asked for unless another process holds it). */
  get dir(): string {
    return this.folder.dir;
  }

  send(record: T): Promise<void> {
    const json = this.toJson(record);
    const line = JSON.stringify(json);
    const problem = this.opts.check?.(json) ?? null;
    if (problem) {
      this.poster.stats.rejected++;
      return this.setAside([line], `refused before spooling: ${problem}`).catch(() => undefined);
    }
    this.backlog += line.length + 1;
    this.checkBacklog();
    const written = this.spool.append(line);
    if (++this.unsent >= (this.opts.batchSize ?? 500)) {
      this.unsent = 0;
      void written.then(() => this.loop.kick());
    }
    return written;
  }

  /** Writes what was sent to the spool, then delivers what the spool holds (unless backing off). */
  async flush(): Promise<void> {
    await this.spool.written();
    if (this.poster.waiting()) return;
    this.loop.kick();
    await this.loop.current;
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

  private async deliver(): Promise<void> {
    for (;;) {
      const committed = await this.spool.chain.run(() => this.readOffset());
      const batch = await this.spool.chain.run(() => this.nextBatch(committed));
      if (!batch) {
        await this.spool.chain.run(() => this.compact(committed));
        return;
      }
      let at = batch.offset;
      const settled = await this.poster.settle(batch.lines, {
        line: (l) => l,
        setAside: (lines, reason) => this.setAside(lines, reason),
        // Commits past each settled part: the offset moves only over what the meter has.
        done: (lines) => {
          at += lines.reduce((n, l) => n + Buffer.byteLength(l) + 1, 0);
          const end = at;
          return this.spool.chain.run(() => writeFile(this.offsetFile, String(end)));
        },
      });
      if (!settled) return;
    }
  }

  /** Records that are never retried: kept in rejected.jsonl, one per line, with the reason. */
  private async setAside(lines: string[], reason: string): Promise<void> {
    this.opts.log.error(`meter: ${lines.length} event(s) ${reason}; kept in rejected.jsonl`);
    const at = new Date().toISOString();
    const text = lines.map((l) => `{"rejected_at":"${at}","reason":${JSON.stringify(reason)},"record":${l}}\n`).join('');
    await this.spool.chain.run(() => appendFile(join(this.folder.dir, 'rejected.jsonl'), text));
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
      `for a while. Nothing is dropped (oldest first, on disk in ${this.folder.dir}); check METER_URL, METER_TOKEN and the ` +
      `web app, and the disk's free space.`;
    this.opts.log.error(message);
    this.opts.onBacklog?.(message);
  }

  status(): Record<string, unknown> {
    const limit = this.opts.maxSpoolBytes ?? DEFAULT_MAX_SPOOL_BYTES;
    return {
      kind: this.kind,
      spool_dir: this.folder.dir,
      spool_backlog_bytes: this.backlog,
      spool_limit_bytes: limit,
      over_limit: this.backlog > limit,
      unwritten: this.spool.unwritten,
      ...this.stats,
    };
  }

  async close(): Promise<void> {
    this.loop.stop();
    try {
      await this.flush();
    } finally {
      await this.spool.close();
      this.folder.release();
    }
  }
}

const mb = (bytes: number) => `${(bytes / 1024 ** 2).toFixed(1)} MB`;

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
 * The spool is compacted once `compactBytes` (1 MiB) of it are delivered: emptied when all of it
 * is, and under steady traffic, when it is never all delivered, started afresh with the part not
 * yet delivered once that part is no larger than what is dropped (each byte copied at most about
 * once). The committed offset names the spool file it counts in (its inode), so after a crash in
 * the middle of a compaction an offset of the old file is never applied to the new one.
 *
 * Records the meter refuses for good go to `rejected.jsonl` with the meter's reason, every other
 * record of their batch is delivered. A record that breaks the shared record's rules (`check`) is
 * set aside there before it is ever spooled. A backlog over `maxSpoolBytes` (1 GiB) is an error and a notice, again
 * at each further 10 %: nothing is dropped, the order stays oldest first.
 */
import { appendFile, link, open, readFile, rename, stat, unlink, writeFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { formatTimestamp, type EventRecord } from '../../schema/event-record';
import { AppendLog } from './append-log';
import { DeliveryLoop, MeterPoster } from './meter-post';
import { takeSpoolFolder, type SpoolFolder } from './meter-spool-lock';
import type { Log, MeterSink } from './meter-sink';

const DEFAULT_MAX_SPOOL_BYTES = 1024 ** 3;
const DEFAULT_COMPACT_BYTES = 1024 ** 2;

/** The committed offset and the spool file it counts in (null: written by an earlier version, the current file). */
type Committed = { ino: number | null; offset: number };
/** A spool line's text and its size on disk with its line break: the offset moves by the bytes read. */
type SpoolLine = { text: string; bytes: number };

/**
 * The first `max` whole lines of `buf`, each decoded on its own: a line a failed write left cut
 * inside a character decodes with a replacement character, longer than its bytes, and the offset
 * must not move past what was read.
 */
function spoolLines(buf: Buffer, max: number): SpoolLine[] {
  const lines: SpoolLine[] = [];
  for (let at = 0, nl = buf.indexOf(0x0a); nl !== -1 && lines.length < max; at = nl + 1, nl = buf.indexOf(0x0a, at))
    lines.push({ text: buf.toString('utf8', at, nl), bytes: nl + 1 - at });
  return lines;
}

/**
 * A refused line as rejected.jsonl's `record`: the JSON it holds, or, for a line a failed write cut
 * short (no JSON), its text as a JSON string. Written as it was, that line was no JSON object and jq
 * stopped reading the file there.
 */
function asRecord(line: string): string {
  try {
    JSON.parse(line);
    return line;
  } catch {
    return JSON.stringify(line);
  }
}

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
  /** Delivered bytes from which the spool is compacted (default 1 MiB). */
  compactBytes?: number;
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

  /** `<inode>:<offset>`, or a bare offset as earlier versions wrote it. */
  private async readOffset(): Promise<Committed> {
    try {
      const [a, b] = (await readFile(this.offsetFile, 'utf8')).trim().split(':');
      return b === undefined ? { ino: null, offset: Number(a) || 0 } : { ino: Number(a), offset: Number(b) || 0 };
    } catch {
      return { ino: null, offset: 0 };
    }
  }

  /** Written aside, then renamed over: a crash never leaves an empty offset (it would post the whole spool again). */
  private async commit(ino: number, offset: number): Promise<void> {
    await writeFile(`${this.offsetFile}.next`, `${ino}:${offset}`);
    await rename(`${this.offsetFile}.next`, this.offsetFile);
  }

  /** Next batch from the committed offset: whole lines only. An offset of another file, or past the end (a replaced spool), starts over. */
  private async nextBatch(committed: Committed): Promise<{ lines: SpoolLine[]; offset: number; ino: number } | null> {
    if (!existsSync(this.spool.file)) return null;
    const { size, ino } = await stat(this.spool.file);
    const offset = (committed.ino !== null && committed.ino !== ino) || committed.offset > size ? 0 : committed.offset;
    this.backlog = size - offset;
    this.checkBacklog();
    if (offset >= size) return null;
    const fh = await open(this.spool.file, 'r');
    try {
      const length = Math.min(size - offset, 4 * 1024 * 1024);
      const buf = Buffer.alloc(length);
      await fh.read(buf, 0, length, offset);
      const lines = spoolLines(buf, this.opts.batchSize ?? 500);
      return lines.length ? { lines, offset, ino } : null;
    } finally {
      await fh.close();
    }
  }

  private async deliver(): Promise<void> {
    for (;;) {
      // The offset is read and written only here, one delivery at a time: not in the appends' chain.
      const committed = await this.readOffset();
      const batch = await this.spool.chain.run(() => this.nextBatch(committed));
      if (!batch) {
        await this.compact(committed); // a delivered spool found at start
        return;
      }
      let at = batch.offset;
      const settled = await this.poster.settle(batch.lines, {
        line: (l) => l.text,
        setAside: (lines, reason) =>
          this.setAside(
            lines.map((l) => l.text),
            reason,
          ),
        // Commits past each settled part: the offset moves only over what the meter has.
        done: (lines) => {
          at += lines.reduce((n, l) => n + l.bytes, 0);
          const end = at;
          return this.commit(batch.ino, end);
        },
      });
      if (!settled) return;
      await this.compact({ ino: batch.ino, offset: at });
    }
  }

  /** Records that are never retried: kept in rejected.jsonl, one per line, with the reason (also the Redis stream's, when Redis is away). */
  async setAside(lines: string[], reason: string): Promise<void> {
    this.opts.log.error(`meter: ${lines.length} event(s) ${reason}; kept in rejected.jsonl`);
    const at = new Date().toISOString();
    const text = lines.map((l) => `{"rejected_at":"${at}","reason":${JSON.stringify(reason)},"record":${asRecord(l)}}\n`).join('');
    await this.spool.chain.run(() => appendFile(join(this.folder.dir, 'rejected.jsonl'), text));
  }

  /**
   * All delivered: the spool is moved to `spool.jsonl.done` and appends start a new one. Part
   * delivered (traffic never stops): the rest is copied to a new file that replaces the spool (the
   * old one kept as `.done`), once the rest is no larger than the part delivered. The copy is made
   * beside the appends, and only what they added meanwhile is copied while they wait, with the
   * swap. The offset is committed afresh after; a crash before leaves an offset of the old file,
   * which the new one does not take (its inode differs).
   */
  private async compact(delivered: Committed): Promise<void> {
    // Decided beside the appends (the spool only grows; the swap below looks again), so a batch
    // that is not due for compaction holds no append back.
    const seen = await this.compactable(delivered);
    if (!seen) return;
    if (seen.size === delivered.offset) return this.spool.chain.run(() => this.retire(seen.size));
    const next = `${this.spool.file}.next`;
    await this.copyRange(delivered.offset, seen.size, next, 'w');
    await this.spool.chain.run(async () => {
      const { size } = await stat(this.spool.file); // the spool is only appended to: [seen, size) is new
      if (size > seen.size) await this.copyRange(seen.size, size, next, 'a');
      await this.spool.release(); // later appends go to the new spool, not the replaced one
      // The old spool stays readable as `.done` (a second name for it), and the swap is one rename:
      // at every moment the spool's name holds every event not yet delivered.
      await unlink(`${this.spool.file}.done`).catch(() => undefined);
      await link(this.spool.file, `${this.spool.file}.done`);
      await rename(next, this.spool.file);
      await this.commit((await stat(this.spool.file)).ino, 0);
    });
  }

  /** The spool's size when it is due for compaction (1 MiB delivered, the rest no larger), else null. */
  private async compactable(delivered: Committed): Promise<{ size: number } | null> {
    if (delivered.offset < (this.opts.compactBytes ?? DEFAULT_COMPACT_BYTES) || !existsSync(this.spool.file)) return null;
    const { size, ino } = await stat(this.spool.file);
    if (delivered.ino !== null && delivered.ino !== ino) return null;
    if (size - delivered.offset > delivered.offset) return null;
    return { size };
  }

  /** A spool delivered in full, unless appended to since it was seen (run in the chain: no append in between). */
  private async retire(delivered: number): Promise<void> {
    if ((await stat(this.spool.file)).size !== delivered) return;
    await this.spool.release();
    await rename(this.spool.file, `${this.spool.file}.done`);
    await writeFile(this.offsetFile, '0'); // any new spool: its offset then names it
  }

  /**
   * Bytes [from, to) of the spool into `dest`, a piece at a time: read whole into one buffer, the compaction
   * after an outage held half the backlog in memory at once (512 MB of a 1 GiB spool). One buffer,
   * reused: a stream pipeline takes a new one per read, which the collector frees late (20 MB at the
   * peak of meter-sink.test.ts's compaction, against 5 MB).
   */
  private async copyRange(from: number, to: number, dest: string, flags: 'w' | 'a'): Promise<void> {
    const src = await open(this.spool.file, 'r');
    try {
      const out = await open(dest, flags);
      try {
        const buf = Buffer.allocUnsafe(Math.min(to - from, 1024 ** 2)); // one piece at a time, reused
        for (let at = from; at < to;) {
          const { bytesRead } = await src.read(buf, 0, Math.min(buf.length, to - at), at);
          if (bytesRead === 0) break;
          for (let done = 0; done < bytesRead;) done += (await out.write(buf, done, bytesRead - done)).bytesWritten;
          at += bytesRead;
        }
      } finally {
        await out.close();
      }
    } finally {
      await src.close();
    }
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

/**
 * A file that lines are appended to with group commit: every line appended in one turn of the
 * event loop (the answers of concurrent requests) is written by one write, and each `append`
 * resolves once its write returned. A written line survives a crash of this process (it is in the
 * kernel's page cache); to survive a crash of the machine, the file is fdatasync'ed once a second
 * when something was written, so a power loss costs at most the last second or so. The file stays
 * open between writes (one write per group, no open and close) and is closed after each sync: a
 * file moved away or deleted is followed by a new one within a second.
 *
 * The write itself is synchronous (an append of a few hundred bytes to the page cache takes a few
 * microseconds); through the thread pool, its hand-off (a promise, a wake-up there and one back)
 * cost about 15 µs of CPU per request on the gateway's hot path (`npm run bench:gateway`). Opening
 * the file and the fdatasync stay off the event loop.
 *
 * Several processes may append to one file (two gateways in one working directory share the
 * CSV): the file is opened O_APPEND, each write() carries whole lines only (a group is cut at line
 * breaks into pieces of at most 256 KiB, one write each; Linux appends one write() to a local
 * file in one piece), and a new file gets its header by a hard link of a complete header file, so
 * it is written once and before any line.
 *
 * A write that fails (disk full, a folder that is not one) is logged; its lines stay in memory,
 * before newer ones, and are written whole when the disk takes them again (retried with backoff).
 * Part of a line a failed write left (the disk filled in the middle of it) is ended with a line break
 * first, so it stays a line of its own. While it fails, appends resolve at once: answers are not
 * held back by a broken disk.
 */
import { link, mkdir, open, unlink, writeFile, type FileHandle } from 'node:fs/promises';
import { dirname } from 'node:path';
import { writeSync } from 'node:fs';
import { backoffMs } from './backoff';

/** The largest piece written by one write(): whole lines up to this size. */
const PIECE_BYTES = 256 * 1024;

/** Whether the file's last byte is a line break (`size`: the file's size, over 0). */
async function endsWithLineBreak(handle: FileHandle, size: number): Promise<boolean> {
  const last = Buffer.alloc(1);
  await handle.read(last, 0, 1, size - 1);
  return last[0] === 0x0a;
}

function countLineBreaks(buf: Buffer): number {
  let n = 0;
  for (let at = buf.indexOf(0x0a); at >= 0; at = buf.indexOf(0x0a, at + 1)) n++;
  return n;
}

/** Serialises async file work: appends, reads and commits never interleave. */
class Chain {
  private tail: Promise<unknown> = Promise.resolve();
  run<T>(op: () => Promise<T>): Promise<T> {
    const next = this.tail.then(op, op);
    this.tail = next.catch(() => undefined);
    return next;
  }
}

export interface AppendLogOptions {
  /** Written first when the file does not exist (a CSV header). */
  header?: string;
  /** fdatasync period when something was written; default 1000 ms. */
  syncMs?: number;
  onError: (message: string) => void;
}

export class AppendLog {
  /** File operations of this log and of its owner (reads, renames) run one at a time here. */
  readonly chain = new Chain();
  private pending: string[] = [];
  private waiters: Array<() => void> = [];
  private scheduled = false;
  private writing: Promise<void> | null = null;
  private failures = 0;
  private retryTimer: NodeJS.Timeout | null = null;
  private lastError: Error | null = null;
  private dirty = false;
  private handle: FileHandle | null = null;
  private readonly syncTimer: NodeJS.Timeout;

  constructor(
    readonly file: string,
    private readonly opts: AppendLogOptions,
  ) {
    this.syncTimer = setInterval(() => void this.sync(), opts.syncMs ?? 1000);
    this.syncTimer.unref();
  }

  /** Appends one line (without its line break); resolves once it is written (or the disk refused it, logged). */
  append(line: string): Promise<void> {
    this.pending.push(line);
    if (this.failures > 0) return Promise.resolve(); // failing: the retry timer writes it
    const written = new Promise<void>((resolve) => this.waiters.push(resolve));
    if (!this.scheduled && !this.writing) {
      this.scheduled = true;
      setImmediate(() => this.drain());
    }
    return written;
  }

  /** Lines appended but not written yet. */
  get unwritten(): number {
    return this.pending.length;
  }

  private drain(): void {
    this.scheduled = false;
    if (this.writing || !this.pending.length) return;
    const lines = this.pending;
    const waiters = this.waiters;
    this.pending = [];
    this.waiters = [];
    this.writing = this.chain
      .run(() => this.write(lines))
      .then(
        () => {
          this.failures = 0;
          this.lastError = null;
        },
        (error: Error & { linesWritten?: number }) => {
          this.pending = lines.slice(error.linesWritten ?? 0).concat(this.pending); // before newer lines: the order is kept
          this.lastError = error;
          const wait = backoffMs(++this.failures, { firstMs: 1000, maxMs: 30_000 });
          this.opts.onError(
            `${this.file}: ${error.message}; ${this.pending.length} line(s) kept in memory, written again in ${wait / 1000} s`,
          );
          this.retryTimer ??= setTimeout(() => {
            this.retryTimer = null;
            this.drain();
          }, wait);
          this.retryTimer.unref();
        },
      )
      .finally(() => {
        for (const w of waiters) w();
        this.writing = null;
        if (this.pending.length && this.failures === 0) this.drain();
      });
  }

  private async write(lines: string[]): Promise<void> {
    let header = '';
    if (!this.handle) {
      await mkdir(dirname(this.file), { recursive: true });
      if (this.opts.header) await this.createWithHeader();
      this.handle = await open(this.file, 'a+'); // read too: its last byte (below)
      const { size } = await this.handle.stat();
      if (this.opts.header && size === 0) header = `${this.opts.header}\n`;
      // A write the disk cut short (full: part of it written, then ENOSPC) left part of a line, ours
      // or another process's; appended to, it would take our first line into it (an event lost).
      else if (size > 0 && !(await endsWithLineBreak(this.handle, size))) header = '\n';
    }
    this.dirty = true;
    const buf = Buffer.from(`${header}${lines.join('\n')}\n`);
    try {
      this.writeWhole(this.handle, buf);
    } catch (error) {
      await this.release(); // opened afresh on the next try
      // The lines the disk took whole are not written again (a row twice); the rest are.
      const written = (error as { written?: number }).written ?? 0;
      const start = Buffer.byteLength(header);
      const whole = written > start ? countLineBreaks(buf.subarray(start, written)) : 0;
      throw Object.assign(error as Error, { linesWritten: whole });
    }
  }

  /** A new file appears with its header already in it (a link fails if another process made it first). */
  private async createWithHeader(): Promise<void> {
    const draft = `${this.file}.${process.pid}.new`;
    try {
      await writeFile(draft, `${this.opts.header}\n`, { flag: 'wx' });
      await link(draft, this.file);
    } catch {
      // The file exists already (or links are not supported: the header is then written if it is empty).
    } finally {
      await unlink(draft).catch(() => undefined);
    }
  }

  /**
   * Whole lines per write(), so lines of another process never land inside one of ours. On a
   * failure, the error carries `written`: the bytes of `buf` the file took.
   */
  private writeWhole(handle: FileHandle, buf: Buffer): void {
    let at = 0;
    while (at < buf.length) {
      let end = Math.min(buf.length, at + PIECE_BYTES);
      if (end < buf.length) {
        const cut = buf.lastIndexOf(0x0a, end - 1);
        end = cut >= at ? cut + 1 : buf.indexOf(0x0a, end) + 1; // a line longer than a piece goes alone
      }
      // A synchronous write: an append to the page cache takes microseconds, where the thread pool's
      // hand-off (a promise, two wake-ups) cost several times that per group on the request path.
      let off = at;
      try {
        while (off < end) off += writeSync(handle.fd, buf, off, end - off);
      } catch (error) {
        throw Object.assign(error as Error, { written: off });
      }
      at = end;
    }
  }

  /** Closes the file (run inside `chain`): the next write opens it again, a new one if it was moved. */
  async release(): Promise<void> {
    const h = this.handle;
    this.handle = null;
    await h?.close().catch(() => undefined);
  }

  /** Writes what is pending now; rejects with the disk's error when it cannot. */
  async written(): Promise<void> {
    while (this.writing || this.pending.length) {
      if (!this.writing) {
        if (this.retryTimer) clearTimeout(this.retryTimer);
        this.retryTimer = null;
        this.drain();
      }
      await this.writing;
      if (this.failures > 0) throw this.lastError ?? new Error(`${this.file}: not written`);
    }
  }

  /** Once a second: fdatasync what was written (it survives a machine crash too), then close the file. */
  private async sync(): Promise<void> {
    if (!this.dirty && !this.handle) return;
    const dirty = this.dirty;
    this.dirty = false;
    await this.chain
      .run(async () => {
        if (dirty) await this.handle?.datasync();
        await this.release();
      })
      .catch(() => undefined); // the next write reports a broken disk
  }

  async close(): Promise<void> {
    clearInterval(this.syncTimer);
    try {
      await this.written();
    } finally {
      if (this.retryTimer) clearTimeout(this.retryTimer);
      await this.sync();
    }
  }
}

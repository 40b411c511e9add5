/**
 * The rest of a streamed answer as an async iterator, fed by undici's dispatcher (upstream.ts).
 * Lighter than `agent.request`'s Readable body and its async iterator, which cost a stream object,
 * an async resource and several promises per stream and per chunk: at a thousand streams starting
 * at once, every microsecond before a stream's first chunk delays the streams behind it.
 *
 * Backpressure: once the chunks waiting here pass HIGH_WATER bytes, the connection is paused;
 * it resumes when the reader has taken them all.
 *
 * Idle limit: a provider that sends nothing for `idleMs` is cut. The clock stops while the
 * connection is paused: then the silence is ours (our client reads slowly), not the provider's.
 * undici's own `bodyTimeout` does this over HTTP/1.1 only; over HTTP/2 it is the stream's socket
 * timeout, which a paused stream (no window, no frames) runs out, so it is not used.
 */
const HIGH_WATER = 64 * 1024;

/** How the queue pauses, resumes and cuts its connection (undici's dispatch controller). */
export interface Flow {
  pause(): void;
  resume(): void;
  abort(reason: Error): void;
}

export class BodyQueue implements AsyncIterator<Buffer> {
  private chunks: Buffer[] = [];
  private bytes = 0;
  private ended = false;
  private error: Error | null = null;
  private waiting: { resolve: (r: IteratorResult<Buffer>) => void; reject: (e: Error) => void } | null = null;
  private paused = false;
  /** When the provider last sent a chunk (or the connection was resumed), on the monotonic clock: a change of the wall clock is no silence. */
  private lastAt = performance.now();
  private idle: NodeJS.Timeout | undefined;
  /** Cut by the idle limit: a cut on our side, which the provider bills all the same (an estimate is metered). */
  silent = false;

  /** `idleMs`: 0 for no idle limit. Made when the first chunk came. */
  constructor(
    private readonly flow: Flow,
    private readonly idleMs = 0,
  ) {
    this.watch(idleMs);
  }

  push(chunk: Buffer): void {
    this.lastAt = performance.now(); // one clock read per chunk; the timer is re-armed only when it fires
    if (this.waiting) return this.settle().resolve({ done: false, value: chunk });
    this.chunks.push(chunk);
    this.bytes += chunk.length;
    if (this.bytes >= HIGH_WATER && !this.paused) {
      this.paused = true;
      clearTimeout(this.idle);
      this.flow.pause();
    }
  }

  end(): void {
    this.ended = true;
    clearTimeout(this.idle);
    if (this.waiting) this.settle().resolve({ done: true, value: undefined });
  }

  fail(error: Error): void {
    this.error ??= error;
    clearTimeout(this.idle);
    if (this.waiting) this.settle().reject(this.error);
  }

  next(): Promise<IteratorResult<Buffer>> {
    const chunk = this.chunks.shift();
    if (chunk) {
      this.bytes -= chunk.length;
      if (this.paused && this.chunks.length === 0) {
        this.paused = false;
        this.lastAt = performance.now();
        this.watch(this.idleMs);
        this.flow.resume();
      }
      return Promise.resolve({ done: false, value: chunk });
    }
    // What came before an error or the end is read first, as a Readable would give it.
    if (this.error) return Promise.reject(this.error);
    if (this.ended) return Promise.resolve({ done: true, value: undefined });
    return new Promise((resolve, reject) => (this.waiting = { resolve, reject }));
  }

  /** The reader stops before the end (an event too large to relay): the connection is cut. */
  return(): Promise<IteratorResult<Buffer>> {
    const stopped = new Error('the relay stopped reading');
    if (!this.ended && !this.error) this.flow.abort(stopped);
    this.fail(stopped);
    this.chunks = [];
    this.bytes = 0;
    return Promise.resolve({ done: true, value: undefined });
  }

  /** Cuts the connection once the provider has been silent for idleMs while not paused. */
  private watch(ms: number): void {
    if (!this.idleMs || this.ended || this.error) return;
    this.idle = setTimeout(() => {
      if (this.paused || this.ended || this.error) return;
      const quiet = performance.now() - this.lastAt;
      if (quiet < this.idleMs) return this.watch(this.idleMs - quiet);
      this.silent = true;
      this.flow.abort(new Error(`the provider sent nothing for ${this.idleMs} ms`));
    }, ms);
    this.idle.unref();
  }

  private settle(): NonNullable<BodyQueue['waiting']> {
    const waiting = this.waiting!;
    this.waiting = null;
    return waiting;
  }
}

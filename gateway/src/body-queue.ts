/**
 * The rest of a streamed answer as an async iterator, fed by undici's dispatcher (upstream.ts).
 * Lighter than `agent.request`'s Readable body and its async iterator, which cost a stream object,
 * an async resource and several promises per stream and per chunk: at a thousand streams starting
 * at once, every microsecond before a stream's first chunk delays the streams behind it.
 *
 * Backpressure: once the chunks waiting here pass HIGH_WATER bytes, the connection is paused;
 * it resumes when the reader has taken them all.
 */
const HIGH_WATER = 64 * 1024;

/** How the queue pauses and resumes its connection (undici's dispatch controller). */
export interface Flow {
  pause(): void;
  resume(): void;
}

export class BodyQueue implements AsyncIterator<Buffer> {
  private chunks: Buffer[] = [];
  private bytes = 0;
  private ended = false;
  private error: Error | null = null;
  private waiting: { resolve: (r: IteratorResult<Buffer>) => void; reject: (e: Error) => void } | null = null;
  private paused = false;

  constructor(private readonly flow: Flow) {}

  push(chunk: Buffer): void {
    if (this.waiting) return this.settle().resolve({ done: false, value: chunk });
    this.chunks.push(chunk);
    this.bytes += chunk.length;
    if (this.bytes >= HIGH_WATER && !this.paused) {
      this.paused = true;
      this.flow.pause();
    }
  }

  end(): void {
    this.ended = true;
    if (this.waiting) this.settle().resolve({ done: true, value: undefined });
  }

  fail(error: Error): void {
    this.error ??= error;
    if (this.waiting) this.settle().reject(this.error);
  }

  next(): Promise<IteratorResult<Buffer>> {
    const chunk = this.chunks.shift();
    if (chunk) {
      this.bytes -= chunk.length;
      if (this.paused && this.chunks.length === 0) {
        this.paused = false;
        this.flow.resume();
      }
      return Promise.resolve({ done: false, value: chunk });
    }
    // What came before an error or the end is read first, as a Readable would give it.
    if (this.error) return Promise.reject(this.error);
    if (this.ended) return Promise.resolve({ done: true, value: undefined });
    return new Promise((resolve, reject) => (this.waiting = { resolve, reject }));
  }

  private settle(): NonNullable<BodyQueue['waiting']> {
    const waiting = this.waiting!;
    this.waiting = null;
    return waiting;
  }
}

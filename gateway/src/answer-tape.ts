/**
 * Records what the pipeline answers on one response, for idempotent replay: the status, the
 * headers a repeat needs (content type, `x-route-*`, `x-request-id`), and the body's bytes up to a cap (a stream's
 * events as they were sent). Everything is passed on to the client as it is written, except the
 * final `end`, which is held until `release`: the answer is stored before the client sees it end,
 * so a repeat sent the moment the first answer arrives finds it.
 *
 * It wraps the response's own writeHead/write/end (on this one object, only for requests that sent
 * an Idempotency-Key), so every path of the pipeline is recorded without being told.
 */
import type { OutgoingHttpHeaders, ServerResponse } from 'node:http';

/** The headers a replay repeats; others (length, date, connection) belong to each answer. */
const KEPT_HEADER = /^(content-type|x-request-id|x-route-[a-z-]+)$/;

type End = ServerResponse['end'];

export class AnswerTape {
  status = 0;
  headers: Record<string, string> = {};
  /** The body was larger than the cap: its bytes were not kept. */
  overflow = false;
  private chunks: Buffer[] = [];
  private bytes = 0;
  private held: Parameters<End> | null = null;
  private onEnd: ((ended: boolean) => void) | null = null;
  private readonly restore: () => void;

  constructor(
    private readonly res: ServerResponse,
    private readonly maxBytes: number,
  ) {
    const { writeHead, write, end } = res;
    res.writeHead = ((status: number, ...rest: unknown[]) => {
      this.head(status, rest.find((r) => typeof r === 'object' && r !== null) as OutgoingHttpHeaders | undefined);
      return (writeHead as (...a: unknown[]) => ServerResponse).call(res, status, ...rest);
    }) as ServerResponse['writeHead'];
    res.write = ((chunk: unknown, ...rest: unknown[]) => {
      this.add(chunk);
      return (write as (...a: unknown[]) => boolean).call(res, chunk, ...rest);
    }) as ServerResponse['write'];
    res.end = ((...args: Parameters<End>) => {
      if (typeof args[0] !== 'function') this.add(args[0]);
      this.held = args;
      this.onEnd?.(true);
      return res;
    }) as End;
    this.restore = () => {
      res.writeHead = writeHead;
      res.write = write;
      res.end = end;
    };
  }

  /** The body as recorded (null when it overflowed). */
  body(): Buffer | null {
    return this.overflow ? null : Buffer.concat(this.chunks, this.bytes);
  }

  /** The size of the body sent, kept or not. */
  size(): number {
    return this.bytes;
  }

  /**
   * Resolves once the answer's end was written (true), or the client went first (false): a body
   * larger than a piece goes out piece by piece after the pipeline has returned (http-io.ts).
   */
  ended(): Promise<boolean> {
    if (this.held) return Promise.resolve(true);
    if (this.res.destroyed) return Promise.resolve(false);
    return new Promise((resolve) => {
      this.onEnd = resolve;
      this.res.once('close', () => resolve(false));
    });
  }

  /** Puts the response back as it was and lets a held end through. */
  release(): void {
    this.restore();
    const held = this.held;
    this.held = null;
    if (held) (this.res.end as (...a: unknown[]) => ServerResponse)(...held);
  }

  private head(status: number, headers: OutgoingHttpHeaders | undefined): void {
    this.status = status;
    for (const [name, value] of Object.entries(headers ?? {}))
      if (value !== undefined && KEPT_HEADER.test(name.toLowerCase())) this.headers[name.toLowerCase()] = String(value);
  }

  private add(chunk: unknown): void {
    if (chunk === undefined || chunk === null) return;
    const buf = typeof chunk === 'string' ? Buffer.from(chunk) : Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk as Uint8Array);
    this.bytes += buf.length;
    if (this.overflow) return;
    if (this.bytes > this.maxBytes) {
      this.overflow = true;
      this.chunks = [];
      return;
    }
    this.chunks.push(buf);
  }
}

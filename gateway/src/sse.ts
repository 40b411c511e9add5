/**
 * Relays a provider's server-sent events to the client, event by event, with backpressure (a
 * full socket pauses the reading). Events are parsed with eventsource-parser, so every line ending
 * the SSE format allows (LF, CRLF, CR) and multi-line `data:` fields are read as the format says,
 * then written back in LF form. What is written for each event is the stream transform's choice
 * (stream-transforms.ts): passed through, or translated into another API's events.
 *
 * Most chunks of a chat stream are whole events already in that form, which the transform passes
 * through unchanged: those are written as they came, without being decoded, parsed and encoded
 * again (at 1,000 concurrent streams, about 5 % of the gateway's CPU).
 */
import type { ServerResponse } from 'node:http';
import { createParser, type EventSourceMessage, type EventSourceParser } from 'eventsource-parser';
import { GeneratedText } from './cut-estimate';
import { PIECE, STALL_MS, writable, writeInPieces } from './http-io';
import type { Usage } from './providers/adapter';

/** How one API's stream is relayed: what to write per event, when it is complete, its usage. */
export interface StreamTransform {
  /** What to write for one provider event ('' to write nothing). */
  event(e: EventSourceMessage): string;
  /**
   * Whether these whole events, in LF form with `data:` lines only (see `plainEvents`), would each
   * be written exactly as they came, and change nothing the transform keeps: then they are written
   * as they are. Absent: every event goes through `event`.
   */
  passes?(events: Buffer): boolean;
  /** The provider said the stream is complete. */
  done: boolean;
  /**
   * The provider said its last word (`[DONE]`, a final Responses event), complete or not: nothing
   * after it is relayed. Absent: only `done` says so.
   */
  over?: boolean;
  /**
   * The provider ended its response normally without saying the stream is complete (no `done`):
   * whether what came is a whole answer all the same. Absent: it is not. Never asked of a stream cut
   * by a read error (a reset, the idle limit): that one broke, however far it got; nor of one that
   * ended a few bytes into an event none of which came to `event` (`da`, an `event:` line alone).
   */
  finished?(): boolean;
  usage: Usage | null;
  /**
   * Written once the stream is complete (a translation's closing events, the `[DONE]` a provider
   * left out). Pieces are made and written one at a time, each once the socket took the one before:
   * a translation's closing events each carry the whole answer, and joined they could pass the
   * longest string V8 makes.
   */
  end?(): string | Iterable<string>;
  /**
   * Written when the stream broke: the client must learn it, never a silent truncation. `message`:
   * why, when it was not the provider (the gateway stopping); else the provider's stream ended early.
   */
  broken(message?: string): string;
  /**
   * The transform gave the stream up as more than it may keep (a translation's output past the
   * whole answer's limit), having written what tells the client: the relay reads no more, the
   * provider's connection is cut, and the stream is broken.
   */
  readonly tooLarge?: boolean;
  /**
   * The provider reported in its stream that the answer failed (an error chunk or a failed choice, a
   * Responses error event or `response.failed`). Absent: it never does.
   */
  readonly failed?: boolean;
  /**
   * The longest event it takes, in characters (MAX_EVENT_CHARS unless said): a Responses stream's
   * final event carries the whole response, and may be as large as a whole answer.
   */
  readonly maxEventChars?: number;
}

export interface RelayResult {
  usage: Usage | null;
  /** The provider's stream broke after it began (the client got an error event). */
  broken: boolean;
  /**
   * It broke on something too large (`broken` too), as the meter names it: an event past
   * MAX_EVENT_CHARS, or an answer the transform would keep past its limit (`StreamTransform.tooLarge`).
   */
  tooLarge: 'EVENT_TOO_LARGE' | 'ANSWER_TOO_LARGE' | null;
  /**
   * The provider reported the failure in its stream before it ended (`StreamTransform.failed`): the
   * provider's failure, also when the client hung up after reading it, as the openai SDKs do once
   * they raise it.
   */
  failed: boolean;
  /** The generated text of the provider's events, counted as they came (a cut stream's estimate, cut-estimate.ts). */
  text: GeneratedText;
  /** The client was gone before the relay's last words (its end, or its error event) were written: it never had them. */
  unsent: boolean;
}

/**
 * The data of the first event in `text`, read as if the stream ended there: a last line without its
 * line end, or a CR the parser would wait on for a LF, still ends it. Null when it holds no event.
 */
export function firstEventData(text: Buffer): string | null {
  let data: string | null = null;
  createParser({ onEvent: (e) => void (data ??= e.data) }).feed(`${text.toString('utf8')}\n\n`);
  return data;
}

/** An event as SSE text, LF line endings, multi-line data kept as several `data:` lines. */
export function serialize(event: EventSourceMessage): string {
  const head = `${event.event ? `event: ${event.event}\n` : ''}${event.id !== undefined ? `id: ${event.id}\n` : ''}`;
  return `${head}data: ${event.data.split('\n').join('\ndata: ')}\n\n`;
}

const LF = 0x0a;

/**
 * Whole events exactly as `serialize` writes them back: every line `data: ...` ended by LF, every
 * event ended by one blank line, no CR (and so no byte-order mark at the start either).
 */
function plainEvents(b: Buffer): boolean {
  const n = b.length;
  if (n < 8 || b[n - 1] !== LF || b[n - 2] !== LF || b.indexOf(0x0d) !== -1) return false;
  for (let i = 0; i < n;) {
    // "data: "
    if (b[i] !== 0x64 || b[i + 1] !== 0x61 || b[i + 2] !== 0x74 || b[i + 3] !== 0x61 || b[i + 4] !== 0x3a || b[i + 5] !== 0x20)
      return false;
    i = b.indexOf(LF, i + 6) + 1; // found: b ends with LF
    if (b[i] === LF) i++;
  }
  return true;
}

/**
 * An event that is not complete at this many characters (its lines so far, or one line without its
 * line break) is not one a provider means to send: the stream is cut there as broken, rather than
 * the event held in memory until it ends, if ever. Far above any chat event; a Responses stream's
 * final events, which carry whole outputs, have a transform's own limit (`maxEventChars`).
 */
const MAX_EVENT_CHARS = 8 * 1024 * 1024;

/** Thrown by the parser's feed when an event passes MAX_EVENT_CHARS, or by `parse` when the transform gave up. */
class TooLarge extends Error {
  constructor(readonly code: NonNullable<RelayResult['tooLarge']>) {
    super(code);
  }
}

/** A blank line in any of the format's line endings (LF, CRLF, CR): the end of an event. */
const BLANK_LINE = /(?:\r\n|\r(?!\n)|\n)(?:\r\n|\r(?!\n)|\n)/g;

/**
 * Whether text ends inside an event of which nothing was dispatched: what follows its last blank
 * line is more than line breaks and comments (a field name cut short, an `event:` line whose data
 * never came).
 */
function endsInsideEvent(text: string): boolean {
  let from = 0;
  for (const m of text.matchAll(BLANK_LINE)) from = m.index + m[0].length;
  return text
    .slice(from)
    .split(/\r\n|\r|\n/)
    .some((line) => line !== '' && !line.startsWith(':'));
}

/** How long the rest of a complete stream is read before its connection is cut (a provider that never ends it). */
const DRAIN_MS = 10_000;

/**
 * The rest of a complete stream, read and dropped: its connection ends as the provider ends it,
 * free for the next call; one still open after DRAIN_MS is cut.
 */
async function drain(rest: AsyncIterator<Buffer>): Promise<void> {
  const cut = setTimeout(() => void rest.return?.(), DRAIN_MS).unref();
  try {
    while (!(await rest.next()).done);
  } catch {
    // cut here, by the idle limit or by our client going away: nothing was owed any more
  } finally {
    clearTimeout(cut);
  }
}

/**
 * Relays one stream: `first` (the chunk with its first event) and the `rest`, through `transform`,
 * to `res`; then the transform's end (or its error event when the stream broke), `beforeEnd`, and
 * the response's end. Resolves however the stream ends.
 */
export async function relaySse(
  first: Buffer,
  rest: AsyncIterator<Buffer>,
  res: ServerResponse,
  transform: StreamTransform,
  stallMs = STALL_MS,
  /** Runs before the response ends (the call's meter event is made durable first). */
  beforeEnd?: (result: RelayResult) => Promise<void>,
  /** Why a broken stream broke, when it was not the provider (the client is told). */
  why?: () => string | undefined,
): Promise<RelayResult> {
  const relay = new Relay(res, transform, stallMs);
  await relay.run(first, rest);
  const broken = relay.broken();
  const failed = transform.failed === true; // before close: a translation's failing end sets it too
  await relay.close(broken, why);
  const result = {
    usage: transform.usage,
    broken,
    tooLarge: broken ? relay.tooLarge : null,
    failed,
    text: relay.text,
    unsent: relay.unsent,
  };
  await beforeEnd?.(result);
  res.end();
  return result;
}

/**
 * One stream's relay. An object rather than closures over the stream: one per open stream, held for
 * its whole length.
 */
class Relay {
  readonly text = new GeneratedText();
  tooLarge: RelayResult['tooLarge'] = null;
  unsent = false;
  /** What the parser's events made the transform write, not sent yet. */
  private out = '';
  private wrote = false;
  /** The first chunk was fed: a byte-order mark is stripped only at the stream's start. */
  private started = false;
  /** The provider ended its response normally (not a failed read, not cut by us). */
  private closed = false;
  /** The provider ended its response inside an event that never came (no data of it dispatched). */
  private fragment = false;
  /** Events the parser gave the transform, and the text of the last chunk it was fed. */
  private dispatched = 0;
  private lastText = '';
  // Made for the first chunk not written as it came: in most chat streams the last, after the burst of starts.
  private parser: EventSourceParser | null = null;
  private decoder: InstanceType<typeof TextDecoder> | null = null;
  /** All bytes so far ended with a blank line: the parser and the decoder hold nothing back. */
  private between = true;

  constructor(
    private readonly res: ServerResponse,
    private readonly transform: StreamTransform,
    private readonly stallMs: number,
  ) {}

  async run(first: Buffer, rest: AsyncIterator<Buffer>): Promise<void> {
    try {
      await this.feed(first);
      // Headers go out with the first event, in one write; a first chunk that wrote nothing sends them alone.
      if (!this.wrote && !this.res.destroyed) this.res.flushHeaders();
      // Once the provider said its last word, the client gets its end now: a provider
      // that keeps its response open past that held every client until the idle limit.
      while (!this.transform.done && !this.transform.over) {
        const next = await rest.next();
        if (next.done) break;
        await this.feed(next.value);
      }
      if (this.transform.done || this.transform.over) return void drain(rest);
      if (!this.between) await this.parse(null);
      this.closed = true;
    } catch (error) {
      // A failed read ends the relay; whether the stream broke is `broken`'s to say.
      // Something too large ends it too, the rest of the provider's stream given up (its connection cut).
      if (!(error instanceof TooLarge)) return;
      this.tooLarge = error.code;
      // The events parsed before it in the same chunk were counted by the transform: written first.
      if (this.out && !this.res.destroyed) void this.send(this.out);
      this.out = '';
      await rest.return?.();
    }
  }

  /**
   * A read error after the provider said the stream is complete (a connection dropped after
   * `[DONE]`, or an event too large after it) breaks nothing the client was owed; nor does a
   * response ended normally after a whole answer without saying so (servers that omit `[DONE]`).
   */
  broken(): boolean {
    return !this.transform.done && !(this.closed && !this.fragment && this.transform.finished?.() === true);
  }

  /** The transform's last words: its end, or its error event when the stream broke. */
  async close(broken: boolean, why?: () => string | undefined): Promise<void> {
    const tail = broken ? this.transform.broken(why?.()) : (this.transform.end?.() ?? '');
    // A chat stream's end after its [DONE] writes nothing: the client that left then had it all.
    if (this.res.destroyed) return void (this.unsent = tail !== '');
    if (typeof tail === 'string') return void this.res.write(tail);
    for (const piece of tail) {
      if (this.res.destroyed) return void (this.unsent = true);
      await this.sendWritten(piece);
    }
  }

  private feed(bytes: Buffer): Promise<void> | undefined {
    this.text.scan(bytes);
    const { transform } = this;
    const asItCame = this.between && !this.out && transform.passes !== undefined && plainEvents(bytes) && transform.passes(bytes);
    this.between = bytes.length > 1 && bytes[bytes.length - 1] === LF && bytes[bytes.length - 2] === LF;
    const sent = asItCame ? this.send(bytes) : this.parse(bytes);
    this.started = true;
    return sent;
  }

  /** `bytes` through the parser and the transform; null: the stream's end, where a last event without its blank line still counts. */
  private parse(bytes: Buffer | null): Promise<void> | undefined {
    const parser = (this.parser ??= this.newParser());
    this.decoder ??= new TextDecoder();
    if (bytes) parser.feed((this.lastText = this.decoder.decode(bytes, { stream: true })));
    else {
      const before = this.dispatched;
      const tail = this.decoder.decode();
      parser.feed(`${tail}\n\n`);
      // Cut a few bytes into the next event (`da`, `event: message`): nothing of it reached the transform.
      this.fragment = this.dispatched === before && endsInsideEvent(this.lastText + tail);
    }
    const chunk = this.out;
    this.out = '';
    const sent = chunk ? this.sendWritten(chunk) : undefined;
    // Given up once what it wrote for it (the translation's response.failed) went out.
    if (this.transform.tooLarge) return Promise.resolve(sent).then(() => Promise.reject(new TooLarge('ANSWER_TOO_LARGE')));
    return sent;
  }

  private newParser(): EventSourceParser {
    const parser = createParser({
      onEvent: (event) => {
        // Past the provider's last word nothing is relayed, also what came in the same piece after it.
        if (this.transform.done || this.transform.over) return;
        this.dispatched++;
        this.out += this.transform.event(event);
      },
      maxBufferSize: this.transform.maxEventChars ?? MAX_EVENT_CHARS,
      onError: (e) => {
        if (e.type === 'max-buffer-size-exceeded') throw new TooLarge('EVENT_TOO_LARGE');
      },
    });
    if (this.started) parser.feed('');
    return parser;
  }

  private send(chunk: string | Buffer): Promise<void> | undefined {
    this.wrote = true;
    return this.res.write(chunk) ? undefined : writable(this.res, this.stallMs);
  }

  /** What the transform wrote: in pieces when large. */
  private sendWritten(chunk: string): Promise<void> | undefined {
    if (chunk.length <= PIECE) return this.send(chunk);
    this.wrote = true;
    // Gone by the last piece: the pieces after it were not written.
    return writeInPieces(this.res, Buffer.from(chunk), this.stallMs).then(() => void (this.unsent ||= this.res.destroyed));
  }
}

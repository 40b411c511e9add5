/**
 * What a stream cut on our side cost, when the provider never said: the provider bills the whole
 * prompt and the tokens it generated before the cut, so the meter gets an estimate of both (marked
 * ESTIMATED, schema/estimated.ts) rather than 0 tokens and $0. So does a call whose client hung up
 * after the provider received it but before its answer began (a stream before its first event, a
 * whole answer), or that timed out then: its prompt, and no output (failover.ts).
 *
 * The rule, simple and on the high side: one token per 3 bytes of UTF-8 (about 4 characters of
 * English make a token, and one CJK character, 3 bytes, about one), rounded up.
 * - input: the request's body as JSON, every byte of it (roles, tools, the JSON around them; an
 *   inline image or file counts by its bytes, far above what it is billed);
 * - output: the generated text of the provider's events as they came, escapes included (a chat
 *   chunk's `delta`: its content, reasoning, refusal and tool-call arguments; a Responses event's
 *   `delta` text), and never fewer tokens than pieces of text (a provider streams at least one
 *   token per piece).
 */
import type { Usage } from './providers/adapter';

const BYTES_PER_TOKEN = 3;
const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const COLON = 0x3a;
const LF = 0x0a;
const DELTA = Buffer.from('"delta"');
/** The keys inside a chat chunk's `delta` whose string values are generated text. */
const TEXT_KEYS = ['content', 'reasoning_content', 'reasoning', 'refusal', 'arguments'].map((k) => Buffer.from(k));
const isSpace = (c: number | undefined) => c === 0x20 || c === 0x09 || c === LF || c === 0x0d;

/** Whether b[start, end) is one of the text keys. */
function textKey(b: Buffer, start: number, end: number): boolean {
  next: for (const key of TEXT_KEYS) {
    if (key.length !== end - start) continue;
    for (let i = 0; i < key.length; i++) if (b[start + i] !== key[i]) continue next;
    return true;
  }
  return false;
}

/**
 * The generated text of a stream, counted from the provider's bytes as they come, without a parse
 * (most chunks are relayed without one): one search per chunk for `"delta"` (a key: inside a JSON
 * string its quotes are escaped), then a walk of that small value. A text value a chunk ends in is
 * followed into the next; a delta whose key and value a chunk boundary separates is missed.
 */
export class GeneratedText {
  /** Bytes of text, as sent. */
  bytes = 0;
  /** Pieces of text (non-empty values). */
  pieces = 0;
  /** Inside a text value at the end of the last chunk; `escaped`: right after its backslash. */
  private open = false;
  private escaped = false;

  scan(b: Buffer): void {
    let at = this.open ? this.text(b, 0) : 0;
    while (at < b.length) {
      const i = b.indexOf(DELTA, at);
      if (i === -1) return;
      at = this.delta(b, i + DELTA.length);
      // Most chunks are one event: when its blank line ends the chunk, nothing is left to search
      // (other line endings search on: one more look).
      let lf = b.indexOf(LF, at);
      while (lf !== -1 && b[lf + 1] !== LF) lf = b.indexOf(LF, lf + 1);
      if (lf !== -1 && lf + 2 === b.length) return;
      if (lf !== -1) at = lf + 2;
    }
  }

  /** A delta's value from `p` (after its key): a string is text; an object is walked for its text keys. Returns where it ended. */
  private delta(b: Buffer, p: number): number {
    while (isSpace(b[p])) p++;
    if (b[p] !== COLON) return p;
    p++;
    while (isSpace(b[p])) p++;
    if (b[p] === QUOTE) return this.text(b, p + 1, true);
    if (b[p] !== 0x7b) return p; // not an object: no text
    let depth = 0;
    let isText = false;
    while (p < b.length) {
      const c = b[p];
      if (c === QUOTE) {
        if (isText) {
          p = this.text(b, p + 1, true);
          isText = false;
          continue;
        }
        const end = this.closing(b, p + 1, p + 1);
        if (end === -1) return b.length;
        let k = end + 1;
        while (isSpace(b[k])) k++;
        isText = b[k] === COLON && textKey(b, p + 1, end); // a key, followed by its value
        p = k;
        continue;
      }
      if (c === 0x7b || c === 0x5b) depth++;
      else if (c === 0x7d || c === 0x5d) {
        if (--depth === 0) return p + 1;
      } else if (c !== COLON && !isSpace(c)) isText = false; // a value that is not a string (null, a number)
      p++;
    }
    return p;
  }

  /** Where the string from `start` closes (its quote), or -1 when the chunk ends first; backslashes from `floor` on count. */
  private closing(b: Buffer, start: number, floor: number): number {
    for (let i = start; ;) {
      const q = b.indexOf(QUOTE, i);
      if (q === -1) return -1;
      let run = 0;
      while (q - run - 1 >= floor && b[q - run - 1] === BACKSLASH) run++;
      if (run % 2 === 0) return q;
      i = q + 1; // an escaped quote: still inside
    }
  }

  /** Counts a text value from `start` to its closing quote, or on into the next chunk; returns where it ended. */
  private text(b: Buffer, start: number, fresh = false): number {
    if (fresh && b[start] !== QUOTE) this.pieces++;
    const floor = this.escaped ? start + 1 : start; // after a backslash that ended the last chunk
    this.escaped = false;
    const q = this.closing(b, floor, floor);
    const end = q === -1 ? b.length : q;
    this.bytes += end - start;
    this.open = q === -1;
    if (this.open) {
      let run = 0;
      while (end - run - 1 >= floor && b[end - run - 1] === BACKSLASH) run++;
      this.escaped = run % 2 === 1;
    }
    return this.open ? b.length : q + 1;
  }
}

/**
 * The estimate of a cut call's usage: the request's body in, the generated text out (none for a
 * call cut before its answer began: no `text`).
 */
export function estimateUsage(body: unknown, text?: GeneratedText): Usage {
  return {
    input_tokens: Math.ceil(Buffer.byteLength(JSON.stringify(body) ?? '') / BYTES_PER_TOKEN),
    output_tokens: text ? Math.max(text.pieces, Math.ceil(text.bytes / BYTES_PER_TOKEN)) : 0,
  };
}

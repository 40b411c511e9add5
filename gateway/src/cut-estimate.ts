/**
 * What a stream cut on our side cost, when the provider never said: the provider bills the whole
 * prompt and the tokens it generated before the cut, so the meter gets an estimate of both (marked
 * ESTIMATED, schema/estimated.ts) rather than 0 tokens and $0. So does a call whose client hung up
 * after the provider received it but before its answer began (a stream before its first event, a
 * whole answer), or that timed out then: its prompt, and no output (failover.ts), but for the text of
 * a stream's first event that had come in part (held until whole, upstream.ts).
 *
 * The rule, simple and on the high side: one token per 3 bytes of UTF-8 (about 4 characters of
 * English make a token, and one CJK character, 3 bytes, about one), rounded up.
 * - input: the request's body as JSON, every byte of it (roles, tools, the JSON around them; an
 *   inline image or file counts by its bytes, far above what it is billed);
 * - output: the generated text of the provider's events as they came, escapes included (a chat
 *   chunk's `delta`: its content, reasoning, refusal, tool-call arguments and spoken transcript; a
 *   Responses event's `delta` text), and never fewer tokens than pieces of text (a provider streams
 *   at least one token per piece); plus a spoken answer's audio (`delta.audio.data`, base64 pcm16 at
 *   24 kHz, as a chat stream's audio is), one audio token per 50 ms of it, as realtime audio is
 *   billed (voice/spend-guard.ts), priced at the audio rate.
 */
import type { Usage } from './providers/adapter';

const BYTES_PER_TOKEN = 3;
/** 50 ms of 24 kHz 16-bit mono audio (2,400 bytes) in base64. */
const AUDIO_BYTES_PER_TOKEN = 3200;
const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const COLON = 0x3a;
const LF = 0x0a;
const DELTA = Buffer.from('"delta"');
/** The keys inside a chat chunk's `delta` whose string values are generated text. */
const TEXT_KEYS = ['content', 'reasoning_content', 'reasoning', 'refusal', 'arguments', 'transcript'].map((k) => Buffer.from(k));
/** The key of a spoken answer's audio (`delta.audio.data`). */
const AUDIO_KEY = Buffer.from('data');
const NOT_TEXT = 0;
const TEXT = 1;
const AUDIO = 2;
const isSpace = (c: number | undefined) => c === 0x20 || c === 0x09 || c === LF || c === 0x0d;

/** Whether b[start, end) is `key`. */
function isKey(b: Buffer, start: number, end: number, key: Buffer): boolean {
  if (key.length !== end - start) return false;
  for (let i = 0; i < key.length; i++) if (b[start + i] !== key[i]) return false;
  return true;
}

/** What the value of the key b[start, end) is: TEXT, AUDIO or NOT_TEXT. */
function keyKind(b: Buffer, start: number, end: number): number {
  for (const key of TEXT_KEYS) if (isKey(b, start, end, key)) return TEXT;
  return isKey(b, start, end, AUDIO_KEY) ? AUDIO : NOT_TEXT;
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
  /** Bytes of audio, base64 as sent. */
  audioBytes = 0;
  /** Inside a text value at the end of the last chunk; `escaped`: right after its backslash. */
  private open = false;
  private escaped = false;
  /** The value being counted is audio. */
  private audio = false;

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
    if (b[p] === QUOTE) return this.text(b, p + 1, TEXT);
    if (b[p] !== 0x7b) return p; // not an object: no text
    let depth = 0;
    let kind = NOT_TEXT;
    while (p < b.length) {
      const c = b[p];
      if (c === QUOTE) {
        if (kind !== NOT_TEXT) {
          p = this.text(b, p + 1, kind);
          kind = NOT_TEXT;
          continue;
        }
        const end = this.closing(b, p + 1, p + 1);
        if (end === -1) return b.length;
        let k = end + 1;
        while (isSpace(b[k])) k++;
        kind = b[k] === COLON ? keyKind(b, p + 1, end) : NOT_TEXT; // a key, followed by its value
        p = k;
        continue;
      }
      if (c === 0x7b || c === 0x5b) depth++;
      else if (c === 0x7d || c === 0x5d) {
        if (--depth === 0) return p + 1;
      } else if (c !== COLON && !isSpace(c)) kind = NOT_TEXT; // a value that is not a string (null, a number)
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

  /** Counts a value (`fresh`: TEXT or AUDIO, a new one) from `start` to its closing quote, or on into the next chunk; returns where it ended. */
  private text(b: Buffer, start: number, fresh = NOT_TEXT): number {
    if (fresh !== NOT_TEXT) this.audio = fresh === AUDIO;
    if (fresh === TEXT && b[start] !== QUOTE) this.pieces++;
    const floor = this.escaped ? start + 1 : start; // after a backslash that ended the last chunk
    this.escaped = false;
    const q = this.closing(b, floor, floor);
    const end = q === -1 ? b.length : q;
    if (this.audio) this.audioBytes += end - start;
    else this.bytes += end - start;
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
 * The estimate of a cut call's usage: the request's body in, the generated text and audio out
 * (none for a call cut before its answer began: no `text`, or that of its first event's part), at the service tier the request asked
 * for (the answer that would say which served it never came). `tierSent`: false when the call went
 * without it (a Responses request translated for a chat route): served at the standard tier.
 */
export function estimateUsage(body: unknown, text?: GeneratedText, tierSent = true): Usage {
  const input_tokens = Math.ceil(Buffer.byteLength(JSON.stringify(body) ?? '') / BYTES_PER_TOKEN);
  const tier = tierSent ? (body as { service_tier?: unknown } | null)?.service_tier : undefined;
  const asked = typeof tier === 'string' && tier ? { service_tier: tier } : {};
  if (!text) return { input_tokens, output_tokens: 0, ...asked };
  const written = Math.max(text.pieces, Math.ceil(text.bytes / BYTES_PER_TOKEN));
  const spoken = Math.ceil(text.audioBytes / AUDIO_BYTES_PER_TOKEN);
  if (!spoken) return { input_tokens, output_tokens: written, ...asked };
  return { input_tokens, output_tokens: written + spoken, output_audio_tokens: spoken, ...asked };
}

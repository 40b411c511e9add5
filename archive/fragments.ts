/**
 * Rows a full disk cut short in the gateway's own events CSV. The gateway appends whole rows
 * (gateway/src/append-log.ts); a disk that fills in the middle of a write leaves part of a row, which
 * the next write ends with a line break before it writes that row again whole, and the rows after it.
 * So the file holds a line that is the start of a later line: not a row, and nothing of it is
 * missing from the file. `npm run archive` stopped at it (`expected 19 fields`) until the line was
 * deleted by hand, every night, since the gateway's CSV is archived again and again.
 *
 * Only read when DuckDB's reader refused a line (the common case never comes here). A line is such
 * a fragment when, read alone, it is fewer than the record's fields or leaves a quote open, and a
 * later line starts with exactly its bytes, goes on, and is a whole row by itself. Any other line
 * the reader refuses (a download cut short: its last line is the start of nothing later) still
 * stops the run. The file is streamed, never held whole.
 */
import { closeSync, createReadStream, openSync, readSync, writeSync } from 'node:fs';
import { EVENT_FIELDS } from '../schema/event-record';

const LF = 0x0a;
const CR = 0x0d;
const QUOTE = 0x22;
const COMMA = 0x2c;
/** More lines of this shape than this: not a disk that filled now and then; the run stops as before. */
const MAX_CANDIDATES = 1000;

/** One line of the file: its number (the header is 1), bytes without the line break, and where it starts. */
interface Line {
  n: number;
  text: Buffer;
  at: number;
  /** Bytes including its line break. */
  size: number;
}

/** The file's lines, split at LF, streamed. */
export async function* lines(file: string): AsyncGenerator<Line> {
  let rest = Buffer.alloc(0);
  let n = 0;
  let at = 0;
  for await (const chunk of createReadStream(file, { highWaterMark: 1 << 20 }) as AsyncIterable<Buffer>) {
    let buf = rest.length ? Buffer.concat([rest, chunk]) : chunk;
    let start = 0;
    for (let end = buf.indexOf(LF); end >= 0; end = buf.indexOf(LF, start)) {
      yield { n: ++n, text: buf.subarray(start, end), at, size: end + 1 - start };
      at += end + 1 - start;
      start = end + 1;
    }
    buf = buf.subarray(start);
    rest = Buffer.from(buf);
  }
  if (rest.length) yield { n: n + 1, text: rest, at, size: rest.length };
}

/** Without a carriage return at its end (the meter's exports end lines with CRLF). */
export const bare = (text: Buffer) => (text.length && text[text.length - 1] === CR ? text.subarray(0, -1) : text);

/** Fields of a line read alone as a row (commas outside quotes), and whether it leaves a quote open. */
function shape(text: Buffer): { fields: number; open: boolean } {
  let fields = 1;
  let open = false;
  for (const byte of text) {
    if (byte === QUOTE)
      open = !open; // "" inside quotes toggles twice: still inside
    else if (byte === COMMA && !open) fields++;
  }
  return { fields, open };
}

/** The bytes up to the first comma: the event_id, by which a fragment finds the row it began. */
const key = (text: Buffer) => {
  const comma = text.indexOf(COMMA);
  return comma < 0 ? null : text.toString('latin1', 0, comma);
};

/** A fragment line and the later line that holds its row whole. */
export interface Fragment {
  line: number;
  wholeAt: number;
  at: number;
  size: number;
}

/**
 * The file's fragments (see above), in line order; null when there are too many lines of their
 * shape to be sure of them.
 */
export async function findFragments(file: string): Promise<Fragment[] | null> {
  const byKey = new Map<string, Line[]>();
  const noComma: Line[] = [];
  const found: Fragment[] = [];
  let candidates = 0;
  // Inside a quoted field that goes on over line breaks (a text with a line break in it): a line
  // there is no row's start, so none is taken for a fragment (one of its lines may be the start of
  // a later line by chance: without it the text would change).
  let inside = false;
  for await (const line of lines(file)) {
    if (line.n === 1) continue; // the header
    const text = bare(line.text);
    const { fields, open } = shape(text);
    if (fields === EVENT_FIELDS.length && !open) {
      const k = key(text);
      for (const f of [...(k === null ? [] : (byKey.get(k) ?? [])), ...noComma]) {
        if (text.length > f.text.length && text.compare(f.text, 0, f.text.length, 0, f.text.length) === 0) {
          found.push({ line: f.n, wholeAt: line.n, at: f.at, size: f.size });
          const list = key(f.text) === null ? noComma : byKey.get(key(f.text)!)!;
          list.splice(list.indexOf(f), 1);
          if (shape(f.text).open) inside = !inside; // the quote it left open was no quote: the lines since were rows
        }
      }
    }
    if (inside) {
      if (open) inside = false; // an odd number of quotes closes the field
      continue;
    }
    if (fields >= EVENT_FIELDS.length && !open) continue; // a row, or too many fields: not the start of one
    if (++candidates > MAX_CANDIDATES) return null;
    if (open) inside = true;
    const kept: Line = { ...line, text: Buffer.from(text) };
    const k = key(text);
    if (k === null) noComma.push(kept);
    else byKey.set(k, [...(byKey.get(k) ?? []), kept]);
  }
  return found.sort((a, b) => a.line - b.line);
}

/** Copies `file` to `to` without the fragments' lines (their bytes and line breaks), streaming. */
export function withoutFragments(file: string, to: string, fragments: Fragment[]): void {
  const input = openSync(file, 'r');
  const output = openSync(to, 'w');
  try {
    const buf = Buffer.alloc(1 << 20);
    let position = 0;
    const copyUpTo = (end: number) => {
      while (position < end) {
        const read = readSync(input, buf, 0, Math.min(buf.length, end - position), position);
        if (read === 0) break;
        writeSync(output, buf, 0, read);
        position += read;
      }
    };
    for (const f of fragments) {
      copyUpTo(f.at);
      position = f.at + f.size;
    }
    copyUpTo(Infinity);
  } finally {
    closeSync(input);
    closeSync(output);
  }
}

/** A line of the file without the fragments, as a line of the file itself. */
export function lineInInput(line: number, fragments: Fragment[]): number {
  let n = line;
  for (const f of fragments) if (f.line <= n) n++;
  return n;
}

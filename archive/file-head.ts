/** The start of a large file, read without reading it whole (the archive's inputs, the calls file). */
import { closeSync, openSync, readSync } from 'node:fs';

/**
 * The first `bytes` of a file as text, read alone: read whole, a gateway's CSV of a few months
 * passes the longest string Node makes (512 MB), and the archive failed on that, not on its rows.
 */
export function fileHead(file: string, bytes: number): string {
  const head = Buffer.alloc(bytes);
  const fd = openSync(file, 'r');
  try {
    return head.toString('utf8', 0, readSync(fd, head, 0, bytes, 0));
  } finally {
    closeSync(fd);
  }
}

/** The first line, without its line ending or a byte-order mark. */
export function firstLine(file: string): string {
  return fileHead(file, 4096)
    .split(/\r?\n/, 1)[0]
    .replace(/^\uFEFF/, '');
}

/**
 * What a file whose first line is not text is (control characters, bytes that are no UTF-8), or
 * null: quoted in the refusal of its header, a Parquet file given for a CSV printed its binary bytes
 * to the terminal.
 */
export function notText(line: string): string | null {
  const control = (c: string) => (c < ' ' && c !== '\t' && c !== '\r') || c === '\u007f' || c === '\ufffd';
  if (![...line].some(control)) return null;
  return line.startsWith('PAR1') ? 'a Parquet file, not a CSV' : 'a binary file, not a CSV';
}

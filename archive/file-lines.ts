/**
 * Where DuckDB's numbers for the rows of a CSV are in the file itself. The row checks number the
 * rows one after the other (the header is row 1) and skip blank lines; the reader's errors count
 * blank lines too. Neither counts the lines of a row whose quoted text holds line breaks: past such
 * a row, or a blank line, "line N" named another line of the file than the one at fault. Streamed,
 * and only read for a file that was refused.
 */
import { bare, lines } from './fragments';

const QUOTE = 0x22;
const COMMA = 0x2c;

/**
 * Whether a quoted field goes on past the end of `text`, read as DuckDB's reader reads it: a quote
 * opens a field only as its first character, `""` in one is a quote, and a quote elsewhere is a
 * character of the text (`a 5" screen`, typed by hand): counted as a quote, it took the rows after
 * it for a text's lines, and a bad row further on was named on the line of a good one.
 */
function insideAfter(text: Buffer, inside: boolean): boolean {
  let start = !inside; // at the start of a field
  for (let i = 0; i < text.length; i++) {
    const byte = text[i];
    if (inside) {
      if (byte !== QUOTE) continue;
      if (text[i + 1] === QUOTE) i++;
      else inside = false;
    } else if (byte === QUOTE && start) {
      inside = true;
      start = false;
    } else start = byte === COMMA;
  }
  return inside;
}

/**
 * The file's line (the header is 1) on which each of `wanted` starts: rows as the row checks number
 * them (`blanks: 'skipped'`), or as the reader's errors do (`'counted'`). A number past the file's
 * end stays as it is.
 */
export async function fileLines(file: string, wanted: number[], blanks: 'skipped' | 'counted'): Promise<Map<number, number>> {
  const left = new Set(wanted);
  const found = new Map<number, number>();
  let row = 0;
  let inside = false; // in a quoted field that goes on over a line break
  for await (const line of lines(file)) {
    if (left.size === 0) break;
    if (!inside && (blanks === 'counted' || bare(line.text).length > 0)) {
      row++;
      if (left.delete(row)) found.set(row, line.n);
    }
    inside = insideAfter(line.text, inside);
  }
  for (const n of left) found.set(n, n);
  return found;
}

/**
 * One CSV cell, as every CSV of the project writes it (the meter's exports, the gateway's local
 * event and call files, the archive's reports) and as the archive reads it back.
 *
 * Formula cells: a spreadsheet opening the file runs a cell that starts with `=`, `+`, `-`, `@`,
 * tab or carriage return as a formula (OWASP, "CSV injection"), and some trim leading whitespace
 * first, so `=` after spaces, a no-break space or a line break counts too, as do the full-width
 * signs `＝`, `＋`, `－`, `＠`. Such text is written
 * with a leading apostrophe, which spreadsheets show as text. So that a reader can undo it
 * exactly, text that itself starts with an apostrophe gets one more. Reading: a cell that starts
 * with an apostrophe loses that one apostrophe, nothing else changes. Only text is touched; numbers,
 * booleans and dates are written as they are.
 */

/** First characters that make a spreadsheet treat a cell as a formula. */
const FORMULA_TRIGGERS = ['=', '+', '-', '@', '\t', '\r'];
/**
 * A formula sign as the first character after any whitespace (`\s`: spaces, NBSP, ideographic
 * space, line breaks, tabs), in its ASCII or full-width form (＝ ＋ － ＠, U+FF1D U+FF0B U+FF0D
 * U+FF20): Excel with a Japanese input method reads the full-width signs as the ASCII ones.
 */
const FORMULA_AFTER_WHITESPACE = /^\s*[=+\-@\uff1d\uff0b\uff0d\uff20]/;

/** The mark put in front of such text (and in front of text that starts with the mark itself). */
export const NEUTRAL_MARK = "'";

/** Text as it goes into a CSV cell: formula-looking text (and text starting with the mark) gets the mark. */
function neutraliseText(text: string): string {
  // Most cells (ids, names, words) start with a letter or digit: nothing to check (the hot path).
  const c = text.charCodeAt(0) | 0x20; // lower case for letters; digits keep their codes
  if ((c >= 0x61 && c <= 0x7a) || (c >= 0x30 && c <= 0x39)) return text;
  const first = text.charAt(0);
  const marked = first === NEUTRAL_MARK || FORMULA_TRIGGERS.includes(first) || FORMULA_AFTER_WHITESPACE.test(text);
  return marked ? NEUTRAL_MARK + text : text;
}

/** The original text of a cell written by `neutraliseText`. */
export function restoreText(cell: string): string {
  return cell.startsWith(NEUTRAL_MARK) ? cell.slice(NEUTRAL_MARK.length) : cell;
}

let lastMs = NaN;
let lastText = '';
/**
 * `toISOString`, kept for its millisecond: V8 formats it through printf (about 7k instructions, a
 * sixtieth of a gateway request's), and a busy gateway stamps many events within one millisecond.
 */
function isoText(date: Date): string {
  const ms = date.getTime();
  if (ms !== lastMs) {
    lastText = date.toISOString(); // an invalid date throws here, as before (NaN is never lastMs)
    lastMs = ms;
  }
  return lastText;
}

function isDate(value: unknown): value is Date {
  return Object.prototype.toString.call(value) === '[object Date]';
}

/** One CSV field: dates as RFC 3339 UTC, text neutralised, quoted when it holds a comma, quote or line break (RFC 4180). */
export function csvField(value: unknown): string {
  if (value === null || value === undefined) return '';
  if (typeof value === 'string') return quoted(neutraliseText(value));
  // Numbers and booleans never hold a comma, quote or line break (and they are most of a line's cells).
  if (typeof value === 'number' || typeof value === 'boolean') return String(value);
  return quoted(isDate(value) ? isoText(value) : String(value));
}

function quoted(text: string): string {
  return /[",\r\n]/.test(text) ? `"${text.replace(/"/g, '""')}"` : text;
}

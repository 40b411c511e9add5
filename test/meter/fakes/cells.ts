/**
 * What a cell holds, and how Sheets reads a value written with setValues: strings are parsed as
 * typed input (numbers, booleans, dates and formulas are recognised; a leading apostrophe keeps
 * text as text), and getValues gives numbers, booleans, strings and Dates back as such.
 */

export type Cell = string | number | boolean | Date;

/** A formula cell: the fake cannot calculate, so reading it gives its text behind a marker. */
export class Formula {
  constructor(readonly text: string) {}
}

const NUMBER = /^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/;
const ISO_DATE = /^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})?)?$/;

/** What Sheets stores for a value written with setValues (it parses strings as typed input). */
export function parseWritten(value: unknown): Cell | Formula {
  if (value === null || value === undefined) return '';
  if (typeof value === 'number' || typeof value === 'boolean') return value;
  if (Object.prototype.toString.call(value) === '[object Date]') return new Date((value as Date).getTime());
  if (typeof value !== 'string') return String(value);
  if (value.startsWith("'")) return value.slice(1);
  if (value.startsWith('=')) return new Formula(value);
  const t = value.trim();
  if (NUMBER.test(t)) return Number(t);
  if (/^(true|false)$/i.test(t)) return t.toLowerCase() === 'true';
  if (ISO_DATE.test(t) && Number.isFinite(Date.parse(t))) return new Date(Date.parse(t));
  return value;
}

export function readCell(cell: Cell | Formula | undefined): Cell {
  if (cell === undefined) return '';
  if (cell instanceof Formula) return `#FORMULA(${cell.text})`;
  if (cell instanceof Date) return new Date(cell.getTime());
  return cell;
}

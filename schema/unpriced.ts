/**
 * Calls without a price. When nobody knows what a call cost (the model has no known price and
 * the provider reported none), the event still carries the ingest default cost of 0, so totals
 * would silently undercount. Such an event is marked in `error_code` with the code `UNPRICED`
 * (alone, or after the call's own code as `TIMEOUT|UNPRICED`), which the meter counts and shows.
 * A sender marks it either way: `error_code` holding `UNPRICED`, or `cost_usd: null` sent
 * explicitly (the ingest adds the code); a cost that is simply absent keeps meaning 0. An event
 * with a cost known only in part (a voice response whose text tokens have no price) carries that
 * part, which the totals keep, and `UNPRICED`, which says it is short.
 */

const UNPRICED = 'UNPRICED';
const SEPARATOR = '|';

export function isUnpriced(errorCode: unknown): boolean {
  return typeof errorCode === 'string' && errorCode.split(SEPARATOR).some((code) => code.trim() === UNPRICED);
}

/** The error_code of an event whose cost is unknown: its own code (if any) plus `UNPRICED`. */
export function markUnpriced(errorCode: string): string {
  if (isUnpriced(errorCode)) return errorCode;
  return errorCode === '' ? UNPRICED : `${errorCode}${SEPARATOR}${UNPRICED}`;
}

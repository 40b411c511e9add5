/**
 * Calls whose tokens and cost are an estimate, not the provider's figures. A stream cut on our side
 * (its client hung up, the gateway shut down or gave it up as too large) before the provider reported
 * its usage, or a call its client hung up on (or the gateway gave up on, out of time) after the
 * provider received it and before the answer began, or a Cold job's call whose worker was killed during it (`WORKER_LOST`, metered by
 * the run that takes the job back: gateway/src/cold-call-marks.ts), is billed by the provider all the same (the whole prompt and what it generated), so its
 * event carries an estimate of that rather than a silent 0 tokens and $0, and is marked in
 * `error_code` with the code `ESTIMATED` after the call's own (`CLIENT_CLOSED|ESTIMATED`; with an
 * unpriced model `CLIENT_CLOSED|ESTIMATED|UNPRICED`). Its cost counts in spend totals and caps as
 * any other; the mark tells a reader it is not a measured figure. Same separator as `UNPRICED`.
 */

const ESTIMATED = 'ESTIMATED';
const SEPARATOR = '|';

export function isEstimated(errorCode: unknown): boolean {
  return typeof errorCode === 'string' && errorCode.split(SEPARATOR).some((code) => code.trim() === ESTIMATED);
}

/** The error_code of an event whose figures are an estimate: its own code (if any) plus `ESTIMATED`. */
export function markEstimated(errorCode: string): string {
  if (isEstimated(errorCode)) return errorCode;
  return errorCode === '' ? ESTIMATED : `${errorCode}${SEPARATOR}${ESTIMATED}`;
}

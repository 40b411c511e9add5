/**
 * The meter web app's replies. Apps Script always answers HTTP 200, so the outcome is in the body:
 * `{ok:true, ...}` or `{ok:false, error, code}`. `error` is for people; `code` is for programs, and
 * says whether sending the same request again can succeed. A sender that gets a reply without a
 * code (an older meter) treats it as worth retrying.
 */

/** Every code, what it means, and whether the same request is refused again however often it is sent. */
export const METER_REPLY_CODES = {
  unauthorized: { permanent: false, meaning: 'the token is missing or wrong (fixable by configuration, so retried)' },
  invalid_body: { permanent: true, meaning: 'the body is not JSON or not the expected shape' },
  invalid_event: { permanent: true, meaning: 'an event breaks the record rules; the error names the event and field' },
  future_timestamp: { permanent: true, meaning: 'an event is stamped further ahead than the clock-skew allowance' },
  too_many_events: { permanent: true, meaning: 'more than 500 events or call records in one request' },
  invalid_call: { permanent: true, meaning: 'a call record breaks the record rules; the error names the record and field' },
  invalid_argument: { permanent: true, meaning: 'a query parameter or back-office argument is wrong; the error names it' },
  unknown_action: { permanent: true, meaning: 'no such `action`' },
  busy: { permanent: false, meaning: 'the script lock was not free in time; nothing was written' },
  spreadsheet_full: { permanent: false, meaning: "the write would pass Google's 10 million cell limit; nothing was written" },
  not_set_up: { permanent: false, meaning: 'a tab the request needs is missing: run setup()' },
  config_error: { permanent: false, meaning: 'a Config value is unusable; the error names the key' },
  record_unreadable: {
    permanent: false,
    meaning: 'a cell the meter keeps a record in was edited into something it cannot read; the error names the tab, row and column to fix',
  },
  internal: { permanent: false, meaning: 'a Google service failed part-way (e.g. "Service Spreadsheets timed out") or another exception' },
} as const;

export type MeterReplyCode = keyof typeof METER_REPLY_CODES;

export interface MeterFailure {
  ok: false;
  error: string;
  code: MeterReplyCode;
}

/** A refusal with its code; the web app turns it into `{ok:false, error: message, code}`. */
export class MeterRefusal extends Error {
  constructor(
    readonly code: MeterReplyCode,
    message: string,
  ) {
    super(message);
    this.name = 'MeterRefusal';
  }
}

/** True only for a known code that a retry cannot fix. No code (an older meter) or an unknown one: retry. */
export function isPermanentRefusal(code: unknown): boolean {
  return typeof code === 'string' && Object.prototype.hasOwnProperty.call(METER_REPLY_CODES, code)
    ? METER_REPLY_CODES[code as MeterReplyCode].permanent
    : false;
}

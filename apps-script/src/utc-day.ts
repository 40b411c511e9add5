/** UTC days: every day the meter speaks of (spend, digest, export, retention) is a UTC day. */
import { MeterRefusal } from '../../schema/meter-reply';

export const DAY_MS = 86_400_000;

export function utcDayStart(ms: number): number {
  return Math.floor(ms / DAY_MS) * DAY_MS;
}

/** `YYYY-MM-DD` → that day's midnight UTC, or a refusal naming the `since` parameter. */
export function parseUtcDay(since: string | undefined): Date {
  const m = /^(\d{4})-(\d{2})-(\d{2})$/.exec(since ?? '');
  const day = m ? new Date(Date.UTC(Number(m[1]), Number(m[2]) - 1, Number(m[3]))) : null;
  if (!day || day.toISOString().slice(0, 10) !== since) {
    throw new MeterRefusal('invalid_argument', `since: expected a UTC day as YYYY-MM-DD, got "${since ?? ''}"`);
  }
  return day;
}

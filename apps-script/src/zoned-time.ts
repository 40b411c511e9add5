/**
 * Local dates and times in an IANA time zone (the back office books in Config TIMEZONE), with
 * Intl as Apps Script's V8 has it: a local date and time → the instant, and an instant → a short
 * local text for messages.
 */
import { MeterRefusal } from '../../schema/meter-reply';

/** The local year, month, day, hour, minute and second of an instant in a time zone, as digits. */
function localParts(at: Date, timeZone: string): Record<string, string> {
  const parts: Record<string, string> = {};
  const format = new Intl.DateTimeFormat('en-US', {
    timeZone,
    hourCycle: 'h23',
    year: 'numeric',
    month: '2-digit',
    day: '2-digit',
    hour: '2-digit',
    minute: '2-digit',
    second: '2-digit',
  });
  for (const p of format.formatToParts(at)) parts[p.type] = p.value;
  return parts;
}

/** Minutes east of UTC of a time zone at an instant. */
function offsetMinutes(at: number, timeZone: string): number {
  const parts = localParts(new Date(at), timeZone);
  const asUtc = Date.UTC(
    Number(parts.year),
    Number(parts.month) - 1,
    Number(parts.day),
    Number(parts.hour),
    Number(parts.minute),
    Number(parts.second),
  );
  return Math.round((asUtc - at) / 60_000);
}

/** A local date and time in a time zone → the instant. Refuses what does not parse, naming the argument. */
export function zonedInstant(date: string, time: string, timeZone: string, names: [string, string]): Date {
  const d = /^(\d{4})-(\d{2})-(\d{2})$/.exec(date);
  if (!d) throw new MeterRefusal('invalid_argument', `args.${names[0]}: expected a date as YYYY-MM-DD, got "${date}"`);
  const t = /^(\d{1,2}):(\d{2})$/.exec(time);
  if (!t || Number(t[1]) > 23 || Number(t[2]) > 59)
    throw new MeterRefusal('invalid_argument', `args.${names[1]}: expected a time as HH:MM (24 h), got "${time}"`);
  const [y, m, day] = [Number(d[1]), Number(d[2]), Number(d[3])];
  const local = Date.UTC(y, m - 1, day, Number(t[1]), Number(t[2]));
  const check = new Date(local);
  if (check.getUTCFullYear() !== y || check.getUTCMonth() !== m - 1 || check.getUTCDate() !== day)
    throw new MeterRefusal('invalid_argument', `args.${names[0]}: ${date} is not a calendar date`);
  // The instants this wall time may be, under the zone's offsets half a day either side: those that
  // read back as it are it. Two when the clocks go back (the earlier is taken); none when they go
  // forward over it (refused, not moved an hour).
  const candidates = [-12, 12].map((h) => local - offsetMinutes(local + h * 3_600_000, timeZone) * 60_000);
  const valid = candidates.filter((at) => at + offsetMinutes(at, timeZone) * 60_000 === local);
  if (!valid.length)
    throw new MeterRefusal(
      'invalid_argument',
      `args.${names[1]}: ${time} does not exist on ${date} in ${timeZone} (the clocks go forward)`,
    );
  return new Date(Math.min(...valid));
}

/** "Wed 1 Jul, 10:30" in the time zone. */
export function localText(d: Date, timeZone: string): string {
  return new Intl.DateTimeFormat('en-GB', {
    timeZone,
    weekday: 'short',
    day: 'numeric',
    month: 'short',
    hour: '2-digit',
    minute: '2-digit',
    hourCycle: 'h23',
  }).format(d);
}

/** "2026-11-22 12:00": the local date and time in the time zone, the year shown. */
export function localStamp(d: Date, timeZone: string): string {
  const parts = localParts(d, timeZone);
  return `${parts.year}-${parts.month}-${parts.day} ${parts.hour}:${parts.minute}`;
}

/** Config TIMEZONE, checked to be a time zone Intl knows. */
export function checkedTimeZone(tz: string): string {
  try {
    new Intl.DateTimeFormat('en', { timeZone: tz });
  } catch {
    throw new MeterRefusal('config_error', `Config TIMEZONE: "${tz}" is not an IANA time zone`);
  }
  return tz;
}

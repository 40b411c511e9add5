/**
 * Business hours in the configuration's local time: segments separated by `;`, each
 * `<days> <HH:MM>-<HH:MM>`, days as `Mon-Fri`, `Sat` or `Mon,Wed,Fri`. Example:
 * "Mon-Fri 08:00-18:00; Sat 09:00-13:00". A range may end at 24:00.
 */
const DAYS = ['sun', 'mon', 'tue', 'wed', 'thu', 'fri', 'sat'];

export interface Window {
  day: number;
  from: number; // minutes since local midnight
  to: number;
}

function dayIndex(name: string): number {
  return DAYS.indexOf(name.trim().toLowerCase().slice(0, 3));
}

function minutes(hhmm: string): number {
  const m = /^(\d{1,2}):(\d{2})$/.exec(hhmm.trim());
  if (!m) return NaN;
  const h = Number(m[1]);
  const mi = Number(m[2]);
  if (h > 24 || mi > 59 || (h === 24 && mi !== 0)) return NaN;
  return h * 60 + mi;
}

export function parseBusinessHours(text: string): { ok: true; windows: Window[] } | { ok: false; error: string } {
  const windows: Window[] = [];
  for (const segment of text
    .split(';')
    .map((s) => s.trim())
    .filter(Boolean)) {
    const m = /^([A-Za-z,\- ]+?)\s+(\d{1,2}:\d{2})\s*-\s*(\d{1,2}:\d{2})$/.exec(segment);
    if (!m) return { ok: false, error: `"${segment}": expected "<days> HH:MM-HH:MM"` };
    const from = minutes(m[2]);
    const to = minutes(m[3]);
    if (!(from < to))
      return {
        ok: false,
        error: `"${segment}": the range must end after it starts (hours past midnight are two segments: "Fri 18:00-24:00; Sat 00:00-02:00")`,
      };
    const days: number[] = [];
    for (const part of m[1].split(',')) {
      const range = part.split('-').map(dayIndex);
      if (range.some((d) => d < 0) || range.length > 2) return { ok: false, error: `"${segment}": unknown day in "${part.trim()}"` };
      if (range.length === 1) days.push(range[0]);
      else
        for (let d = range[0]; ; d = (d + 1) % 7) {
          days.push(d);
          if (d === range[1]) break;
        }
    }
    for (const day of days) windows.push({ day, from, to });
  }
  return windows.length ? { ok: true, windows } : { ok: false, error: 'no opening hours given' };
}

/** An instant's local weekday (long), date and time in a time zone, as Intl gives its parts. */
function localParts(at: Date, timeZone: string): Record<string, string> {
  const format = new Intl.DateTimeFormat('en-US', {
    timeZone,
    hourCycle: 'h23',
    weekday: 'long',
    year: 'numeric',
    month: '2-digit',
    day: '2-digit',
    hour: '2-digit',
    minute: '2-digit',
  });
  return Object.fromEntries(format.formatToParts(at).map((p) => [p.type, p.value]));
}

/** "Saturday 2026-11-28 14:05": the day, date and time of an instant in a time zone. */
export function localMoment(at: Date, timeZone: string): string {
  const p = localParts(at, timeZone);
  return `${p.weekday} ${p.year}-${p.month}-${p.day} ${p.hour}:${p.minute}`;
}

/** Whether a weekday (0: Sunday) and minutes since midnight fall in one of the windows. */
const inWindows = (windows: Window[], day: number, m: number) => windows.some((w) => w.day === day && m >= w.from && m < w.to);

export function isOpen(windows: Window[], at: Date, timeZone: string): boolean {
  const p = localParts(at, timeZone);
  return inWindows(windows, dayIndex(p.weekday), Number(p.hour) * 60 + Number(p.minute));
}

/** The date and time arguments of the back office's actions that make or move a booking. */
const SLOT_ARGS: Record<string, [string, string]> = { book_slot: ['date', 'time'], reschedule_slot: ['new_date', 'new_time'] };

/**
 * The refusal of a booking (or a move) whose local start time falls outside the business hours,
 * or null: another function, or a date or time that does not parse (the back office refuses it,
 * naming it). A date's weekday does not depend on the time zone; the time is the business's.
 */
export function slotOutsideHours(hours: string, timeZone: string, fn: string, args: Record<string, unknown>): string | null {
  // Its own names only: `constructor` or `toString` (a name the model made up) would find Object's.
  const names = Object.hasOwn(SLOT_ARGS, fn) ? SLOT_ARGS[fn] : undefined;
  const parsed = parseBusinessHours(hours);
  if (!names || !parsed.ok) return null;
  const [date, time] = names.map((n) => (typeof args[n] === 'string' ? (args[n] as string).trim() : ''));
  const d = /^(\d{4})-(\d{2})-(\d{2})$/.exec(date);
  const at = minutes(time);
  if (!d || !(at < 24 * 60)) return null;
  const day = new Date(Date.UTC(Number(d[1]), Number(d[2]) - 1, Number(d[3]))).getUTCDay();
  if (inWindows(parsed.windows, day, at)) return null;
  return `args.${names[1]}: ${date} ${time} is outside business hours (${hours}, ${timeZone}): offer the caller a time within them`;
}

/**
 * The keys a caller presses: Twilio's media stream sends each as a `dtmf` message
 * (`{"event":"dtmf","dtmf":{"track":"inbound_track","digit":"1"}}`). Keys pressed in a row make one
 * entry (a choice, a booking number): it ends with `#` (not part of it) or when no key comes for
 * `pauseMs` (2 s). What an entry does is the call session's (call-session.ts): just `0` is "a
 * person, please", anything else is given to the model as the caller's turn (`entryText`).
 */
const KEY = /^[0-9*#]$/;
/**
 * Longer is not an entry a caller types on a phone (a number, a date): the keys after it are
 * counted, not kept, and the entry says it was cut, so the model asks again rather than taking a
 * truncated number for what the caller typed.
 */
const MAX_KEYS = 32;

/** One entry: the keys kept (32 at most) and how many were pressed. */
export interface KeypadEntry {
  keys: string;
  pressed: number;
}

/** The entry as the model is given it (the instructions describe both forms). */
export function entryText({ keys, pressed }: KeypadEntry): string {
  if (pressed <= keys.length) return `(keys pressed: ${keys})`;
  return `(keys pressed: ${keys}… cut: ${pressed} keys pressed, only the first ${keys.length} kept)`;
}

export class Keypad {
  private keys = '';
  private pressedCount = 0;
  private timer: NodeJS.Timeout | null = null;

  constructor(
    private readonly pauseMs: number,
    private readonly entry: (entry: KeypadEntry) => void,
  ) {}

  /** A `dtmf` message's `dtmf` field; anything but one key of the phone's keypad is ignored. */
  pressed(dtmf: { digit?: unknown } | undefined): void {
    const key = dtmf?.digit;
    if (typeof key !== 'string' || !KEY.test(key)) return;
    if (this.timer) clearTimeout(this.timer);
    if (key === '#') return this.end();
    this.pressedCount++;
    if (this.keys.length < MAX_KEYS) this.keys += key;
    this.timer = setTimeout(() => this.end(), this.pauseMs);
    this.timer.unref();
  }

  close(): void {
    if (this.timer) clearTimeout(this.timer);
    this.keys = '';
    this.pressedCount = 0;
  }

  private end(): void {
    this.timer = null;
    const entry = { keys: this.keys, pressed: this.pressedCount };
    this.keys = '';
    this.pressedCount = 0;
    if (entry.keys) this.entry(entry);
  }
}

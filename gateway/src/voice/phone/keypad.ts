/**
 * The keys a caller presses: Twilio's media stream sends each as a `dtmf` message
 * (`{"event":"dtmf","dtmf":{"track":"inbound_track","digit":"1"}}`). Keys pressed in a row make one
 * entry (a choice, a booking number): it ends with `#` (not part of it) or when no key comes for
 * `pauseMs` (2 s). What an entry does is the call session's (call-session.ts): just `0` is "a
 * person, please", anything else is given to the model as the caller's turn.
 */
const KEY = /^[0-9*#]$/;
/** Longer is not an entry a caller types on a phone (a number, a date): the rest is dropped. */
const MAX_KEYS = 32;

export class Keypad {
  private keys = '';
  private timer: NodeJS.Timeout | null = null;

  constructor(
    private readonly pauseMs: number,
    private readonly entry: (keys: string) => void,
  ) {}

  /** A `dtmf` message's `dtmf` field; anything but one key of the phone's keypad is ignored. */
  pressed(dtmf: { digit?: unknown } | undefined): void {
    const key = dtmf?.digit;
    if (typeof key !== 'string' || !KEY.test(key)) return;
    if (this.timer) clearTimeout(this.timer);
    if (key === '#') return this.end();
    if (this.keys.length < MAX_KEYS) this.keys += key;
    this.timer = setTimeout(() => this.end(), this.pauseMs);
    this.timer.unref();
  }

  close(): void {
    if (this.timer) clearTimeout(this.timer);
    this.keys = '';
  }

  private end(): void {
    this.timer = null;
    const keys = this.keys;
    this.keys = '';
    if (keys) this.entry(keys);
  }
}

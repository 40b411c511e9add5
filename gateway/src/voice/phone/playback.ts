/**
 * What the caller has actually heard of the assistant's audio. Audio sent to Twilio is followed by
 * a `mark` at least every 100 ms of it and at the end of each answer; Twilio echoes a mark once the
 * audio before it has finished playing. So an echoed mark says "the caller heard this item up to
 * N ms". Between marks playback runs in real time, so the estimate is the last echoed position
 * plus the time since its echo, never more than what was sent. That is the `audio_end_ms` a
 * barge-in truncates the item at. (A mark per chunk would double the messages for nothing.)
 *
 * µ-law at 8 kHz is one byte per sample: 8 bytes = 1 ms.
 */

export const bytesToMs = (bytes: number) => bytes / 8;

/** Audio between marks: the precision of "what was heard" before interpolation. */
const MARK_EVERY_MS = 100;

/** Bytes of a base64 text without decoding it. */
export function base64Bytes(b64: string): number {
  const n = b64.length;
  if (n === 0) return 0;
  const pad = b64.charCodeAt(n - 1) === 61 ? (b64.charCodeAt(n - 2) === 61 ? 2 : 1) : 0;
  return (n / 4) * 3 - pad;
}

interface Pending {
  item: string;
  endMs: number;
}

export class Playback {
  private seq = 0;
  private readonly pending = new Map<string, Pending>();
  private item: string | null = null;
  private sentMs = 0;
  private heardMs = 0;
  /** When the last echoed mark came (or the item's first chunk went out, before any echo). */
  private anchorAt = 0;
  /** Audio of the item sent since the last mark. */
  private unmarkedMs = 0;

  constructor(private readonly now: () => number = () => performance.now()) {}

  /** Records a chunk of `item` sent to Twilio; returns a mark name to send right after it, if one is due. */
  sent(item: string, bytes: number): string | null {
    if (item !== this.item) {
      // A new item plays once what is still queued of the previous one has played.
      const queued = this.item && this.pending.size ? this.sentMs - this.heardMs - (this.now() - this.anchorAt) : 0;
      this.item = item;
      this.sentMs = 0;
      this.heardMs = 0;
      this.anchorAt = this.now() + Math.max(0, queued);
      this.unmarkedMs = 0;
    }
    this.sentMs += bytesToMs(bytes);
    this.unmarkedMs += bytesToMs(bytes);
    return this.unmarkedMs >= MARK_EVERY_MS ? this.mark() : null;
  }

  /** The end of an answer's audio: a mark for what is not marked yet (null if nothing is). */
  mark(): string | null {
    if (!this.item || this.unmarkedMs === 0) return null;
    const name = `m${++this.seq}`;
    this.pending.set(name, { item: this.item, endMs: this.sentMs });
    this.unmarkedMs = 0;
    return name;
  }

  /** Twilio echoed a mark: the audio before it has played. Unknown names (cleared ones) are ignored. */
  echoed(name: string): void {
    const p = this.pending.get(name);
    if (!p) return;
    // Marks come back in order; drop this one and any earlier.
    for (const key of this.pending.keys()) {
      this.pending.delete(key);
      if (key === name) break;
    }
    if (p.item === this.item) {
      this.heardMs = p.endMs;
      this.anchorAt = this.now();
    }
  }

  /** Assistant audio sent and not yet played out. */
  playing(): boolean {
    return this.item !== null && !this.drained();
  }

  /** The item playing (or last played) and how much of it the caller has heard, in whole ms. */
  heard(): { item: string; ms: number } | null {
    if (!this.item) return null;
    const ms = this.drained() ? this.sentMs : Math.max(0, Math.min(this.sentMs, this.heardMs + (this.now() - this.anchorAt)));
    return { item: this.item, ms: Math.floor(ms) };
  }

  /** Whether all audio sent is marked and every mark echoed (the caller heard everything). */
  drained(): boolean {
    return this.pending.size === 0 && this.unmarkedMs === 0;
  }

  /** After a `clear`: nothing is playing; echoes of cleared marks are ignored. */
  clear(): void {
    this.pending.clear();
    this.item = null;
    this.sentMs = 0;
    this.heardMs = 0;
    this.unmarkedMs = 0;
  }
}

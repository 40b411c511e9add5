/**
 * What the caller has actually heard of the assistant's audio. Audio sent to Twilio is followed by
 * a `mark` at least every 100 ms of it and at the end of each answer; Twilio echoes a mark once the
 * audio before it has finished playing. So an echoed mark says "the caller heard this item up to
 * N ms". Between marks playback runs in real time, so the estimate is the last echoed position
 * plus the time since its echo, never more than what was sent; audio that comes once all sent
 * before it has played (the model paused mid-answer) plays from when it comes. That is the `audio_end_ms` a
 * barge-in truncates the item at. (A mark per chunk would double the messages for nothing.)
 *
 * Items play in the order they were sent: an answer that comes while an earlier one still plays
 * (the model answering a function's result) waits behind it. So each item keeps its own position
 * until all of it was heard, and a barge-in truncates every item not heard to its end: the one
 * playing where the caller is, those queued behind it at 0.
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

/** One item's audio as sent and played. */
interface Segment {
  item: string;
  sentMs: number;
  /** Heard up to here when its last echoed mark came. */
  heardMs: number;
  /** When that mark came; before any, when it starts playing (ahead of now while earlier audio is queued). */
  anchorAt: number;
}

interface Pending {
  segment: Segment;
  endMs: number;
}

export class Playback {
  private seq = 0;
  private readonly pending = new Map<string, Pending>();
  /** Items in playing order, while some of their audio is unheard; the last is the one being sent. */
  private segments: Segment[] = [];
  /** Audio of the last item sent since its last mark. */
  private unmarkedMs = 0;
  /** Whether Twilio has echoed any mark: a stream that never does is not waited on (its marks are not late). */
  private echoes = false;

  constructor(private readonly now: () => number = () => performance.now()) {}

  /** Records a chunk of `item` sent to Twilio; returns a mark name to send right after it, if one is due. */
  sent(item: string, bytes: number): string | null {
    let segment = this.segments.at(-1);
    if (segment?.item !== item) {
      // A new item plays once what is still queued of the previous one has played (which may
      // itself be queued behind another).
      const previousEnds = segment && !this.drained() ? segment.anchorAt + segment.sentMs - segment.heardMs : 0;
      segment = { item, sentMs: 0, heardMs: 0, anchorAt: Math.max(this.now(), previousEnds) };
      this.segments.push(segment);
      this.unmarkedMs = 0;
    } else if (this.position(segment) >= segment.sentMs && this.firstUnheard(segment)) {
      // All of it sent so far has played (the model paused mid-answer): Twilio played silence
      // meanwhile, and what comes now plays from now, not from where the estimate ran on to. Not
      // while an item before it is still unheard by its marks (they come back late): it starts when
      // that one's last mark comes back (echoed), which a position set here would keep it from.
      segment.heardMs = segment.sentMs;
      segment.anchorAt = this.now();
    }
    segment.sentMs += bytesToMs(bytes);
    this.unmarkedMs += bytesToMs(bytes);
    return this.unmarkedMs >= MARK_EVERY_MS ? this.mark() : null;
  }

  /** The end of an answer's audio: a mark for what is not marked yet (null if nothing is). */
  mark(): string | null {
    const segment = this.segments.at(-1);
    if (!segment || this.unmarkedMs === 0) return null;
    const name = `m${++this.seq}`;
    this.pending.set(name, { segment, endMs: segment.sentMs });
    this.unmarkedMs = 0;
    return name;
  }

  /** Twilio echoed a mark: the audio before it has played. Unknown names (cleared ones) are ignored. */
  echoed(name: string): void {
    this.echoes = true;
    const p = this.pending.get(name);
    if (!p) return;
    // Marks come back in order; drop this one and any earlier.
    for (const key of this.pending.keys()) {
      this.pending.delete(key);
      if (key === name) break;
    }
    p.segment.heardMs = p.endMs;
    p.segment.anchorAt = this.now();
    // Items heard to their end are done with (the last stays: more of it may come).
    const last = this.segments.at(-1);
    const unheard = new Set([...this.pending.values()].map((q) => q.segment));
    this.segments = this.segments.filter((s) => s === last || unheard.has(s));
    // An item heard to its end: the one queued behind it starts playing now.
    const next = this.segments[0];
    if (next !== p.segment && !unheard.has(p.segment) && next.heardMs === 0) next.anchorAt = this.now();
  }

  /** Assistant audio sent and not yet played out. */
  playing(): boolean {
    return this.segments.length > 0 && !this.drained();
  }

  /** Each item not yet heard to its end (playing order) and how much of it the caller has heard, in whole ms. */
  heard(): Array<{ item: string; ms: number }> {
    if (this.drained()) return [];
    const last = this.segments.at(-1);
    const unheard = new Set([...this.pending.values()].map((q) => q.segment));
    if (this.unmarkedMs > 0 && last) unheard.add(last);
    return this.segments.filter((s) => unheard.has(s)).map((s) => ({ item: s.item, ms: Math.floor(this.position(s)) }));
  }

  /** How much of an item's audio was sent, in ms (0 for one not playing). */
  sentMs(item: string): number {
    return this.segments.find((s) => s.item === item)?.sentMs ?? 0;
  }

  /** When all the audio sent so far will have played, by the estimate (now when nothing is queued). */
  endsAt(): number {
    const last = this.segments.at(-1);
    return Math.max(this.now(), last && !this.drained() ? last.anchorAt + last.sentMs - last.heardMs : 0);
  }

  /** Whether all audio sent is marked and every mark echoed (the caller heard everything). */
  drained(): boolean {
    return this.pending.size === 0 && this.unmarkedMs === 0;
  }

  /** After a `clear`: nothing is playing; echoes of cleared marks are ignored. */
  clear(): void {
    this.pending.clear();
    this.segments = [];
    this.unmarkedMs = 0;
  }

  /**
   * Whether no item before this one is still unheard by its marks (marks come back in order: the
   * first pending is the earliest). On a stream that has never echoed a mark they never come: every
   * item's stay pending, and waiting on them would keep each answer after the first from its pauses.
   */
  private firstUnheard(s: Segment): boolean {
    const first = this.pending.values().next().value;
    return !this.echoes || !first || first.segment === s;
  }

  /** Where playback of an item is now: its last echoed position plus the time since, within what was sent. */
  private position(s: Segment): number {
    return Math.max(0, Math.min(s.sentMs, s.heardMs + (this.now() - s.anchorAt)));
  }
}

/**
 * What the assistant said, line by line, for the conversation a new session is given after a
 * reconnect and for the call's transcript. The Realtime API carries an answer's words three ways:
 * `response.output_audio_transcript.delta` beside its audio, `.done` with the whole line, and the
 * line again in `response.done` (its output message's `transcript`). One event lost, or a session
 * dropped mid-answer, must not leave a line the caller heard out of the history, so:
 *
 *   `.done`                      the line (the API's final text); the others are then ignored
 *   `response.done`, no `.done`  the output's transcript, else the deltas gathered
 *   neither (session lost, or the call ended, mid-answer)
 *                                the deltas gathered so far: about what the caller heard
 *
 * The last two count only when some of the answer's audio reached the caller (`voiced`); `.done`
 * keeps its own rule (an answer muted before any of it was heard is not said: the call session).
 *
 * An answer the caller cut off (a barge-in, keys, a line of the bridge's own: the call session's
 * `cutPlayback`, which truncates the server's item at what was heard) is kept as far as it was
 * heard: its words in proportion to its audio heard (whole words), marked `cut` and ended with
 * "…" (only "…" when not one word was); one queued behind it and never heard is no line at all. The API generates faster than the
 * caller hears, so its whole line is often given before the caller cuts in.
 */
import type { RealtimeResponse } from 'openai/resources/realtime/realtime';
import type { RealtimeServerMessage } from './realtime-link';
import type { SaidLine } from './realtime-session';
import { isObject } from '../../json-object';

interface Gathering {
  response: string;
  text: string;
}

export class AssistantTranscript {
  /** Items whose line is not settled yet, in the order they began. */
  private readonly open = new Map<string, Gathering>();
  /** Items whose line was settled (said or dropped): later events of them change nothing. */
  private readonly settled = new Set<string>();
  /** The lines said of the latest items, which the caller may still cut (those still playing). */
  private readonly lines = new Map<string, SaidLine>();

  constructor(
    private readonly voiced: (responseId: string) => boolean,
    private readonly said: { add: (line: SaidLine) => void; remove: (line: SaidLine) => void },
  ) {}

  /** `response.output_audio_transcript.delta`. */
  delta(e: RealtimeServerMessage): void {
    const item = String(e.item_id);
    if (this.settled.has(item) || typeof e.delta !== 'string') return;
    const g = this.open.get(item) ?? { response: String(e.response_id), text: '' };
    g.text += e.delta;
    this.open.set(item, g);
  }

  /** `response.output_audio_transcript.done`: `counts` says whether the line was said. */
  done(e: RealtimeServerMessage, counts: boolean): void {
    const item = String(e.item_id);
    if (this.settled.has(item)) return;
    this.settle(item);
    if (counts && typeof e.transcript === 'string' && e.transcript) this.say(item, e.transcript);
  }

  /** `response.done`: its messages whose `.done` never came, from its output, else their deltas (an output or content that is not a list holds none). */
  responseDone(r: RealtimeResponse | undefined): void {
    const id = String(r?.id ?? '');
    const output: unknown[] = Array.isArray(r?.output) ? r.output : [];
    for (const item of output) {
      if (!isObject(item) || item.type !== 'message' || typeof item.id !== 'string' || !item.id || this.settled.has(item.id)) continue;
      const parts = Array.isArray(item.content) ? item.content : [];
      this.settleWith(item.id, id, partsText(parts) || (this.open.get(item.id)?.text ?? ''));
    }
  }

  /** The session is gone (or the call over): lines it never finished, as far as they had come. */
  flush(): void {
    for (const [item, g] of this.open) this.settleWith(item, g.response, g.text);
  }

  /**
   * The caller heard `heardMs` of the item's `sentMs` of audio and no more (its playback was cut):
   * its line keeps what was heard. One still being generated is settled now, as far as its words
   * had come (its `.done`, later, would give the whole line).
   */
  cut(item: string, heardMs: number, sentMs: number): void {
    const share = sentMs > 0 ? Math.min(1, heardMs / sentMs) : 0;
    const g = this.open.get(item);
    if (g) {
      this.settle(item);
      if (heardMs > 0 && this.voiced(g.response)) this.say(item, heardWords(g.text, share), true);
      return;
    }
    const line = this.lines.get(item);
    if (!line || share >= 1) return;
    this.lines.delete(item);
    if (heardMs <= 0) return this.said.remove(line);
    const text = heardWords(line.text, share);
    if (text === line.text.trim()) return; // every word of it was heard
    line.text = `${text}…`;
    line.cut = true;
  }

  /**
   * The answer was cut in a pause of its audio, all of it sent heard: its line is kept as far as its
   * words had come, marked cut, also once settled already (keys settle the line they cut first).
   */
  stopped(item: string): void {
    const g = this.open.get(item);
    if (g) {
      this.settle(item);
      if (g.text.trim() && this.voiced(g.response)) this.say(item, g.text.trim(), true);
      return;
    }
    const line = this.lines.get(item);
    if (!line) return;
    this.lines.delete(item);
    line.text = `${line.text.trim()}…`;
    line.cut = true;
  }

  private settleWith(item: string, response: string, text: string): void {
    this.settle(item);
    if (text.trim() && this.voiced(response)) this.say(item, text.trim());
  }

  private say(item: string, text: string, cut = false): void {
    const line: SaidLine = cut ? { speaker: 'assistant', text: `${text}…`, cut } : { speaker: 'assistant', text };
    this.said.add(line);
    if (cut) return;
    this.lines.set(item, line);
    // Only the latest can still be playing: the map stays small over a long call.
    if (this.lines.size > MAX_CUTTABLE) this.lines.delete(this.lines.keys().next().value!);
  }

  private settle(item: string): void {
    this.open.delete(item);
    this.settled.add(item);
  }
}

/** Lines kept for a cut: more than the answers that can be queued at Twilio at once. */
const MAX_CUTTABLE = 16;

/**
 * The words of `text` within its first `share` (0..1): a word is kept when most of it is (its
 * middle was heard), without a trailing comma or the like; all of `text` when no word is left out.
 */
function heardWords(text: string, share: number): string {
  const t = text.trim();
  const n = Math.round(t.length * share);
  if (n >= t.length) return t;
  const start = t.slice(0, n).search(/\S*$/);
  const end = n + (t.slice(n).search(/\s|$/) as number);
  const at = n - start >= (end - start) / 2 ? end : start;
  if (!/[\p{L}\p{N}]/u.test(t.slice(at))) return t; // every word of it
  return t.slice(0, at).replace(/[\s,;:.!?—–-]+$/, '');
}

/** The words of a message's content parts (their `transcript`, else their `text`). */
function partsText(parts: unknown[]): string {
  return parts
    .map((p) => (!isObject(p) ? '' : typeof p.transcript === 'string' ? p.transcript : typeof p.text === 'string' ? p.text : ''))
    .join('');
}

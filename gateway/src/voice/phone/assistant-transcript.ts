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
 */
import type { RealtimeResponse } from 'openai/resources/realtime/realtime';
import type { RealtimeServerMessage } from './realtime-link';
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

  constructor(
    private readonly voiced: (responseId: string) => boolean,
    private readonly say: (text: string) => void,
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
    if (counts && typeof e.transcript === 'string' && e.transcript) this.say(e.transcript);
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

  private settleWith(item: string, response: string, text: string): void {
    this.settle(item);
    if (text.trim() && this.voiced(response)) this.say(text.trim());
  }

  private settle(item: string): void {
    this.open.delete(item);
    this.settled.add(item);
  }
}

/** The words of a message's content parts (their `transcript`, else their `text`). */
function partsText(parts: unknown[]): string {
  return parts
    .map((p) => (!isObject(p) ? '' : typeof p.transcript === 'string' ? p.transcript : typeof p.text === 'string' ? p.text : ''))
    .join('');
}

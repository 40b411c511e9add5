/**
 * What the caller said, turn by turn, for the call's transcript and the conversation a new session
 * is given after a reconnect. A turn's words come in
 * `conversation.item.input_audio_transcription.completed`, which the Realtime API sends when the
 * transcription is done: often after the model began answering the turn (it answers from the
 * audio), sometimes never (`...transcription.failed`, or the session lost first). A turn left out,
 * or put after its answer, would show the assistant answering nothing, and a new session would
 * see its own answer without the question. So each turn takes its place when its audio is
 * committed (`input_audio_buffer.committed`, before any answer to it), as not transcribed, and:
 *
 *   completed, words     the words, in that place
 *   completed, no words  nothing was said: the place is given up
 *   completed again      (the server repeats the event) nothing: the turn's words were taken once
 *   failed               stays not transcribed; logged with the error's type and code, never its
 *                        message (it may quote what was heard)
 *   never (the session lost, the call over)
 *                        stays not transcribed (logged)
 *
 * A turn not transcribed never answers the consent line and is never given to the guard's
 * confidence rules: its words are not known, nor how well they were heard.
 */
import type { SaidLine } from './realtime-session';

/** A caller turn whose words are not known; the instructions tell the model what it means. */
export const NOT_TRANSCRIBED = '(the caller spoke; not transcribed)';

export class CallerTranscript {
  /** Turns committed whose transcription has not come, by item id. */
  private readonly waiting = new Map<string, SaidLine>();
  /** Turns whose transcription came (by item id): one the server reports again is not a turn again. */
  private readonly transcribed = new Set<string>();

  constructor(
    private readonly lines: { add: (line: SaidLine) => void; remove: (line: SaidLine) => void },
    private readonly log: (m: string) => void,
  ) {}

  /** `input_audio_buffer.committed`: the turn takes its place. */
  committed(item: string): void {
    if (this.waiting.has(item)) return;
    const line: SaidLine = { speaker: 'user', text: NOT_TRANSCRIBED };
    this.waiting.set(item, line);
    this.lines.add(line);
  }

  /**
   * `...transcription.completed` (text trimmed): the turn's words, in its place (at the end if it
   * has none). False when this item's words were already taken (nothing is done with them again).
   */
  words(item: unknown, text: string, confidence: number | null): boolean {
    if (typeof item === 'string' && item !== '') {
      if (this.transcribed.has(item)) return false;
      this.transcribed.add(item);
    }
    this.place(String(item), text, confidence);
    return true;
  }

  private place(item: string, text: string, confidence: number | null): void {
    const line = this.waiting.get(item);
    this.waiting.delete(item);
    if (!text) return void (line && this.lines.remove(line));
    if (!line) return this.lines.add({ speaker: 'user', text, confidence });
    line.text = text;
    line.confidence = confidence;
  }

  /** `...transcription.failed`: the turn stays in its place, not transcribed. */
  failed(item: string, error: unknown): void {
    const line = this.waiting.get(item);
    this.waiting.delete(item);
    if (!line) this.lines.add({ speaker: 'user', text: NOT_TRANSCRIBED });
    const { type, code } = (error ?? {}) as { type?: unknown; code?: unknown };
    const why = [type, code].filter((v): v is string => typeof v === 'string' && v !== '').map((v) => v.slice(0, 60));
    this.log(`a caller turn could not be transcribed (${why.join(': ') || 'no code'}); kept as "${NOT_TRANSCRIBED}"`);
  }

  /** The session is gone (or the call over): the transcriptions still awaited never come. */
  flush(why: string): void {
    if (!this.waiting.size) return;
    this.log(`${this.waiting.size} caller turn(s) never transcribed (${why}); kept as "${NOT_TRANSCRIBED}"`);
    this.waiting.clear();
  }
}

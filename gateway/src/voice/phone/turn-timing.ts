/**
 * Time to first audio, as the caller lives it: from the end of the caller's speech (the model's
 * `speech_stopped`, whose `audio_end_ms` is on the session's audio clock) to the first audio delta
 * of the answer, whichever response carries it (an answer that first calls a function is late by
 * the function's time too, and the caller waits for all of it). Caller audio arrives in real time,
 * so a position `audio_end_ms` behind the audio sent so far happened that many ms ago. Also the
 * start of each response, for the meter's latency.
 */
export class TurnTiming {
  private speechEndAt: number | null = null;
  private readonly started = new Map<string, number>();

  constructor(private readonly now: () => number = () => performance.now()) {}

  /** The caller started speaking: the previous end was not the end of the turn. */
  speechStarted(): void {
    this.speechEndAt = null;
  }

  /**
   * A position that is not one (not a number, infinite, before the session's audio began) is taken
   * as now: counted from it, the delay would be longer than the call (a latency breach the guard
   * escalates, a TTFB in the record and the meter no caller lived).
   */
  speechStopped(audioEndMs: unknown, appendedMs: number): void {
    const end = typeof audioEndMs === 'number' && Number.isFinite(audioEndMs) && audioEndMs >= 0 ? audioEndMs : appendedMs;
    this.speechEndAt = this.now() - Math.max(0, appendedMs - end);
  }

  /** The first audio of an answer went to the caller: the TTFB in ms, once per caller turn. */
  firstAudio(): number | null {
    if (this.speechEndAt === null) return null;
    const ttfb = Math.round(this.now() - this.speechEndAt);
    this.speechEndAt = null;
    return ttfb;
  }

  /** A response began: it is timed from the caller's speech end if it answers it, else from now. */
  responseCreated(id: string): void {
    this.started.set(id, this.speechEndAt ?? this.now());
  }

  /** A response is done: its latency in ms. */
  responseDone(id: string): number {
    const at = this.started.get(id);
    this.started.delete(id);
    return at === undefined ? 0 : this.now() - at;
  }

  /** A new realtime session (reconnect): responses of the old one will never finish. */
  reset(): void {
    this.started.clear();
  }
}

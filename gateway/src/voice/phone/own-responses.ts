/**
 * The responses the bridge asks the model for (the consent line, a closing line), told from the
 * turns the model takes by itself: each is created with `metadata: {bridge: <purpose>}`, which the
 * Realtime API echoes in `response.created`. While one is asked for and not yet created, a response
 * the model starts on its own (the caller spoke) is cancelled and muted, and ours is asked again
 * once that one is done, so the caller hears the bridge's line and nothing before it. After two
 * such retries the next response is taken as ours: a server that did not echo metadata could
 * otherwise keep the call asking forever.
 */
export type Purpose = 'consent' | 'closing';

const MAX_AGAIN = 2;

type Send = (event: { type: string } & Record<string, unknown>) => void;

export class OwnResponses {
  private readonly muted = new Set<string>();
  private expecting: { purpose: Purpose; create: { type: string } & Record<string, unknown>; again: boolean; tries: number } | null = null;

  constructor(private readonly send: Send) {}

  /**
   * `busy`: a response is in progress (being cancelled for ours): the API refuses another until
   * that one is done, even cancelled, so ours is asked for then (done).
   */
  ask(purpose: Purpose, response: Record<string, unknown>, busy = false): void {
    const create = { type: 'response.create', response: { ...response, metadata: { bridge: purpose } } };
    this.expecting = { purpose, create, again: busy, tries: 0 };
    if (!busy) this.send(create);
  }

  /** Whether a response for this purpose was asked for and not yet created. */
  expects(purpose: Purpose): boolean {
    return this.expecting?.purpose === purpose;
  }

  /** Ours was asked for and not yet created (not held back until a response in progress is done). */
  get awaited(): boolean {
    return this.expecting !== null && !this.expecting.again;
  }

  /** Ours for this purpose, asked for and not yet created, is no longer wanted (never asked again). */
  forget(purpose: Purpose): void {
    if (this.expecting?.purpose === purpose) this.expecting = null;
  }

  /** A response was created: its purpose when it is ours. */
  created(id: string, metadata: unknown): Purpose | null {
    const purpose = (metadata as { bridge?: Purpose } | null | undefined)?.bridge ?? null;
    const expecting = this.expecting;
    if (!expecting) return purpose;
    if (purpose === expecting.purpose || expecting.tries >= MAX_AGAIN) {
      this.expecting = null;
      return expecting.purpose;
    }
    this.muted.add(id);
    expecting.again = true;
    expecting.tries++;
    // By its id: ours may already be under way (asked for as this one was created), and a bare
    // cancel stops whichever response is in progress.
    this.send({ type: 'response.cancel', response_id: id });
    return purpose;
  }

  /** A response is done: ours again if a model turn got in its way. */
  done(): void {
    if (!this.expecting?.again) return;
    this.expecting.again = false;
    this.send(this.expecting.create);
  }

  /** Its audio never reaches the caller (cut by the caller, or by the bridge). */
  mute(id: string | null): void {
    if (id) this.muted.add(id);
  }

  isMuted(id: string): boolean {
    return this.muted.has(id);
  }
}

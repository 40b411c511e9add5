/**
 * The responses the bridge asks the model for (the consent line, a closing line), told from the
 * turns the model takes by itself: each is created with `metadata: {bridge: <purpose>}`, which the
 * Realtime API echoes in `response.created`. While one is asked for and not yet created, a response
 * the model starts on its own (the caller spoke) is cancelled and muted, and ours is asked again
 * once that one is done, so the caller hears the bridge's line and nothing before it.
 */
export type Purpose = 'consent' | 'closing';

type Send = (event: { type: string } & Record<string, unknown>) => void;

export class OwnResponses {
  private readonly muted = new Set<string>();
  private expecting: { purpose: Purpose; create: { type: string } & Record<string, unknown>; again: boolean } | null = null;

  constructor(private readonly send: Send) {}

  ask(purpose: Purpose, response: Record<string, unknown>): void {
    const create = { type: 'response.create', response: { ...response, metadata: { bridge: purpose } } };
    this.expecting = { purpose, create, again: false };
    this.send(create);
  }

  /** A response was created: its purpose when it is ours. */
  created(id: string, metadata: unknown): Purpose | null {
    const purpose = (metadata as { bridge?: Purpose } | null | undefined)?.bridge ?? null;
    if (purpose && purpose === this.expecting?.purpose) this.expecting = null;
    else if (this.expecting) {
      this.muted.add(id);
      this.expecting.again = true;
      this.send({ type: 'response.cancel' });
    }
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

/**
 * The log of refused Twilio requests. The webhooks and the media stream's door are public (Twilio
 * must reach them), so anyone can send requests that are refused; a line for each let a scanner
 * or a flood write the log full and bury the one line that matters (a wrong PUBLIC_URL). Each
 * kind of refusal (where, and why) is logged the first time, then at most once per `everyMs` with
 * the count of those refused like it and not logged.
 */
export class RefusalLog {
  /** By kind: a fixed path and reason (never the caller's text), so a handful at most. */
  private readonly kinds = new Map<string, { at: number; unlogged: number }>();

  constructor(
    private readonly warn: (message: string) => void,
    private readonly now: () => number = Date.now,
    private readonly everyMs = 60_000,
  ) {}

  refused(kind: string, line: string): void {
    const now = this.now();
    const seen = this.kinds.get(kind);
    if (seen && now - seen.at < this.everyMs) {
      seen.unlogged++;
      return;
    }
    this.kinds.set(kind, { at: now, unlogged: 0 });
    const more = seen?.unlogged ? `; ${seen.unlogged} more refused alike since the last line` : '; more alike are logged once a minute';
    this.warn(`${line}${more}`);
  }
}

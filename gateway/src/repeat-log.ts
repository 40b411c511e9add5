/**
 * Warnings that one cause repeats request after request: a public path knocked on without the
 * right signature, a store that is away while every request (or poll) needs it. A line each let a
 * flood or an outage write the log full and bury the line that matters. Each kind (a fixed cause,
 * never the caller's text, so a handful at most) is said the first time, then at most once per
 * `everyMs`, with the count of those not said in between.
 */
export class RepeatLog {
  private readonly kinds = new Map<string, { at: number; unlogged: number }>();

  constructor(
    private readonly now: () => number = Date.now,
    private readonly everyMs = 60_000,
  ) {}

  /** The end of this occurrence's line when it is to be logged, or null: counted for the next line. */
  due(kind: string): string | null {
    const now = this.now();
    const seen = this.kinds.get(kind);
    if (seen && now - seen.at < this.everyMs) {
      seen.unlogged++;
      return null;
    }
    this.kinds.set(kind, { at: now, unlogged: 0 });
    return seen?.unlogged ? `; ${seen.unlogged} more alike since the last line` : '; more alike are logged once a minute';
  }
}

/**
 * A Map whose entries expire as Redis keys set with EX do: an expired entry reads as absent, and
 * expired entries are swept out once a minute, whether the map is used or not. The in-process
 * twins of the voice stores keep to the Redis stores' lifetimes with it, so a long-running gateway
 * without Redis stays small, and a caller's details are not held past their lifetime on a quiet one.
 * Timed on the monotonic clock: a wall clock set forward would free a function call still running
 * (run twice), and set back would keep entries for the time it went back.
 */
const SWEEP_MS = 60_000;

export class ExpiringMap<V> {
  private readonly entries = new Map<string, { value: V; until: number }>();

  constructor(
    private readonly now: () => number = () => performance.now(),
    sweepMs = SWEEP_MS,
  ) {
    setInterval(() => this.sweep(), sweepMs).unref();
  }

  get(key: string): V | undefined {
    const e = this.entries.get(key);
    if (!e) return undefined;
    if (e.until > this.now()) return e.value;
    this.entries.delete(key);
    return undefined;
  }

  set(key: string, value: V, ttlS: number): void {
    this.entries.set(key, { value, until: this.now() + ttlS * 1000 });
  }

  delete(key: string): void {
    this.entries.delete(key);
  }

  /** How many entries are held, expired ones not yet swept included. */
  get size(): number {
    return this.entries.size;
  }

  private sweep(): void {
    const at = this.now();
    for (const [k, e] of this.entries) if (e.until <= at) this.entries.delete(k);
  }
}

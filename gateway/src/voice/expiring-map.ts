/**
 * A Map whose entries expire as Redis keys set with EX do: an expired entry reads as absent, and
 * expired entries are swept out at most once a minute. The in-process twins of the voice stores
 * keep to the Redis stores' lifetimes with it, so a long-running gateway without Redis stays small.
 * Timed on the monotonic clock: a wall clock set forward would free a function call still running
 * (run twice), and set back would keep entries for the time it went back.
 */
const now = () => performance.now();

export class ExpiringMap<V> {
  private readonly entries = new Map<string, { value: V; until: number }>();
  private sweptAt = now();

  get(key: string): V | undefined {
    const e = this.entries.get(key);
    if (!e) return undefined;
    if (e.until > now()) return e.value;
    this.entries.delete(key);
    return undefined;
  }

  set(key: string, value: V, ttlS: number): void {
    this.sweep();
    this.entries.set(key, { value, until: now() + ttlS * 1000 });
  }

  delete(key: string): void {
    this.entries.delete(key);
  }

  private sweep(): void {
    const at = now();
    if (at - this.sweptAt < 60_000) return;
    this.sweptAt = at;
    for (const [k, e] of this.entries) if (e.until <= at) this.entries.delete(k);
  }
}

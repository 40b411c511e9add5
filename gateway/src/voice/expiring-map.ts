/**
 * A Map whose entries expire as Redis keys set with EX do: an expired entry reads as absent, and
 * expired entries are swept out at most once a minute. The in-process twins of the voice stores
 * keep to the Redis stores' lifetimes with it, so a long-running gateway without Redis stays small.
 */
export class ExpiringMap<V> {
  private readonly entries = new Map<string, { value: V; until: number }>();
  private sweptAt = Date.now();

  get(key: string): V | undefined {
    const e = this.entries.get(key);
    if (!e) return undefined;
    if (e.until > Date.now()) return e.value;
    this.entries.delete(key);
    return undefined;
  }

  set(key: string, value: V, ttlS: number): void {
    this.sweep();
    this.entries.set(key, { value, until: Date.now() + ttlS * 1000 });
  }

  delete(key: string): void {
    this.entries.delete(key);
  }

  private sweep(): void {
    const now = Date.now();
    if (now - this.sweptAt < 60_000) return;
    this.sweptAt = now;
    for (const [k, e] of this.entries) if (e.until <= now) this.entries.delete(k);
  }
}

/**
 * This instance's calls in flight, counted against the spend caps before their cost is known (only
 * an answer says it): each holds an estimate until its request ends, however it ends. Without it,
 * requests that arrive together below a cap all route. Holding is an addition, no allocation, so
 * it is done far from a cap too: a burst that starts far from a cap is counted once it nears it.
 */
export class HeldSpend {
  private usd = 0;
  private calls = 0;

  /** USD held by the calls in flight. */
  get total(): number {
    return this.usd;
  }

  /** Holds `usd` for one call; returns it, to be released once. */
  hold(usd: number): number {
    if (usd > 0) {
      this.usd += usd;
      this.calls++;
    }
    return usd;
  }

  release(usd: number): void {
    if (!(usd > 0)) return;
    // None left in flight: back to exactly 0 (sums of floats leave crumbs).
    this.usd = --this.calls === 0 ? 0 : this.usd - usd;
  }
}

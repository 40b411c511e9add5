/**
 * Route health record: latency p50/p95 and error rate (from opossum's rolling window,
 * the last minute), and the passive health score: the last 20 calls, 1 success / 0 failure.
 */
import type { Breaker } from './breaker';

export class RouteHealth {
  private readonly last: number[] = [];
  record(success: boolean): void {
    this.last.push(success ? 1 : 0);
    if (this.last.length > 20) this.last.shift();
  }
  lastTwenty(): number[] {
    return this.last.slice();
  }
  snapshot(breaker: Breaker) {
    const stats = breaker.circuit.stats;
    const calls = stats.successes + stats.failures;
    const pct = (p: number) => (stats.percentiles[p] >= 0 ? stats.percentiles[p] : null);
    return {
      latency_p50_ms: calls ? pct(0.5) : null,
      latency_p95_ms: calls ? pct(0.95) : null,
      error_rate: calls ? stats.failures / calls : 0,
      calls_last_minute: calls,
      health_score: this.last.length ? this.last.reduce((a, b) => a + b, 0) / this.last.length : null,
      last_20: this.lastTwenty(),
    };
  }
}

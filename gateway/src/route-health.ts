/**
 * Route health record: latency p50/p95 and error rate (from opossum's rolling window,
 * the last minute), and the passive health score: the last 20 calls, 1 success / 0 failure.
 */
import type { Breaker } from './breaker';

/** Answers whose time is kept: the route's usual time is the slowest of them. */
const ANSWERS_KEPT = 20;

export class RouteHealth {
  private readonly last: number[] = [];
  private readonly answers = new Float64Array(ANSWERS_KEPT);
  private answered = 0;
  record(success: boolean): void {
    this.last.push(success ? 1 : 0);
    if (this.last.length > 20) this.last.shift();
  }
  /** How long an answer took (ms): a whole answer, or a stream's first event. */
  answeredIn(ms: number): void {
    this.answers[this.answered++ % ANSWERS_KEPT] = ms;
  }
  /**
   * The slowest of the route's last 20 answers (ms), or null before any: the time an attempt must
   * have had for its timeout to say something about the route. Only answers count, so timeouts
   * (a caller's short deadlines, or a provider that hangs) do not move it.
   */
  usualMs(): number | null {
    const n = Math.min(this.answered, ANSWERS_KEPT);
    if (n === 0) return null;
    let slowest = 0;
    for (let i = 0; i < n; i++) if (this.answers[i] > slowest) slowest = this.answers[i];
    return slowest;
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

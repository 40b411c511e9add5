/**
 * The one backoff rule for work retried away from a caller's request (notifications, the voice
 * workflow and call summaries, the meter spool, the in-process Cold queue): the wait before retry
 * n (1-based) is firstMs × factor^(n−1), at most maxMs. `retrying` runs an operation under it with
 * p-retry; `backoffMs` gives the same wait to work that a timer or a queue picks up again later
 * rather than a loop. The failover loop keeps its own policy (retry.ts): it fits its retries into
 * the request's time-to-answer.
 */
import pRetry from 'p-retry';

export interface Backoff {
  firstMs: number;
  /** Growth per retry; default 2. */
  factor?: number;
  maxMs?: number;
}

export interface RetryPolicy extends Backoff {
  /** Attempts in all, the first one included. */
  attempts: number;
}

/** The wait before retry `retry` (1-based); the same figure p-retry uses for `retrying`. */
export function backoffMs(retry: number, b: Backoff): number {
  return Math.min(b.maxMs ?? Infinity, Math.round(b.firstMs * (b.factor ?? 2) ** (retry - 1)));
}

/**
 * Runs `op` until it resolves or the policy's attempts are used, and rejects with the last error.
 * An error for which `retryIf` answers false ends it at once. As p-retry does, a TypeError that is
 * not a network failure is a bug and is not retried.
 */
export function retrying<T>(
  op: (attempt: number) => Promise<T>,
  policy: RetryPolicy,
  retryIf: (error: Error) => boolean = () => true,
): Promise<T> {
  return pRetry(op, {
    retries: policy.attempts - 1,
    minTimeout: policy.firstMs,
    factor: policy.factor ?? 2,
    maxTimeout: policy.maxMs ?? Infinity,
    shouldRetry: ({ error }) => retryIf(error),
  });
}

/**
 * Retry policy per route call: 3 attempts, exponential backoff from 200 ms with
 * jitter, capped at 2 s. Jitter is "equal jitter": half the delay fixed, half random, so retries
 * of many clients spread out while each still waits at least half the step.
 */
export const RETRY = { attempts: 3, baseMs: 200, capMs: 2000 } as const;

export function backoffMs(retry: number, random: () => number = Math.random): number {
  const step = Math.min(RETRY.capMs, RETRY.baseMs * 2 ** (retry - 1));
  return step / 2 + random() * (step / 2);
}

/** Retry-After in ms (delta-seconds or an HTTP date); null when absent or unreadable. */
export function retryAfterMs(header: string | string[] | undefined, now = Date.now()): number | null {
  const value = Array.isArray(header) ? header[0] : header;
  if (!value) return null;
  if (/^\d+(\.\d+)?$/.test(value.trim())) return Number(value) * 1000;
  const at = Date.parse(value);
  return Number.isFinite(at) ? Math.max(0, at - now) : null;
}

/**
 * A promise, or a rejection once `ms` have passed: for calls to a store that may not answer (Redis
 * away, its client holding commands until it is back), so that a request keeps its time-to-answer.
 * The call itself is not cancelled; its late result is ignored.
 */
/** The rejection of `within`: no answer in time (the call may still land), as against the store's own error. */
export class NoAnswer extends Error {}

export function within<T>(promise: Promise<T>, ms: number, what = 'the store'): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new NoAnswer(`${what} did not answer within ${Math.round(ms)} ms`)), ms);
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

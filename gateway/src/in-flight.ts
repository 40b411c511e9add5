/**
 * Work under way, counted so that a stop can wait for it: a request's pipeline, which meters its
 * call at its end, after its connection closed (a request cut at shutdown still bills its call).
 */
export interface Work {
  /** Counts `work` as running until it settles; returns it. */
  track<T>(work: Promise<T>): Promise<T>;
  /** Resolves once no tracked work is running, or after `ms`; true when none is. */
  idle(ms: number): Promise<boolean>;
}

export function trackWork(): Work {
  let running = 0;
  const waiting = new Set<() => void>();
  const done = () => {
    if (--running === 0) for (const wake of waiting) wake();
  };
  return {
    track(work) {
      running++;
      work.then(done, done);
      return work;
    },
    async idle(ms) {
      if (running === 0) return true;
      return new Promise<boolean>((resolve) => {
        const wake = () => {
          clearTimeout(timer);
          waiting.delete(wake);
          resolve(true);
        };
        const timer = setTimeout(() => {
          waiting.delete(wake);
          resolve(false);
        }, ms);
        waiting.add(wake);
      });
    },
  };
}

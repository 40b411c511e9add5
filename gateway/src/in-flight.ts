/**
 * Requests under way, counted so that a stop can wait for them: a request's pipeline meters its
 * call at its end, after its connection closed (a request cut at shutdown still bills its call).
 */
export class InFlight {
  private running = 0;
  private readonly waiting = new Set<() => void>();
  private readonly done = () => {
    if (--this.running === 0) for (const wake of this.waiting) wake();
  };

  /** Counts `work` as under way until it settles; returns it. */
  track<T>(work: Promise<T>): Promise<T> {
    this.running++;
    work.then(this.done, this.done);
    return work;
  }

  /** Resolves once nothing is under way, or after `ms`; true when nothing is. */
  idle(ms: number): Promise<boolean> {
    if (this.running === 0) return Promise.resolve(true);
    return new Promise<boolean>((resolve) => {
      const wake = () => {
        clearTimeout(timer);
        this.waiting.delete(wake);
        resolve(true);
      };
      const timer = setTimeout(() => {
        this.waiting.delete(wake);
        resolve(false);
      }, ms);
      this.waiting.add(wake);
    });
  }
}

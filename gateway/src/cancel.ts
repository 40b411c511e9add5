/**
 * Cancelling work: a request's when its client goes away, an attempt's when its time is up or its
 * request is cancelled. Two per request on the hot path, so neither an AbortController (two of
 * them cost about 5 % of the gateway's CPU in `npm run bench:gateway`) nor an EventEmitter (its
 * constructor and `once` wrappers): a flag and a short list of listeners, called once.
 */

/** What a cancellable piece of work listens to. */
export interface CancelSignal {
  readonly aborted: boolean;
  once(event: 'abort', listener: () => void): unknown;
  removeListener(event: 'abort', listener: () => void): unknown;
}

export class Cancel implements CancelSignal {
  aborted = false;
  private listeners: Array<() => void> = [];

  /** As EventEmitter's: a listener added after the abort is never called. */
  once(_event: 'abort', listener: () => void): this {
    if (!this.aborted) this.listeners.push(listener);
    return this;
  }

  /** Removes the listener added last, as EventEmitter's does. */
  removeListener(_event: 'abort', listener: () => void): this {
    const i = this.listeners.lastIndexOf(listener);
    if (i !== -1) this.listeners.splice(i, 1);
    return this;
  }

  abort(): void {
    if (this.aborted) return;
    this.aborted = true;
    const listeners = this.listeners;
    this.listeners = [];
    for (const listener of listeners) listener();
  }
}

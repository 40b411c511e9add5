/**
 * Cancelling work: a request's when its client goes away, an attempt's when its time is up or its
 * request is cancelled. An EventEmitter with `aborted` rather than an AbortController: undici
 * takes either as a request's `signal` (documented), and two AbortControllers per request cost
 * about 5 % of the gateway's CPU in `npm run bench:gateway`.
 */
import { EventEmitter } from 'node:events';

/** What a cancellable piece of work listens to. */
export interface CancelSignal {
  readonly aborted: boolean;
  once(event: 'abort', listener: () => void): unknown;
  removeListener(event: 'abort', listener: () => void): unknown;
}

export class Cancel extends EventEmitter implements CancelSignal {
  aborted = false;
  abort(): void {
    if (this.aborted) return;
    this.aborted = true;
    this.emit('abort');
  }
}

// Waiting on events, never on time: resolves when `pred` holds for a value the emitter reports,
// or fails after a generous limit with what was being waited for.
import type { EventEmitter } from 'node:events';

export function until<T>(
  emitter: EventEmitter,
  event: string,
  pred: (value: T) => boolean = () => true,
  what = event,
  limitMs = 15_000,
): Promise<T> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      emitter.off(event, on);
      reject(new Error(`timed out waiting for ${what}`));
    }, limitMs);
    const on = (value: T) => {
      if (!pred(value)) return;
      clearTimeout(timer);
      emitter.off(event, on);
      resolve(value);
    };
    emitter.on(event, on);
  });
}

// A stream's idle limit (body-queue.ts): a provider silent for the limit is cut, and only then.
import { afterEach, describe, expect, it, vi } from 'vitest';
import { BodyQueue, type Flow } from '../../gateway/src/body-queue';

afterEach(() => {
  vi.useRealTimers();
  vi.restoreAllMocks();
});

/** The connection's controls, recording a cut. */
function flow(): Flow & { cuts: string[] } {
  const cuts: string[] = [];
  return { cuts, pause: () => undefined, resume: () => undefined, abort: (e) => cuts.push(e.message) };
}

describe('the idle limit of a streamed answer', () => {
  // It measured silence on the wall clock: an NTP step forward cut every stream whose check came
  // after the step, however recent its last chunk.
  it('the wall clock stepped forward an hour is no silence: a stream with a chunk just in goes on; one silent for the limit is cut', () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance'] });
    const wall = Date.now.bind(Date);
    let step = 0;
    vi.spyOn(Date, 'now').mockImplementation(() => wall() + step);
    const connection = flow();
    const queue = new BodyQueue(connection, 1000);
    vi.advanceTimersByTime(900);
    queue.push(Buffer.from('data: {}\n\n'));
    step = 3_600_000;
    vi.advanceTimersByTime(100); // the check, 100 ms after that chunk
    expect(connection.cuts).toEqual([]);
    vi.advanceTimersByTime(900); // the limit since that chunk
    expect(connection.cuts).toEqual(['the provider sent nothing for 1000 ms']);
  });
});

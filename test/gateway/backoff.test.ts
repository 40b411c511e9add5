// The shared retry rule: attempts, waits that grow by the factor, and when it stops early.
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, expect, it } from 'vitest';
import { backoffMs, retrying } from '../../gateway/src/backoff';

describe('backoff', () => {
  it('the wait before retry n is firstMs × factor^(n−1), capped', () => {
    expect([1, 2, 3, 4, 5].map((n) => backoffMs(n, { firstMs: 1000 }))).toEqual([1000, 2000, 4000, 8000, 16000]);
    expect([1, 2].map((n) => backoffMs(n, { firstMs: 1000, factor: 5 }))).toEqual([1000, 5000]);
    expect([1, 6, 7, 20].map((n) => backoffMs(n, { firstMs: 1000, maxMs: 60_000 }))).toEqual([1000, 32000, 60000, 60000]);
  });

  it('retrying: tries the policy’s attempts, waiting between them as backoffMs says, and rejects with the last error', async () => {
    const at: number[] = [];
    const run = retrying(
      async (attempt) => {
        at.push(performance.now());
        throw new Error(`failure ${attempt}`);
      },
      { attempts: 3, firstMs: 40, factor: 3 },
    );
    await expect(run).rejects.toThrow('failure 3');
    expect(at).toHaveLength(3);
    // Waits of at least 40 and 120 ms (timers never fire early; a busy machine only adds).
    expect(at[1] - at[0]).toBeGreaterThanOrEqual(39);
    expect(at[2] - at[1]).toBeGreaterThanOrEqual(119);
  });

  it('retrying: resolves with the first success; an error retryIf refuses ends it at once', async () => {
    let calls = 0;
    expect(await retrying(async () => (++calls < 2 ? Promise.reject(new Error('once')) : 'ok'), { attempts: 5, firstMs: 1 })).toBe('ok');
    expect(calls).toBe(2);
    class Refused extends Error {}
    calls = 0;
    const refused = retrying(
      async () => {
        calls++;
        throw new Refused('HTTP 400');
      },
      { attempts: 5, firstMs: 1 },
      (e) => !(e instanceof Refused),
    );
    await expect(refused).rejects.toBeInstanceOf(Refused);
    expect(calls).toBe(1);
  });

  it('retrying: a refused connection (fetch’s network TypeError) is retried', async () => {
    const server = createServer();
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
    await new Promise<void>((r) => server.close(() => r())); // nothing listens there now
    let calls = 0;
    await expect(
      retrying(
        async () => {
          calls++;
          await fetch(url);
        },
        { attempts: 2, firstMs: 1 },
      ),
    ).rejects.toThrow(TypeError);
    expect(calls).toBe(2);
  });
});

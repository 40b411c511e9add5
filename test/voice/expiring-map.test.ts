// The in-process voice stores' map with lifetimes (expiring-map.ts).
import { describe, expect, it } from 'vitest';
import { ExpiringMap } from '../../gateway/src/voice/expiring-map';

describe('ExpiringMap', () => {
  // Expired entries were swept only when a new one was set: on a quiet gateway without Redis, a
  // call's record and its function results (names, phone numbers) stayed in memory past their lifetime.
  it('drops an entry at the end of its lifetime though the map is not used again', async () => {
    const clock = { ms: 0 };
    const map = new ExpiringMap<string>(() => clock.ms, 10);
    map.set('call-1', '+351900000001', 60);
    map.set('call-2', '+351900000002', 600);
    clock.ms += 60_000;
    await expect.poll(() => map.size).toBe(1);
    expect(map.get('call-2')).toBe('+351900000002');
  });
});

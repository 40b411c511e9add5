// A call's end whose change Redis took but whose saved copy it refused (the store's second step):
// the record and what follows it (the meter's calls, the summary, the cost events) still go out
// once. A Redis of the test's own, whose second client may append a change but not write the saved
// call (an ACL without SET), stands for a Redis that fails between the two steps (a failover's
// READONLY, a dropped connection).
import { Redis } from 'ioredis';
import { describe, expect, it, onTestFinished } from 'vitest';
import type { CallRecord } from '../../schema/call-record';
import { RedisVoiceStore } from '../../gateway/src/voice/call-store';
import { VoiceService, callReducer, type CallChange } from '../../gateway/src/voice/calls';
import { OwnRedis } from '../own-redis';
import { hasRedisServer } from '../redis-db';
import { filled } from './filled';

async function client(url: string): Promise<Redis> {
  const c = new Redis(url, { maxRetriesPerRequest: 1 });
  c.on('error', () => undefined);
  onTestFinished(() => c.disconnect());
  return c;
}

describe('the end of a call, once', () => {
  it.skipIf(!hasRedisServer)(
    'an end whose change was kept but whose saved copy Redis refused is answered, and its record sent once',
    async () => {
      const server = await new OwnRedis(['--appendonly', 'no']).start();
      onTestFinished(() => server.end());
      const admin = await client(server.url);
      await admin.call('ACL', 'SETUSER', 'halfway', 'on', '>pw', '~*', '+@all', '-set');
      const halfway = await client(`redis://halfway:pw@127.0.0.1:${server.port}/0`);
      const config = filled();
      const sent: CallRecord[] = [];
      const service = (redis: Redis) =>
        new VoiceService({
          config,
          store: new RedisVoiceStore<CallChange>(redis, 'end-once', callReducer(config)),
          log: { warn: () => undefined, error: () => undefined },
          afterCall: {
            calls: { send: (r) => sent.push(r) },
            events: { send: () => undefined },
            rates: () => ({}),
            voiceProvider: 'openai',
          },
        });
      const [whole, half] = [service(admin), service(halfway)];
      await whole.start({ call_id: 'call-half', from: '+351910000000', country: 'PT', at: new Date(Date.now() - 60_000).toISOString() });
      // The end's change is appended (GET, INCR, RPUSH: allowed); saving the folded call (SET) is refused.
      const first = await half.end('call-half', { outcome: 'booking' }).catch((e: Error) => ({ status: 500, body: e.message }));
      const again = await whole.end('call-half', { outcome: 'booking' });
      expect(again.status).toBe(200);
      expect(first).toMatchObject({ status: 200, body: again.body });
      expect(sent.map((r) => [r.call_id, r.outcome])).toEqual([['call-half', 'booking']]);
    },
  );
});

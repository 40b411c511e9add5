// Shared state in `npm run bench:gateway`: the gateway as one of a fleet (QUEUE_STORE_URL: flags,
// limits, caps, breakers, idempotent replay and meter events through Redis) against the same gateway
// alone (every part in process), both metering to the web-app sink with a meter stub on loopback
// (interleaved runs, gateway-ab.ts). Goal: the hot path with shared state within 5 % of it alone.
// The Redis is the machine's (127.0.0.1:6379, database 9), under a key prefix of the bench's own,
// removed afterwards.
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Redis } from 'ioredis';
import { interleaved, startStub } from './gateway-ab';
import { scratchDir } from './scratch';

const REDIS_URL = 'redis://127.0.0.1:6379/9';

async function meterStub(): Promise<{ url: string; close: () => void }> {
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true,"appended":0}'));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/exec`, close: () => server.close() };
}

export async function fleetVersusAlone(rounds = 6, seconds = 4): Promise<string[]> {
  const stub = await startStub();
  const meter = await meterStub();
  const prefix = `bench-fleet-${process.pid}`;
  const meterEnv = (): Record<string, string> => ({
    METER_URL: meter.url,
    METER_TOKEN: 'bench',
    METER_SPOOL_DIR: scratchDir('bench-spool-'),
  });
  try {
    return await interleaved(stub.url, {
      base: { name: 'alone', env: meterEnv },
      variant: { name: 'fleet', env: () => ({ ...meterEnv(), QUEUE_STORE_URL: REDIS_URL, REDIS_PREFIX: prefix }) },
      goal: 0.95,
      rounds,
      seconds,
    });
  } finally {
    stub.stop();
    meter.close();
    const redis = new Redis(REDIS_URL);
    const keys = await redis.keys(`${prefix}:*`);
    if (keys.length) await redis.del(...keys);
    redis.disconnect();
  }
}

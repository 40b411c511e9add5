// Durable meter events in `npm run bench:gateway`: what it costs to hold each answer until its meter
// event is on disk (appended to the CSV or the spool; fdatasync once a second) against releasing the
// answer at once and writing the event afterwards, as the gateway did before (interleaved runs,
// gateway-ab.ts). Goal: under 5 %. Measured for both sinks: the local CSV and the web-app spool
// (delivered to a meter stub on loopback that takes every batch).
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Stack } from '../../gateway/src/stack';
import { interleaved, startStub } from './gateway-ab';
import { scratchDir } from './scratch';

/** The variant "not durable": the event is written as before, but the answer does not wait for it. */
function releaseAtOnce(stack: Stack): void {
  const send = stack.meter.send.bind(stack.meter);
  stack.meter.send = (event) => {
    send(event).catch(() => undefined);
    return Promise.resolve();
  };
}

async function meterStub(): Promise<{ url: string; close: () => void }> {
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true,"appended":0}'));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/exec`, close: () => server.close() };
}

export async function durableVersusNot(rounds = 6, seconds = 4): Promise<string[]> {
  const stub = await startStub();
  const meter = await meterStub();
  const lines: string[] = [];
  try {
    for (const sink of ['csv', 'web-app'] as const) {
      const env = (): Record<string, string> =>
        sink === 'csv' ? {} : { METER_URL: meter.url, METER_TOKEN: 'bench', METER_SPOOL_DIR: scratchDir('bench-spool-') };
      lines.push(`${sink === 'csv' ? 'local CSV' : 'web-app spool'}:`);
      const result = await interleaved(stub.url, {
        base: { name: 'at once', env, adjust: releaseAtOnce },
        variant: { name: 'durable', env },
        goal: 0.95,
        rounds,
        seconds,
      });
      lines.push(...result.map((l) => `  ${l}`));
    }
  } finally {
    stub.stop();
    meter.close();
  }
  return lines;
}

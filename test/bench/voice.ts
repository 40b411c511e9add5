// npm run bench:voice — events per second through the pure spend guard, and through the events
// endpoint in batches of 50 frames (the built gateway, Redis when QUEUE_STORE_URL is set), then
// the phone bridge under N concurrent calls (voice-bridge.ts; BENCH_CALLS, BENCH_BRIDGE_SECONDS).
// Goals: ≥ 1 million events/s in process; ≥ 20,000 events/s over HTTP on one core.
import autocannon from 'autocannon';
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { applyEvent, guardConfig, newCall, type VoiceEvent } from '../../gateway/src/voice/spend-guard';
import { filled } from '../voice/filled';
import { benchBridge } from './voice-bridge';
import { benchCount, benchUsage } from './usage';
import { scratchDir } from './scratch';

benchUsage(`usage: npm run bench:voice
Events per second through the spend guard, in process and through the built gateway's events
endpoint, then the phone bridge under concurrent calls.
  BENCH_SECONDS          seconds of the HTTP run (6)
  BENCH_CALLS            concurrent calls through the bridge (100)
  BENCH_BRIDGE_SECONDS   seconds of the bridge run (10)
  QUEUE_STORE_URL        Redis for the gateway (none: in process)
`);
const SECONDS = benchCount('BENCH_SECONDS', 6);

const config = filled();
const cfg = guardConfig(config);
const events: VoiceEvent[] = [
  { type: 'user.audio_frame', ms: 20 },
  { type: 'assistant.audio_frame', ms: 20 },
  { type: 'assistant.response.start', ttfb_ms: 900 },
  { type: 'user.audio_frame', ms: 20 },
];
const N = 5_000_000;
let state = newCall();
const t0 = performance.now();
for (let i = 0; i < N; i++) {
  applyEvent(state, events[i & 3], cfg);
  if ((i & 1023) === 1023) state = newCall(); // keep numbers small, like real calls
}
const inProcess = N / ((performance.now() - t0) / 1000);
console.log(
  `in process: ${N.toLocaleString()} events in ${(performance.now() - t0).toFixed(0)} ms = ${Math.round(inProcess).toLocaleString()} events/s`,
);

const dir = scratchDir('bench-voice-');
writeFileSync(join(dir, 'concierge.json'), JSON.stringify(config));
const child = spawn(process.execPath, ['gateway/dist/main.js'], {
  env: {
    PATH: process.env.PATH!,
    PORT: '18191',
    LOG_LEVEL: 'info',
    VOICE_TOKEN: 'bench',
    CONCIERGE_FILE: join(dir, 'concierge.json'),
    METER_CSV_FILE: join(dir, 'e.csv'),
    CALLS_CSV_FILE: join(dir, 'calls.csv'),
    WORKER: 'off',
    ...(process.env.QUEUE_STORE_URL ? { QUEUE_STORE_URL: process.env.QUEUE_STORE_URL, REDIS_PREFIX: `bench-voice-${process.pid}` } : {}),
  },
  stdio: ['ignore', 'pipe', 'inherit'],
});
await new Promise<void>((resolve) => child.stdout!.on('data', (d) => String(d).includes('listening') && resolve()));
const headers = { 'content-type': 'application/json', authorization: 'Bearer bench' };
const calls = 64;
for (let i = 0; i < calls; i++) {
  await fetch('http://127.0.0.1:18191/v1/voice/calls', {
    method: 'POST',
    headers,
    body: JSON.stringify({ call_id: `bench-${i}`, from: '+351900000000', at: '2026-11-23T10:00:00Z' }),
  });
}
const batch = JSON.stringify(
  Array.from({ length: 50 }, (_, i) => ({ type: i % 2 ? 'assistant.audio_frame' : 'user.audio_frame', ms: 20 })),
);
let n = 0;
const result = await autocannon({
  url: 'http://127.0.0.1:18191',
  connections: 16,
  duration: SECONDS,
  requests: [
    { method: 'POST', setupRequest: (req) => ({ ...req, path: `/v1/voice/calls/bench-${n++ % calls}/events`, headers, body: batch }) },
  ],
});
child.kill('SIGTERM');
if (process.env.QUEUE_STORE_URL) {
  const { Redis } = await import('ioredis');
  const redis = new Redis(process.env.QUEUE_STORE_URL);
  const keys = await redis.keys(`bench-voice-${process.pid}:*`);
  if (keys.length) await redis.del(...keys);
  redis.disconnect();
}
const overHttp = result.requests.average * 50;
console.log(
  `over HTTP (${process.env.QUEUE_STORE_URL ? 'Redis' : 'in-process store'}, batches of 50, 16 connections, 64 calls): ${Math.round(result.requests.average)} req/s = ${Math.round(overHttp).toLocaleString()} events/s; p50 ${result.latency.p50} ms; non-2xx ${result.non2xx}`,
);
console.log(
  `goals: in process ≥ 1,000,000 events/s: ${inProcess >= 1e6 ? 'met' : 'NOT met'}; over HTTP ≥ 20,000 events/s: ${overHttp >= 20_000 ? 'met' : 'NOT met'}`,
);

// The phone bridge: concurrent calls through the gateway beside a bare relay (voice-bridge.ts).
await benchBridge();

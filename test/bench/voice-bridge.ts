// The phone bridge under load (part of npm run bench:voice): N concurrent simulated calls, each a
// Twilio media stream sending a 20 ms µ-law frame every 20 ms and a realtime session sending a
// 20 ms delta every 20 ms, through the built gateway (signed webhook, signed handshake, ticket,
// guard, marks: the real path) and, in the same run, through a bare WebSocket relay with no logic
// (reference-relay.mjs). Per frame: the time from the sender to the receiver, both in this process
// (one clock). The peers' own event-loop delay and the machine's load are printed beside the
// figures: on a shared machine a busy neighbour shows up in every column, the reference's too.
// BENCH_PIN=1 pins the system under test to core 0 and the peers to core 1 (taskset).
// Goals (issue 19): the delay the bridge adds, p99 ≤ 5 ms at 100 concurrent calls; 100 calls on
// one core without a dropped frame; CPU per call-second and memory per call stated.
import { execSync, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { join } from 'node:path';
import { getExpectedTwilioSignature } from 'twilio/lib/webhooks/webhooks.js';
import WebSocket from 'ws';
import { filled } from '../voice/filled';
import { BenchCall, BenchRealtime, Direction } from './voice-bridge-peers';

const CALLS = Number(process.env.BENCH_CALLS ?? 100);
const SECONDS = Number(process.env.BENCH_BRIDGE_SECONDS ?? 10);
const WARMUP_S = 2;
const TOKEN = 'bench-auth-token';
const PUBLIC_URL = 'https://bench.example.test';
const KEY = 'bench-openai-key';
const pin = process.env.BENCH_PIN === '1' && existsSync('/usr/bin/taskset') && Number(execSync('nproc').toString()) >= 2;

interface Run {
  name: string;
  inbound: Direction;
  outbound: Direction;
  cpuMsPerCallSecond: number;
  /** The peers' (this process's) event-loop delay p99 during the window, ms. */
  peersLagMs: number;
  cpuShare: number;
  mbPerCall: number;
}

function spawnPinned(args: string[], env: Record<string, string>): Promise<{ child: ChildProcess; port: number }> {
  const node = [process.execPath, ...(process.env.BENCH_PROF ? ['--cpu-prof', `--cpu-prof-dir=${process.env.BENCH_PROF}`] : []), ...args];
  const [cmd, argv] = pin ? ['/usr/bin/taskset', ['-c', '0', ...node]] : [node[0], node.slice(1)];
  const child = spawn(cmd, argv, { env: { PATH: process.env.PATH!, ...env }, stdio: ['ignore', 'pipe', 'inherit'] });
  return new Promise((resolve, reject) => {
    let out = '';
    child.stdout!.on('data', (d) => {
      out += d;
      const m = /listening (?:on :)?(\d+)/.exec(out);
      if (m) resolve({ child, port: Number(m[1]) });
    });
    child.on('exit', (code) => reject(new Error(`exited ${code}: ${out}`)));
  });
}

/** CPU ms (user + system) and resident MB of a process, from /proc. */
function usage(pid: number): { cpuMs: number; rssMb: number } {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  const ticks = Number(stat[11]) + Number(stat[12]);
  const rss = Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]);
  return { cpuMs: (ticks * 1000) / 100, rssMb: rss / 1024 };
}

const pct = (xs: number[], p: number) => xs[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))];
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function openCalls(port: number, signed: boolean, inbound: Direction, outbound: Direction): Promise<BenchCall[]> {
  const calls: BenchCall[] = [];
  for (let i = 0; i < CALLS; i++) {
    const callSid = `CA${String(i).padStart(32, '0')}`;
    let parameters: Record<string, string> = {};
    if (signed) {
      const form = { CallSid: callSid, From: '+351910000000', To: '+351210000000', CallStatus: 'ringing' };
      const twiml = await (
        await fetch(`http://127.0.0.1:${port}/twilio/voice`, {
          method: 'POST',
          headers: {
            'content-type': 'application/x-www-form-urlencoded',
            'x-twilio-signature': getExpectedTwilioSignature(TOKEN, `${PUBLIC_URL}/twilio/voice`, form),
          },
          body: new URLSearchParams(form).toString(),
        })
      ).text();
      parameters = Object.fromEntries([...twiml.matchAll(/<Parameter name="([^"]+)" value="([^"]*)"\/>/g)].map((m) => [m[1], m[2]]));
      if (!parameters.ticket) throw new Error(`call ${i} not answered with a stream: ${twiml}`);
    }
    const ws = new WebSocket(`ws://127.0.0.1:${port}/twilio/media`, {
      perMessageDeflate: false,
      headers: { 'x-twilio-signature': getExpectedTwilioSignature(TOKEN, 'wss://bench.example.test/twilio/media', {}) },
    });
    await new Promise((r, j) => (ws.once('open', r), ws.once('error', j)));
    calls.push(new BenchCall(ws, i, callSid, inbound, outbound, parameters));
  }
  return calls;
}

async function run(
  name: string,
  child: ChildProcess,
  port: number,
  signed: boolean,
  rt: BenchRealtime,
  d: [Direction, Direction],
): Promise<Run> {
  const [inbound, outbound] = d;
  const idle = usage(child.pid!);
  const calls = await openCalls(port, signed, inbound, outbound);
  calls.forEach((c) => c.run(CALLS));
  await sleep(WARMUP_S * 1000);
  inbound.recording = outbound.recording = true;
  const lag = monitorEventLoopDelay({ resolution: 5 });
  lag.enable();
  const a = usage(child.pid!);
  await sleep(SECONDS * 1000);
  const b = usage(child.pid!);
  lag.disable();
  inbound.recording = outbound.recording = false;
  calls.forEach((c) => c.stopSending());
  rt.stopSending();
  // Let frames in flight land, then count what never arrived.
  for (let i = 0; i < 40 && (inbound.received < inbound.sent || outbound.received < outbound.sent); i++) await sleep(50);
  calls.forEach((c) => c.hangUp());
  await sleep(300);
  const cpuMs = b.cpuMs - a.cpuMs;
  return {
    name,
    inbound,
    outbound,
    cpuMsPerCallSecond: cpuMs / (CALLS * SECONDS),
    peersLagMs: lag.percentile(99) / 1e6,
    cpuShare: cpuMs / (SECONDS * 1000),
    mbPerCall: (b.rssMb - idle.rssMb) / CALLS,
  };
}

function row(r: Run): string {
  const f = (x: number) => x.toFixed(2).padStart(6);
  const [i, o] = [r.inbound.samples.sort((x, y) => x - y), r.outbound.samples.sort((x, y) => x - y)];
  const dropped = r.inbound.sent - r.inbound.received + (r.outbound.sent - r.outbound.received);
  return `${r.name.padEnd(26)} ${f(pct(i, 50))} / ${f(pct(i, 99))} ms   ${f(pct(o, 50))} / ${f(pct(o, 99))} ms   ${String(dropped).padStart(7)}   ${r.cpuMsPerCallSecond.toFixed(3).padStart(8)} ms   ${(r.cpuShare * 100).toFixed(0).padStart(4)} %   ${r.mbPerCall.toFixed(2).padStart(6)} MB   ${r.peersLagMs.toFixed(1).padStart(5)} ms`;
}

export async function benchBridge(): Promise<void> {
  if (pin) execSync(`/usr/bin/taskset -p -c 1 ${process.pid}`, { stdio: 'ignore' });
  const results: Run[] = [];
  for (const kind of ['relay', 'bridge'] as const) {
    const d: [Direction, Direction] = [new Direction(CALLS), new Direction(CALLS)];
    const rt = new BenchRealtime(d[0], d[1], CALLS);
    await rt.start();
    const dir = mkdtempSync(join(tmpdir(), 'bench-bridge-'));
    const config = filled();
    config.meta.business_hours_local = 'Mon-Sun 00:00-24:00';
    config.spend_guard.per_call_usd_cap = 1000;
    writeFileSync(join(dir, 'concierge.json'), JSON.stringify(config));
    const { child, port } =
      kind === 'relay'
        ? await spawnPinned(['test/bench/reference-relay.mjs'], { UPSTREAM: `${rt.url}?model=x`, OPENAI_API_KEY: KEY })
        : await spawnPinned(['gateway/dist/main.js'], {
            PORT: '0',
            LOG_LEVEL: 'info',
            WORKER: 'off',
            VOICE_TOKEN: 'bench',
            CONCIERGE_FILE: join(dir, 'concierge.json'),
            METER_CSV_FILE: join(dir, 'events.csv'),
            CALLS_CSV_FILE: join(dir, 'calls.csv'),
            SCOPES_FILE: join(dir, 'none.yaml'),
            PUBLIC_URL,
            OPENAI_API_KEY: KEY,
            OPENAI_REALTIME_URL: rt.url,
            TWILIO_ACCOUNT_SID: 'ACbench',
            TWILIO_AUTH_TOKEN: TOKEN,
            TWILIO_API_URL: 'http://127.0.0.1:9',
            ...(process.env.QUEUE_STORE_URL
              ? { QUEUE_STORE_URL: process.env.QUEUE_STORE_URL, REDIS_PREFIX: `bench-bridge-${process.pid}` }
              : {}),
          });
    results.push(await run(kind === 'relay' ? 'bare ws relay (reference)' : 'gateway bridge', child, port, kind === 'bridge', rt, d));
    child.kill('SIGTERM');
    await new Promise((r) => child.once('exit', r));
    await rt.close();
  }
  if (process.env.QUEUE_STORE_URL) {
    const { Redis } = await import('ioredis');
    const redis = new Redis(process.env.QUEUE_STORE_URL);
    const keys = await redis.keys(`bench-bridge-${process.pid}:*`);
    if (keys.length) await redis.del(...keys);
    redis.disconnect();
  }
  console.log(
    `\nphone bridge: ${CALLS} concurrent calls, a 20 ms µ-law frame every 20 ms each way, ${SECONDS} s measured after ${WARMUP_S} s; ` +
      `${pin ? 'the relay or gateway alone on core 0, the peers on core 1' : 'not pinned'}; load average ${loadavg()[0].toFixed(2)}`,
  );
  console.log(
    `${'path'.padEnd(26)} caller→model p50 / p99     model→caller p50 / p99     dropped   CPU/call-second   core   memory/call   peers' lag p99`,
  );
  for (const r of results) console.log(row(r));
  if (process.env.BENCH_DEBUG) for (const r of results) console.log(r.name, JSON.stringify(r.inbound.slow.slice(0, 60)));
  const [ref, ours] = results;
  const p = (r: Run, q: number) => Math.max(pct(r.inbound.samples, q), pct(r.outbound.samples, q));
  const added99 = p(ours, 99) - p(ref, 99);
  const dropped = ours.inbound.sent - ours.inbound.received + ours.outbound.sent - ours.outbound.received;
  console.log(
    `added by the bridge over the bare relay (worse direction): p50 ${(p(ours, 50) - p(ref, 50)).toFixed(2)} ms, p99 ${added99.toFixed(2)} ms`,
  );
  console.log(
    `goals: added p99 ≤ 5 ms at ${CALLS} calls: ${added99 <= 5 ? 'met' : 'NOT met'} (whole path p99 ${p(ours, 99).toFixed(2)} ms); ` +
      `no dropped frame on one core: ${dropped === 0 && ours.cpuShare < 1 ? 'met' : 'NOT met'}`,
  );
}

// Alone: npm run -s build:gateway && npx tsx test/bench/voice-bridge.ts
if (process.argv[1]?.endsWith('voice-bridge.ts')) await benchBridge();

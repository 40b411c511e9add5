// The phone bridge under load (part of npm run bench:voice): N concurrent simulated calls, each a
// Twilio media stream sending a 20 ms µ-law frame every 20 ms and a realtime session sending a
// 20 ms delta every 20 ms, through the built gateway (signed webhook, signed handshake, ticket,
// guard, marks: the real path) and, in the same run, through a bare WebSocket relay with no logic
// (reference-relay.mjs). Per frame: the delay from sender to receiver, read off the frame (the two
// peers are worker threads of this process, sharing one clock). The peers' own event-loop delay
// and the machine's load average are printed beside the figures: on a shared machine a busy
// neighbour shows up in every column, the reference's too. BENCH_PIN=1 pins the system under test
// to core 0 and this process to core 1 (taskset).
// Goals: the delay the bridge adds, p99 ≤ 5 ms at 100 concurrent calls; 100 calls on
// one core without a dropped frame; CPU per call-second and memory per call stated.
import { execSync, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';
import { filled } from '../voice/filled';
import type { WorkerStats } from './voice-bridge-worker';
import { benchCount } from './usage';
import { scratchDir } from './scratch';

const CALLS = benchCount('BENCH_CALLS', 100);
const SECONDS = benchCount('BENCH_BRIDGE_SECONDS', 10);
const WARMUP_S = 2;
const TOKEN = 'bench-auth-token';
const PUBLIC_URL = 'https://bench.example.test';
const KEY = 'bench-openai-key';
const pin = process.env.BENCH_PIN === '1' && existsSync('/usr/bin/taskset') && Number(execSync('nproc').toString()) >= 2;

interface Run {
  name: string;
  /** caller→model (received by the realtime side) and model→caller (received by the Twilio side). */
  up: WorkerStats & { sentBy: number };
  down: WorkerStats & { sentBy: number };
  cpuMsPerCallSecond: number;
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

const pct = (xs: number[], p: number) => xs[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))] ?? NaN;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A peer thread, spoken to with messages and answered with one message of a given type. */
class Peer {
  readonly worker: Worker;
  constructor(role: 'realtime' | 'twilio') {
    // The peers are TypeScript: the thread loads them through tsx's API, as this script is loaded.
    const entry = new URL('./voice-bridge-worker.ts', import.meta.url).href;
    const code = `import('tsx/esm/api').then(({ tsImport }) => tsImport(${JSON.stringify(entry)}, ${JSON.stringify(import.meta.url)}))`;
    this.worker = new Worker(code, { eval: true, workerData: { role, calls: CALLS } });
  }
  ask<T>(message: Record<string, unknown> | null, answer: string): Promise<T> {
    return new Promise((resolve, reject) => {
      const on = (m: { type: string }) => {
        if (m.type !== answer) return;
        this.worker.off('message', on);
        resolve(m as T);
      };
      this.worker.on('message', on);
      this.worker.once('error', reject);
      if (message) this.worker.postMessage(message);
    });
  }
}

async function run(name: string, child: ChildProcess, port: number, signed: boolean, rt: Peer, tw: Peer): Promise<Run> {
  const idle = usage(child.pid!);
  await tw.ask({ type: 'open', port, signed, token: TOKEN, publicUrl: PUBLIC_URL }, 'running');
  await sleep(WARMUP_S * 1000);
  for (const p of [rt, tw]) p.worker.postMessage({ type: 'record' });
  const a = usage(child.pid!);
  await sleep(SECONDS * 1000);
  const b = usage(child.pid!);
  for (const p of [rt, tw]) p.worker.postMessage({ type: 'stop' });
  // Let frames in flight land, then count what never arrived.
  let r!: WorkerStats, t!: WorkerStats;
  for (let i = 0; i < 40; i++) {
    [r, t] = await Promise.all([rt, tw].map((p) => p.ask<{ stats: WorkerStats }>({ type: 'stats' }, 'stats').then((m) => m.stats)));
    if (r.received >= t.sent && t.received >= r.sent) break;
    await sleep(50);
  }
  await tw.ask({ type: 'hangup' }, 'hungup');
  const cpuMs = b.cpuMs - a.cpuMs;
  return {
    name,
    up: { ...r, sentBy: t.sent },
    down: { ...t, sentBy: r.sent },
    cpuMsPerCallSecond: cpuMs / (CALLS * SECONDS),
    cpuShare: cpuMs / (SECONDS * 1000),
    mbPerCall: (b.rssMb - idle.rssMb) / CALLS,
  };
}

const dropped = (r: Run) => r.up.sentBy - r.up.received + (r.down.sentBy - r.down.received);

function row(r: Run): string {
  const f = (x: number) => x.toFixed(2).padStart(6);
  const [u, d] = [r.up.samples.sort((x, y) => x - y), r.down.samples.sort((x, y) => x - y)];
  const lag = Math.max(r.up.lagP99Ms, r.down.lagP99Ms);
  return `${r.name.padEnd(26)} ${f(pct(u, 50))} / ${f(pct(u, 99))} ms   ${f(pct(d, 50))} / ${f(pct(d, 99))} ms   ${String(dropped(r)).padStart(7)}   ${r.cpuMsPerCallSecond.toFixed(3).padStart(8)} ms   ${(r.cpuShare * 100).toFixed(0).padStart(4)} %   ${r.mbPerCall.toFixed(2).padStart(6)} MB   ${lag.toFixed(1).padStart(5)} ms`;
}

function gatewayEnv(dir: string, realtimeUrl: string): Record<string, string> {
  const config = filled();
  config.meta.business_hours_local = 'Mon-Sun 00:00-24:00';
  config.spend_guard.per_call_usd_cap = 1000;
  writeFileSync(join(dir, 'concierge.json'), JSON.stringify(config));
  return {
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
    OPENAI_REALTIME_URL: realtimeUrl,
    TWILIO_ACCOUNT_SID: 'ACbench',
    TWILIO_AUTH_TOKEN: TOKEN,
    TWILIO_API_URL: 'http://127.0.0.1:9',
    ...(process.env.QUEUE_STORE_URL ? { QUEUE_STORE_URL: process.env.QUEUE_STORE_URL, REDIS_PREFIX: `bench-bridge-${process.pid}` } : {}),
  };
}

export async function benchBridge(): Promise<void> {
  if (pin) execSync(`/usr/bin/taskset -a -p -c 1 ${process.pid}`, { stdio: 'ignore' });
  const load = loadavg()[0];
  const results: Run[] = [];
  for (const kind of ['relay', 'bridge'] as const) {
    const rt = new Peer('realtime');
    const { url } = await rt.ask<{ url: string }>(null, 'url');
    const tw = new Peer('twilio');
    await tw.ask(null, 'ready');
    const dir = scratchDir('bench-bridge-');
    const { child, port } =
      kind === 'relay'
        ? await spawnPinned(['test/bench/reference-relay.mjs'], { UPSTREAM: `${url}?model=x`, OPENAI_API_KEY: KEY })
        : await spawnPinned(['gateway/dist/main.js'], gatewayEnv(dir, url));
    results.push(await run(kind === 'relay' ? 'bare ws relay (reference)' : 'gateway bridge', child, port, kind === 'bridge', rt, tw));
    child.kill('SIGTERM');
    await new Promise((r) => child.once('exit', r));
    await rt.ask({ type: 'close' }, 'closed');
    await Promise.all([rt.worker.terminate(), tw.worker.terminate()]);
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
      `${pin ? 'the relay or gateway alone on core 0, the peers on core 1' : 'not pinned'}; load average ${load.toFixed(2)} at the start`,
  );
  console.log(
    `${'path'.padEnd(26)} caller→model p50 / p99     model→caller p50 / p99     dropped   CPU/call-second   core   memory/call   peers' lag p99`,
  );
  for (const r of results) console.log(row(r));
  const [ref, ours] = results;
  const p = (r: Run, q: number) => Math.max(pct(r.up.samples, q), pct(r.down.samples, q));
  const added99 = p(ours, 99) - p(ref, 99);
  console.log(
    `added by the bridge over the bare relay (worse direction): p50 ${(p(ours, 50) - p(ref, 50)).toFixed(2)} ms, p99 ${added99.toFixed(2)} ms`,
  );
  console.log(
    `goals: added p99 ≤ 5 ms at ${CALLS} calls: ${added99 <= 5 ? 'met' : 'NOT met'} (whole path p99 ${p(ours, 99).toFixed(2)} ms); ` +
      `no dropped frame, within one core: ${dropped(ours) === 0 && ours.cpuShare < 1 ? 'met' : 'NOT met'}`,
  );
}

// Alone: npm run -s build:gateway && npx tsx test/bench/voice-bridge.ts
if (process.argv[1]?.endsWith('voice-bridge.ts')) await benchBridge();

// Part of npm run bench:gateway: long streams at scale. A stub provider in its own
// process (stub-stream-provider.mjs) streams 100 chunks 20 ms apart; STREAMS (1,000) concurrent
// chat completions with `stream: true` go through the built gateway and through a no-logic
// streaming reference proxy (reference-stream-proxy.mjs: node:http in, undici out, the SSE body
// piped, the same uncapped pool), alternately, ROUNDS (6) times each, in one run (an even count: whichever
// runs second in a round tends to do better here, so each goes second as often). Per stream: time
// to first token (request sent → first event received) and total time (→ the stream's end). Per
// run: the proxy's CPU (utime + stime from /proc). Memory per open stream is measured apart, with
// the same count of streams held open at little CPU (10 chunks 300 ms apart): the proxy's highest
// RSS while every stream is open, minus its RSS just before, per stream. The load generator is
// this process, on node:http with an uncapped keep-alive agent; its CPU and the stub's are printed
// so a saturated generator would show. Last, each proxy's peak RSS over the whole run (VmHWM).
// Goals: all complete; TTFT p99 ≤ 1.25x and total p99 ≤ 1.1x the reference's; gateway
// CPU ≤ 1.5x the reference's; memory per open stream stated.
import { readFileSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { cpus } from 'node:os';
import { join } from 'node:path';
import { median } from './median';
import { allRoutesTo, START_NODE_FLAGS } from './start-flags';
import { startProcess } from './start-process';
import { benchUsage, streamsSettings } from './usage';
import { scratchDir } from './scratch';

benchUsage(`usage: npx tsx test/bench/streams.ts (also the last part of npm run bench:gateway)
Long streams at scale: concurrent streamed chat completions through the built gateway and through a
no-logic streaming reference proxy, alternately: time to first token, total time, CPU, memory.
  STREAMS               concurrent streams (1000)
  ROUNDS                rounds of each proxy (6)
  STREAMS_PROMPT_KB     a system prompt of that many KB in each stream's request (0)
  STREAMS_GATEWAY_PORT  the gateway's port (18182)
`);

// npm run bench:gateway runs this file after gateway.ts's parts (`BENCH_ONLY=streams`: this one
// alone); run on its own, it too leaves itself out when BENCH_ONLY names another part.
const only = process.env.BENCH_ONLY;
if ((only && only !== 'streams') || process.env.BENCH_KEYS_ONLY) process.exit(0);

const { streams: STREAMS, rounds: ROUNDS, promptKb: PROMPT_KB } = streamsSettings();
const CHUNKS = 100;
const INTERVAL_MS = 20;
const TICKS_PER_S = 100; // USER_HZ: /proc times are in 1/100 s on Linux
// STREAMS_PROMPT_KB: a system prompt of that many KB before the question (0: the question alone), for
// what a stream holds of a prompt the size real applications send (instructions, retrieved documents).
const system = PROMPT_KB > 0 ? [{ role: 'system', content: 'You answer from these notes. '.padEnd(PROMPT_KB * 1024, 'x') }] : [];
const body = (extra: Record<string, number> = {}) =>
  JSON.stringify({ model: 'gpt-4o-mini', stream: true, messages: [...system, { role: 'user', content: 'ping' }], ...extra });
const BODY = body();
const HOLD = { chunks: 10, intervalMs: 300 };
const HOLD_BODY = body({ stub_chunks: HOLD.chunks, stub_interval_ms: HOLD.intervalMs });

/** CPU seconds (user + system) a process has used so far. */
function cpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / TICKS_PER_S; // utime, stime (fields 14 and 15)
}

/** A size from /proc/<pid>/status in MB: VmRSS, the resident set now; VmHWM, the highest it has been. */
function statusMb(pid: number, field: 'VmRSS' | 'VmHWM'): number {
  const kb = new RegExp(`${field}:\\s+(\\d+)`).exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1];
  return Number(kb) / 1024;
}
const rssMb = (pid: number) => statusMb(pid, 'VmRSS');
const peakRssMb = (pid: number) => statusMb(pid, 'VmHWM');

interface Stream {
  ttft: number;
  total: number;
  ok: boolean;
}

/** One stream: sent, first event, end; complete when every chunk and `[DONE]` arrived. */
function oneStream(url: URL, agent: Agent, onFirst: () => void, payload: string, chunks: number): Promise<Stream> {
  return new Promise((resolve) => {
    const t0 = performance.now();
    let ttft = NaN;
    let events = 0;
    let lastNl = false;
    let tail = '';
    const req = request(
      url,
      { method: 'POST', agent, headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) } },
      (res) => {
        res.on('data', (chunk: Buffer) => {
          if (Number.isNaN(ttft)) {
            ttft = performance.now() - t0;
            onFirst();
          }
          // Events end with a blank line: count the "\n\n"s, one possibly split across chunks.
          if (lastNl && chunk[0] === 0x0a) events++;
          for (let i = chunk.indexOf('\n\n'); i !== -1; i = chunk.indexOf('\n\n', i + 2)) events++;
          lastNl = chunk[chunk.length - 1] === 0x0a;
          tail = chunk.subarray(Math.max(0, chunk.length - 20)).toString('latin1');
        });
        res.on('end', () => {
          const ok = res.statusCode === 200 && events === chunks + 1 && tail.endsWith('data: [DONE]\n\n');
          resolve({ ttft, total: performance.now() - t0, ok });
        });
        res.on('error', () => resolve({ ttft, total: performance.now() - t0, ok: false }));
      },
    );
    req.on('error', () => resolve({ ttft, total: performance.now() - t0, ok: false }));
    req.end(payload);
  });
}

interface Target {
  url: URL;
  pid: number;
}

const many = (t: Target, agent: Agent, onFirst: () => void, payload = BODY, chunks = CHUNKS) =>
  Promise.all(Array.from({ length: STREAMS }, () => oneStream(t.url, agent, onFirst, payload, chunks)));

interface Run {
  ttft50: number;
  ttft99: number;
  total50: number;
  total99: number;
  complete: number;
  cpuS: number;
  stubCpuS: number;
  loadGenCpuS: number;
  wallS: number;
}

const pct = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))];

/** STREAMS concurrent streams through one proxy; its CPU (and the stub's and ours) around them. */
async function run(t: Target, agent: Agent, stubPid: number): Promise<Run> {
  const cpu0 = cpuSeconds(t.pid);
  const stub0 = cpuSeconds(stubPid);
  const own0 = process.cpuUsage();
  const t0 = performance.now();
  const streams = await many(t, agent, () => {});
  const wallS = (performance.now() - t0) / 1000;
  const own = process.cpuUsage(own0);
  const cpuS = cpuSeconds(t.pid) - cpu0;
  const ttft = streams.map((s) => s.ttft).sort((a, b) => a - b);
  const total = streams.map((s) => s.total).sort((a, b) => a - b);
  return {
    ttft50: pct(ttft, 0.5),
    ttft99: pct(ttft, 0.99),
    total50: pct(total, 0.5),
    total99: pct(total, 0.99),
    complete: streams.filter((s) => s.ok).length,
    cpuS,
    stubCpuS: cpuSeconds(stubPid) - stub0,
    loadGenCpuS: (own.user + own.system) / 1e6,
    wallS,
  };
}

/** KB of RSS per open stream: the highest RSS while all STREAMS are open, minus the RSS before. */
async function memoryPerStream(t: Target, agent: Agent): Promise<{ kb: number; complete: number }> {
  const idle = rssMb(t.pid);
  let open = 0;
  let highest = idle;
  let sampler: NodeJS.Timeout | undefined;
  const streams = await many(
    t,
    agent,
    () => {
      if (++open < STREAMS) return;
      // Every stream has had its first event; the first ends (HOLD.chunks - 1) intervals later.
      const until = performance.now() + (HOLD.chunks - 2) * HOLD.intervalMs;
      sampler = setInterval(() => {
        if (performance.now() < until) highest = Math.max(highest, rssMb(t.pid));
        else clearInterval(sampler);
      }, 50);
    },
    HOLD_BODY,
    HOLD.chunks,
  );
  clearInterval(sampler);
  return { kb: ((highest - idle) * 1024) / STREAMS, complete: streams.filter((s) => s.ok).length };
}

const stub = await startProcess(['test/bench/stub-stream-provider.mjs'], {}, /listening (\d+)/);
const stubUrl = `http://127.0.0.1:${stub.port}/v1`;
// GATEWAY_NODE_ARGS, REFERENCE_NODE_ARGS: node flags for either proxy (say --cpu-prof --cpu-prof-dir=...)
// when profiling (profile-summary.mjs reads the profiles).
const nodeArgs = (name: string) => (process.env[name] ?? '').split(' ').filter(Boolean);
const reference = await startProcess(
  [...nodeArgs('REFERENCE_NODE_ARGS'), 'test/bench/reference-stream-proxy.mjs'],
  { TARGET: `${stubUrl}/chat/completions` },
  /listening (\d+)/,
);
const gateway = await startProcess(
  [...START_NODE_FLAGS, ...nodeArgs('GATEWAY_NODE_ARGS'), 'gateway/dist/main.js'],
  {
    PORT: process.env.STREAMS_GATEWAY_PORT ?? '18182',
    LOG_LEVEL: 'info',
    WORKER: 'off',
    ...allRoutesTo(stubUrl),
    METER_CSV_FILE: join(scratchDir('bench-streams-'), 'events.csv'),
  },
  /listening/,
);
const targets: Record<'reference' | 'gateway', Target> = {
  reference: {
    url: new URL(`http://127.0.0.1:${reference.port}/v1/chat/completions`),
    pid: reference.pid,
  },
  gateway: { url: new URL(`http://127.0.0.1:${process.env.STREAMS_GATEWAY_PORT ?? '18182'}/v1/chat/completions`), pid: gateway.pid },
};
type Name = keyof typeof targets;
const names: Name[] = ['reference', 'gateway'];
// The load generator's pool: no cap, connections kept for the next run.
const agent = new Agent({ keepAlive: true, maxSockets: Infinity, maxFreeSockets: Infinity });

console.log(
  `Streams bench: ${STREAMS} concurrent streams of ${CHUNKS} chunks ${INTERVAL_MS} ms apart (POST /v1/chat/completions, stream: true${PROMPT_KB > 0 ? `, a ${PROMPT_KB} KB system prompt` : ''}), loopback, ${cpus().length} CPUs shared by load generator, proxy and stub`,
);
console.log('reference = node:http + undici piping the SSE body with no logic (the same uncapped pool as the gateway)');
console.log('Figures from a machine other work is also using are noisy: read the ranges over rounds, not one number.\n');

// Memory first, on fresh processes (a little garbage only), after a few streams have loaded the code.
const memory = {} as Record<Name, { kb: number; complete: number }>;
for (const name of names) {
  await Promise.all(Array.from({ length: 20 }, () => oneStream(targets[name].url, agent, () => {}, BODY, CHUNKS)));
  memory[name] = await memoryPerStream(targets[name], agent);
}
// Warm-up at full load: connections on both hops, JIT. Not measured.
for (const name of names) await run(targets[name], agent, stub.pid);

const results: Record<Name, Run[]> = { reference: [], gateway: [] };
const ms = (v: number) => v.toFixed(0).padStart(6);
console.log(
  `${'round'.padEnd(6)}${'proxy'.padEnd(10)}${'complete'.padStart(10)}${'TTFT p50'.padStart(10)}${'p99'.padStart(7)}${'total p50'.padStart(11)}${'p99'.padStart(7)}${'CPU s'.padStart(7)}   stub CPU s, load generator CPU s / wall s`,
);
for (let round = 1; round <= ROUNDS; round++) {
  const order: Name[] = round % 2 ? ['reference', 'gateway'] : ['gateway', 'reference'];
  for (const name of order) {
    await new Promise((r) => setTimeout(r, 500));
    const r = await run(targets[name], agent, stub.pid);
    results[name].push(r);
    console.log(
      `${String(round).padEnd(6)}${name.padEnd(10)}${`${r.complete}/${STREAMS}`.padStart(10)}${ms(r.ttft50)} ms${ms(r.ttft99)}${ms(r.total50)} ms${ms(r.total99)}${r.cpuS.toFixed(2).padStart(7)}   ${r.stubCpuS.toFixed(2)}, ${r.loadGenCpuS.toFixed(2)} / ${r.wallS.toFixed(1)}`,
    );
  }
}

const range = (values: number[], digits = 2) => {
  const s = [...values].sort((a, b) => a - b);
  const [lo, hi] = [s[0].toFixed(digits), s[s.length - 1].toFixed(digits)];
  return lo === hi ? lo : `${lo}-${hi}`;
};
const ratios = (key: keyof Run) => results.gateway.map((g, i) => g[key] / results.reference[i][key]);
const verdict = (key: keyof Run, goal: number) => {
  const rs = ratios(key);
  return `${range(rs)} (median ${median(rs).toFixed(2)}; goal ≤ ${goal}: ${median(rs) <= goal ? 'met' : 'not met'})`;
};
const all = (name: Name) => results[name].every((r) => r.complete === STREAMS) && memory[name].complete === STREAMS;
console.log('\ngateway/reference, per round (the two runs of a round back to back):');
console.log(
  `  all complete: gateway ${all('gateway') ? 'yes' : 'NO'}, reference ${all('reference') ? 'yes' : 'NO'} (goal: ${all('gateway') ? 'met' : 'not met'})`,
);
console.log(`  TTFT p50 ${range(ratios('ttft50'))}; TTFT p99 ${verdict('ttft99', 1.25)}`);
console.log(`  total p50 ${range(ratios('total50'))}; total p99 ${verdict('total99', 1.1)}`);
console.log(`  CPU ${verdict('cpuS', 1.5)}`);
console.log(
  `  memory per open stream: gateway ${memory.gateway.kb.toFixed(1)} KB, reference ${memory.reference.kb.toFixed(1)} KB (${STREAMS} streams held open: highest RSS minus RSS before, per stream)`,
);
console.log(
  `  peak RSS over the whole run: gateway ${peakRssMb(targets.gateway.pid).toFixed(0)} MB, reference ${peakRssMb(targets.reference.pid).toFixed(0)} MB (VmHWM)`,
);

agent.destroy();
for (const p of [gateway, reference, stub]) p.stop();

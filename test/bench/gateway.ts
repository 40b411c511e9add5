// npm run bench:gateway — a stub provider, the built gateway and a load generator (autocannon), all
// on loopback: throughput and latency direct to the stub, through a reference proxy with no logic
// (reference-proxy.mjs: what the extra hop alone costs on this machine) and through the gateway, at
// concurrency 1 and 32, with a stub that answers at once and one that takes 5 ms (any real model
// takes longer). Added latency at concurrency 1 is also measured per request with a microsecond
// clock, since autocannon reports whole milliseconds. The gateway's own CPU time per request (from
// /proc, Linux) is printed beside its throughput: on a machine shared with other work, throughput
// swings with the neighbours; CPU per request is what the gateway itself spends.
// Goals: at 32, at least 70 % of direct throughput; added p50 at most 0.3 ms.
// Then the gateway's own steps of the hot path, each alone (gateway-steps.ts): what the steps every
// request needs cost of the gateway's own CPU per request.
// Then instructions per request, gateway beside reference, counted by valgrind (gateway-instructions.ts):
// a figure that a shared machine's noise hardly moves.
// Then client keys: GATEWAY_AUTH=keys against open, goal within 3 % (gateway-keys.ts).
// Then durable meter events: each answer held until its event is on disk, against released at once
// (gateway-durable.ts), goal under 5 %.
// Then shared state: one of a fleet on Redis against alone (gateway-fleet.ts), goal within 5 %.
// Last, the long streams (streams.ts).
// BENCH_ONLY=hot|steps|instructions|keys|durable|fleet|streams runs only that part (hot: the table above); BENCH_KEYS_ROUNDS, BENCH_AB_ROUNDS set their rounds (8, 6).
import autocannon from 'autocannon';
import { existsSync, readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { cpus } from 'node:os';
import { join } from 'node:path';
import { Agent, request } from 'undici';
import { durableVersusNot } from './gateway-durable';
import { fleetVersusAlone } from './gateway-fleet';
import { instructionsPerRequest } from './gateway-instructions';
import { hotPathSteps } from './gateway-steps';
import { keysVersusOpen } from './gateway-keys';
import { median } from './median';
import { allRoutesTo, START_NODE_FLAGS } from './start-flags';
import { startProcess } from './start-process';
import { benchChoice, benchCount, benchUsage, streamsSettings } from './usage';
import { scratchDir } from './scratch';

benchUsage(`usage: npm run bench:gateway
The built gateway beside a no-logic reference proxy, on loopback: the hot path's throughput, latency
and CPU per request, the gateway's own steps, instructions per request, client keys, durable meter
events, shared state, then long streams (streams.ts).
  BENCH_ONLY          one part: hot | steps | instructions | keys | durable | fleet | streams
  BENCH_SECONDS       seconds per load run (8)
  BENCH_METER         csv | web-app: where meter events go (csv)
  BENCH_AB_ROUNDS     rounds of the interleaved comparisons (6); BENCH_KEYS_ROUNDS for keys (8)
  STREAMS, ROUNDS     concurrent streams (1000) and rounds (6) of the streams bench
  STREAMS_PROMPT_KB   a system prompt of that many KB in each stream's request (0)
`);

const SECONDS = benchCount('BENCH_SECONDS', 8);
/** `csv` (default): meter events to a local CSV; `web-app`: to a spool, delivered to a meter stub on loopback. */
const METER = benchChoice('BENCH_METER', ['csv', 'web-app'] as const) ?? 'csv';
const KEYS_ROUNDS = benchCount('BENCH_KEYS_ROUNDS', 8);
const AB_ROUNDS = benchCount('BENCH_AB_ROUNDS', 6);
streamsSettings(); // the streams bench runs last: its settings are checked now
const BODY = JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'ping' }] });

async function load(url: string, connections: number, duration = SECONDS) {
  const result = await autocannon({
    url,
    method: 'POST',
    body: BODY,
    headers: { 'content-type': 'application/json' },
    connections,
    duration,
  });
  if (result.non2xx) throw new Error(`${result.non2xx} non-2xx answers from ${url}`);
  return { rps: result.requests.average, p50: result.latency.p50, p99: result.latency.p99, total: result.requests.total };
}

/** CPU seconds (user + system) a process has used, from /proc (Linux); null elsewhere. */
function cpuSeconds(pid: number | undefined): number | null {
  const file = `/proc/${pid}/stat`;
  if (pid === undefined || !existsSync(file)) return null;
  const fields = readFileSync(file, 'utf8').split(') ')[1].split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100; // utime, stime in clock ticks (USER_HZ 100)
}

/** A short warm-up (connections, JIT), then the measured run; with `pid`, that process's CPU µs per request. */
async function measure(url: string, connections: number, pid?: number) {
  await load(url, connections, 2);
  const before = cpuSeconds(pid);
  const r = await load(url, connections);
  const after = cpuSeconds(pid);
  return { ...r, cpuUs: before === null || after === null ? null : ((after - before) * 1e6) / r.total };
}

/** p50 of one-at-a-time request latency, in ms with microsecond resolution. */
async function sequentialP50(url: string, n = 3000): Promise<number> {
  const dispatcher = new Agent({ connections: 1 });
  const times: number[] = [];
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    const res = await request(url, { method: 'POST', body: BODY, headers: { 'content-type': 'application/json' }, dispatcher });
    await res.body.arrayBuffer();
    if (i >= 200) times.push(performance.now() - t); // after warm-up
  }
  await dispatcher.close();
  return median(times);
}

/** The built gateway on a free port (a fixed one may still be held by the run before) in front of the stub; its chat URL. */
async function startGateway(stubUrl: string) {
  const p = await startProcess(
    [...START_NODE_FLAGS, 'gateway/dist/main.js'],
    {
      PORT: '0',
      LOG_LEVEL: 'info',
      ...allRoutesTo(stubUrl),
      ...(await meterEnv()),
    },
    /listening on :(\d+)/,
  );
  return { ...p, url: `http://127.0.0.1:${p.port}/v1/chat/completions` };
}

/** The interleaved comparisons (gateway-ab.ts), printed under their headings. */
async function comparisons(only?: string) {
  if (!only || only === 'steps') {
    console.log(`\nThe gateway's own steps on the hot path, each alone in a loop (CPU per request; gateway-steps.ts):`);
    for (const line of await hotPathSteps()) console.log(`  ${line}`);
  }
  if (!only || only === 'instructions') {
    console.log(`\nInstructions per request on the hot path (valgrind's callgrind; gateway-instructions.ts):`);
    for (const line of await instructionsPerRequest()) console.log(`  ${line}`);
  }
  if (!only || only === 'keys') {
    console.log(`\nClient keys (GATEWAY_AUTH=keys vs open; instant stub, 32 connections, ${cpus().length} CPUs; gateway-keys.ts):`);
    for (const line of await keysVersusOpen(KEYS_ROUNDS)) console.log(`  ${line}`);
  }
  if (!only || only === 'durable') {
    console.log(`\nDurable meter events (answer after its event is on disk vs at once; instant stub, 32 connections; gateway-durable.ts):`);
    for (const line of await durableVersusNot(AB_ROUNDS)) console.log(`  ${line}`);
  }
  if (!only || only === 'fleet') {
    console.log(`\nShared state (one of a fleet on Redis vs alone, both to a meter stub; instant stub, 32 connections; gateway-fleet.ts):`);
    for (const line of await fleetVersusAlone(AB_ROUNDS)) console.log(`  ${line}`);
  }
}
const PARTS = ['hot', 'steps', 'instructions', 'keys', 'durable', 'fleet', 'streams'] as const;
const ONLY = benchChoice('BENCH_ONLY', PARTS) ?? (process.env.BENCH_KEYS_ONLY ? 'keys' : undefined);
if (ONLY && ONLY !== 'hot') {
  // The streams run in this process's place, after its parts: one program, so that npm gives it the arguments.
  if (ONLY === 'streams') await import('./streams');
  else await comparisons(ONLY);
  process.exit(0);
}
/** A meter web app that takes every batch at once (no 302: the bench measures the gateway, not Apps Script). */
async function meterStub(): Promise<string> {
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true,"appended":0}'));
  });
  server.unref();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}/exec`;
}
const meterEnv = async (): Promise<Record<string, string>> => {
  const dir = scratchDir('bench-gw-');
  return METER === 'csv'
    ? { METER_CSV_FILE: join(dir, 'events.csv') }
    : { METER_URL: await meterStub(), METER_SPOOL_DIR: join(dir, 'spool') };
};

const pad = (v: string, n: number) => v.padStart(n);
const fmt = (r: { rps: number; p50: number; p99: number }, direct: number) =>
  `${pad(r.rps.toFixed(0), 7)} ${pad((r.rps / direct).toFixed(2), 5)} ${pad(`${r.p50}/${r.p99}`, 6)}`;
console.log(
  `Gateway bench: ${SECONDS} s per run, loopback, POST /v1/chat/completions (non-streaming), ${cpus().length} CPUs shared by load generator, proxy and stub`,
);
console.log('reference = node:http + undici passing the request on with no logic at all: the cost of the extra hop alone');
console.log(`meter events: ${METER === 'csv' ? 'local CSV' : 'spool, delivered to a meter stub'} (BENCH_METER=csv|web-app)\n`);
console.log(
  `${'stub'.padEnd(6)}${pad('conn', 5)}${pad('direct req/s p50/p99', 22)}   ${'reference req/s ratio p50/p99'.padEnd(30)} ${'gateway req/s ratio p50/p99'.padEnd(28)}${pad('CPU µs/req ref gw', 18)}`,
);
/**
 * The proxy is the busy process, so its throughput should follow its CPU per request. On a machine
 * whose neighbours slow every process, the two drift apart (all of them wait alike and the ratio closes up):
 * the goal is called met only when both say so.
 */
function hotPathVerdict(ratio: number, refCpuUs: number | null, gwCpuUs: number | null): string {
  const cpuRatio = refCpuUs !== null && gwCpuUs !== null ? refCpuUs / gwCpuUs : null;
  if (ratio < 0.8) return 'not met';
  if (cpuRatio === null || cpuRatio >= 0.8) return 'met';
  return `unsettled: CPU per request says ${cpuRatio.toFixed(2)}; the machine slowed every process`;
}
const added: string[] = [];
const verdicts: string[] = [];
for (const delay of [0, 5]) {
  const stub = await startProcess(['test/bench/stub-provider.mjs'], { STUB_DELAY_MS: String(delay) }, /listening (\d+)/);
  const stubUrl = `http://127.0.0.1:${stub.port}/v1`;
  const direct = `${stubUrl}/chat/completions`;
  const reference = await startProcess(['test/bench/reference-proxy.mjs'], { TARGET: direct }, /listening (\d+)/);
  const gateway = await startGateway(stubUrl);
  const ref = `http://127.0.0.1:${reference.port}/v1/chat/completions`;
  const via = gateway.url;
  for (const c of [1, 32]) {
    const [d, r, g] = [await measure(direct, c), await measure(ref, c, reference.pid), await measure(via, c, gateway.pid)];
    const cpu = (x: { cpuUs: number | null }) => (x.cpuUs === null ? '' : pad(x.cpuUs.toFixed(0), 5));
    console.log(
      `${`${delay} ms`.padEnd(6)}${pad(String(c), 5)}${pad(`${d.rps.toFixed(0)} ${d.p50}/${d.p99}`, 22)}   ${fmt(r, d.rps).padEnd(30)} ${fmt(g, d.rps)}${pad(`${cpu(r)} ${cpu(g)}`, 14)}`,
    );
    if (c === 32)
      verdicts.push(
        `stub ${delay} ms, 32 connections: gateway at ${(g.rps / d.rps).toFixed(2)} of direct (goal 0.70: ${g.rps / d.rps >= 0.7 ? 'met' : 'not met'}); the reference at ${(r.rps / d.rps).toFixed(2)}; gateway/reference ${(g.rps / r.rps).toFixed(2)}${delay === 0 ? ` (hot-path goal ≥ 0.8: ${hotPathVerdict(g.rps / r.rps, r.cpuUs, g.cpuUs)})` : ''}` +
          (r.cpuUs !== null && g.cpuUs !== null
            ? `; CPU per request: reference ${r.cpuUs.toFixed(0)} µs, gateway ${g.cpuUs.toFixed(0)} µs, the gateway's own work ${(g.cpuUs - r.cpuUs).toFixed(0)} µs`
            : ''),
      );
  }
  const dp = await sequentialP50(direct);
  const rp = await sequentialP50(ref);
  const gp = await sequentialP50(via);
  added.push(
    `stub ${delay} ms: p50 direct ${dp.toFixed(3)} ms, reference ${rp.toFixed(3)} ms, gateway ${gp.toFixed(3)} ms; added by the gateway ${(gp - dp).toFixed(3)} ms (goal 0.3: ${gp - dp <= 0.3 ? 'met' : 'not met'}), of which the hop itself ${(rp - dp).toFixed(3)} ms and the gateway's own work ${(gp - rp).toFixed(3)} ms`,
  );
  for (const p of [gateway, reference, stub]) p.stop();
  await new Promise((r) => setTimeout(r, 300));
}
console.log('\nAdded latency, one request at a time (3,000 requests, microsecond clock):');
for (const line of added) console.log(`  ${line}`);
console.log('\nThroughput:');
for (const line of verdicts) console.log(`  ${line}`);
if (!ONLY) {
  await comparisons();
  await import('./streams');
}

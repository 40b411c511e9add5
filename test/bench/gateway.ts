// npm run bench:gateway — a stub provider, the built gateway and a load generator (autocannon), all
// on loopback: throughput and latency direct to the stub, through a reference proxy with no logic
// (reference-proxy.mjs: what the extra hop alone costs on this machine) and through the gateway, at
// concurrency 1 and 32, with a stub that answers at once and one that takes 5 ms (any real model
// takes longer). Added latency at concurrency 1 is also measured per request with a microsecond
// clock, since autocannon reports whole milliseconds.
// Goals (issue 3): at 32, at least 70 % of direct throughput; added p50 at most 0.3 ms.
// Then client keys (issue 14): the gateway with GATEWAY_AUTH=keys against the same gateway open, in
// alternating runs on the instant stub; goal: keys within 3 % of open. BENCH_KEYS_ONLY=1 runs only that.
import autocannon from 'autocannon';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent, request } from 'undici';
import { ClientAuth } from '../../gateway/src/client-auth';
import { createKey, type KeyStore } from '../../gateway/src/client-keys';
import { FileKeyStore } from '../../gateway/src/client-keys-file';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 8);
const BODY = JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'ping' }] });

function startProcess(args: string[], env: Record<string, string>, ready: RegExp): Promise<{ child: ChildProcess; out: () => string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, args, { env: { PATH: process.env.PATH!, ...env }, stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout!.on('data', (d) => {
      out += d;
      if (ready.test(out)) resolve({ child, out: () => out });
    });
    child.on('exit', (code) => reject(new Error(`exited ${code}: ${out}`)));
  });
}

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
  return { rps: result.requests.average, p50: result.latency.p50, p99: result.latency.p99 };
}

/** A short warm-up (connections, JIT), then the measured run. */
async function measure(url: string, connections: number) {
  await load(url, connections, 2);
  return load(url, connections);
}

/** p50 of one-at-a-time request latency, in ms with microsecond resolution. */
async function sequentialP50(url: string, n = 3000, headers: Record<string, string> = {}): Promise<number> {
  const dispatcher = new Agent({ connections: 1 });
  const times: number[] = [];
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    const res = await request(url, { method: 'POST', body: BODY, headers: { 'content-type': 'application/json', ...headers }, dispatcher });
    await res.body.arrayBuffer();
    if (i >= 200) times.push(performance.now() - t); // after warm-up
  }
  await dispatcher.close();
  times.sort((a, b) => a - b);
  return times[Math.floor(times.length / 2)];
}

/** The built gateway on a free port in front of the stub; its chat URL. */
async function startGateway(stubUrl: string, extra: Record<string, string> = {}) {
  const p = await startProcess(
    ['gateway/dist/main.js'],
    {
      PORT: '0',
      LOG_LEVEL: 'info',
      HOT_BASE_URL: stubUrl,
      HOT_BASE_URL_2: stubUrl,
      WARM_A_BASE_URL: stubUrl,
      WARM_B_BASE_URL: stubUrl,
      METER_CSV_FILE: join(mkdtempSync(join(tmpdir(), 'bench-gw-')), 'events.csv'),
      ...extra,
    },
    /listening on :(\d+)/,
  );
  return { ...p, url: `http://127.0.0.1:${/listening on :(\d+)/.exec(p.out())![1]}/v1/chat/completions` };
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

/** CPU time (user + system) a process has used, in ms, from /proc (Linux); null elsewhere. */
function cpuMs(pid: number): number | null {
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
    return ((Number(fields[11]) + Number(fields[12])) * 1000) / 100; // clock ticks of 1/100 s
  } catch {
    return null;
  }
}

/** The key check alone, in this process: µs per check of a cached key (what each request pays). */
async function checkCost(store: KeyStore, key: string, n = 200_000): Promise<number> {
  const auth = new ClientAuth(store, { warn: () => undefined });
  const header = `Bearer ${key}`;
  await auth.check(header);
  for (let i = 0; i < 20_000; i++) auth.check(header); // warm-up (JIT)
  const started = performance.now();
  for (let i = 0; i < n; i++) auth.check(header);
  return ((performance.now() - started) * 1000) / n;
}

/** One load run against a gateway process: req/s and the gateway's own CPU per request (µs). */
async function run(url: string, pid: number, seconds: number, headers: Record<string, string> = {}) {
  const before = cpuMs(pid);
  const result = await autocannon({
    url,
    method: 'POST',
    body: BODY,
    headers: { 'content-type': 'application/json', ...headers },
    connections: 32,
    duration: seconds,
  });
  if (result.non2xx) throw new Error(`${result.non2xx} non-2xx answers from ${url}`);
  const after = cpuMs(pid);
  const cpu = before === null || after === null ? NaN : ((after - before) * 1000) / result.requests.total;
  return { rps: result.requests.average, cpu };
}

/**
 * The same gateway open and with client keys (a key without limits: what the check itself costs).
 * Two open gateways and one with keys take turns in short runs, keys between the two; each keys
 * run is compared with the mean of the open runs around it, so a change in the machine's other
 * load weighs on both sides. The two open gateways compared with each other (A/A) show the noise
 * of the same comparison when nothing differs. The gateway's CPU time per request is compared the
 * same way: it is what the check adds, and it moves less with other load than req/s.
 */
async function keysVersusOpen(rounds = 8, seconds = Math.min(SECONDS, 4)): Promise<string[]> {
  const stub = await startProcess(['test/bench/stub-provider.mjs'], { STUB_DELAY_MS: '0' }, /listening (\d+)/);
  const stubUrl = `http://127.0.0.1:${/listening (\d+)/.exec(stub.out())![1]}/v1`;
  const file = join(mkdtempSync(join(tmpdir(), 'bench-keys-')), 'client-keys.json');
  const store = new FileKeyStore(file);
  const { key } = await createKey(store, { tenant: 'bench' });
  const auth = { authorization: `Bearer ${key}` };
  const a = await startGateway(stubUrl, { GATEWAY_AUTH: 'open' });
  const keyed = await startGateway(stubUrl, { GATEWAY_AUTH: 'keys', CLIENT_KEYS_FILE: file });
  const b = await startGateway(stubUrl, { GATEWAY_AUTH: 'open' });
  const go = (g: typeof a, s: number) => run(g.url, g.child.pid!, s, g === keyed ? auth : {});
  for (const g of [a, keyed, b]) await go(g, 2); // warm-up
  const runs: Array<Record<'a' | 'keys' | 'b', Awaited<ReturnType<typeof run>>>> = [];
  for (let i = 0; i < rounds; i++) runs.push({ a: await go(a, seconds), keys: await go(keyed, seconds), b: await go(b, seconds) });
  const p50 = { open: await sequentialP50(a.url), keys: await sequentialP50(keyed.url, 3000, auth) };
  const checkUs = await checkCost(store, key);
  for (const p of [a, keyed, b, stub]) p.child.kill('SIGTERM');
  type Run = (typeof runs)[number];
  const ratio = (f: (r: Run) => number) => median(runs.map(f)).toFixed(3);
  const rpsKeys = ratio((r) => r.keys.rps / ((r.a.rps + r.b.rps) / 2));
  const list = (side: 'a' | 'keys' | 'b') => runs.map((r) => r[side].rps.toFixed(0)).join(' ');
  return [
    `req/s per run (${rounds} rounds of ${seconds} s: open A, keys, open B): A ${list('a')}; keys ${list('keys')}; B ${list('b')}`,
    `req/s, keys / open around it (median): ${rpsKeys} (goal ≥ 0.97: ${Number(rpsKeys) >= 0.97 ? 'met' : 'not met'}); open B / open A, the noise: ${ratio((r) => r.b.rps / r.a.rps)}`,
    `gateway CPU per request (median): open A ${median(runs.map((r) => r.a.cpu)).toFixed(1)} µs, keys ${median(runs.map((r) => r.keys.cpu)).toFixed(1)} µs, open B ${median(runs.map((r) => r.b.cpu)).toFixed(1)} µs; keys / open around it ${ratio((r) => r.keys.cpu / ((r.a.cpu + r.b.cpu) / 2))}, B / A ${ratio((r) => r.b.cpu / r.a.cpu)}`,
    `the key check alone (a cached key, in process): ${checkUs.toFixed(2)} µs per request`,
    `one request at a time, p50: open ${p50.open.toFixed(3)} ms, keys ${p50.keys.toFixed(3)} ms (${(p50.keys - p50.open >= 0 ? '+' : '') + (p50.keys - p50.open).toFixed(3)} ms)`,
  ];
}

if (process.env.BENCH_KEYS_ONLY) {
  console.log(`Client keys: GATEWAY_AUTH=keys vs open, instant stub, 32 connections, ${cpus().length} CPUs`);
  for (const line of await keysVersusOpen()) console.log(`  ${line}`);
  process.exit(0);
}

const pad = (v: string, n: number) => v.padStart(n);
const fmt = (r: { rps: number; p50: number; p99: number }, direct: number) =>
  `${pad(r.rps.toFixed(0), 7)} ${pad((r.rps / direct).toFixed(2), 5)} ${pad(`${r.p50}/${r.p99}`, 6)}`;
console.log(
  `Gateway bench: ${SECONDS} s per run, loopback, POST /v1/chat/completions (non-streaming), ${cpus().length} CPUs shared by load generator, proxy and stub`,
);
console.log('reference = node:http + undici passing the request on with no logic at all: the cost of the extra hop alone\n');
console.log(
  `${'stub'.padEnd(6)}${pad('conn', 5)}${pad('direct req/s p50/p99', 22)}   ${'reference req/s ratio p50/p99'.padEnd(30)} ${'gateway req/s ratio p50/p99'.padEnd(28)}`,
);
const added: string[] = [];
const verdicts: string[] = [];
for (const delay of [0, 5]) {
  const stub = await startProcess(['test/bench/stub-provider.mjs'], { STUB_DELAY_MS: String(delay) }, /listening (\d+)/);
  const stubUrl = `http://127.0.0.1:${/listening (\d+)/.exec(stub.out())![1]}/v1`;
  const direct = `${stubUrl}/chat/completions`;
  const reference = await startProcess(['test/bench/reference-proxy.mjs'], { TARGET: direct }, /listening (\d+)/);
  const gateway = await startGateway(stubUrl);
  const ref = `http://127.0.0.1:${/listening (\d+)/.exec(reference.out())![1]}/v1/chat/completions`;
  const via = gateway.url;
  for (const c of [1, 32]) {
    const [d, r, g] = [await measure(direct, c), await measure(ref, c), await measure(via, c)];
    console.log(
      `${`${delay} ms`.padEnd(6)}${pad(String(c), 5)}${pad(`${d.rps.toFixed(0)} ${d.p50}/${d.p99}`, 22)}   ${fmt(r, d.rps).padEnd(30)} ${fmt(g, d.rps)}`,
    );
    if (c === 32)
      verdicts.push(
        `stub ${delay} ms, 32 connections: gateway at ${(g.rps / d.rps).toFixed(2)} of direct (goal 0.70: ${g.rps / d.rps >= 0.7 ? 'met' : 'not met'}); the reference at ${(r.rps / d.rps).toFixed(2)}; gateway/reference ${(g.rps / r.rps).toFixed(2)}`,
      );
  }
  const dp = await sequentialP50(direct);
  const rp = await sequentialP50(ref);
  const gp = await sequentialP50(via);
  added.push(
    `stub ${delay} ms: p50 direct ${dp.toFixed(3)} ms, reference ${rp.toFixed(3)} ms, gateway ${gp.toFixed(3)} ms; added by the gateway ${(gp - dp).toFixed(3)} ms (goal 0.3: ${gp - dp <= 0.3 ? 'met' : 'not met'}), of which the hop itself ${(rp - dp).toFixed(3)} ms and the gateway's own work ${(gp - rp).toFixed(3)} ms`,
  );
  for (const p of [gateway, reference, stub]) p.child.kill('SIGTERM');
  await new Promise((r) => setTimeout(r, 300));
}
console.log('\nAdded latency, one request at a time (3,000 requests, microsecond clock):');
for (const line of added) console.log(`  ${line}`);
console.log('\nThroughput:');
for (const line of verdicts) console.log(`  ${line}`);
console.log(`\nClient keys (GATEWAY_AUTH=keys vs open; instant stub, 32 connections, alternating runs):`);
for (const line of await keysVersusOpen()) console.log(`  ${line}`);

// Client keys (issue 14) in `npm run bench:gateway`: what GATEWAY_AUTH=keys costs against the same
// gateway open. Goal: keys within 3 % of open.
//
// Three gateway stacks live in this one process (createStack, the code `npm start` runs): open A,
// keys (a key without limits of its own: the check itself) and open B. They take turns under load
// from a child process (so this process's CPU time is theirs alone), keys between the two open
// ones, the order reversed every round. Each keys run is compared with the mean of the open runs
// around it, so a change in the machine's other load weighs on both sides, and B with A shows the
// noise of the same comparison when nothing differs. One process means the same JIT state and the
// same CPU placement for all three; separate processes differed by more than 3 % between two
// identical open gateways on a busy machine.
import { execFile, spawn } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import pino from 'pino';
import { ClientAuth } from '../../gateway/src/client-auth';
import { createKey, type KeyStore } from '../../gateway/src/client-keys';
import { FileKeyStore } from '../../gateway/src/client-keys-file';
import { createStack } from '../../gateway/src/stack';

const BODY = JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'ping' }] });
const AUTOCANNON = createRequire(import.meta.url).resolve('autocannon');
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function startStub(): Promise<{ url: string; stop: () => void }> {
  const child = spawn(process.execPath, ['test/bench/stub-provider.mjs'], { stdio: ['ignore', 'pipe', 'inherit'] });
  const port = await new Promise<string>((resolve) => child.stdout!.on('data', (d) => resolve(/listening (\d+)/.exec(String(d))![1])));
  return { url: `http://127.0.0.1:${port}/v1`, stop: () => child.kill() };
}

async function gatewayHere(stubUrl: string, env: Record<string, string>) {
  const u = { HOT_BASE_URL: stubUrl, HOT_BASE_URL_2: stubUrl, WARM_A_BASE_URL: stubUrl, WARM_B_BASE_URL: stubUrl };
  const meter = join(mkdtempSync(join(tmpdir(), 'bench-keys-')), 'events.csv');
  const stack = await createStack({ ...u, METER_CSV_FILE: meter, ...env }, pino({ level: 'silent' }), { http: true, worker: false });
  const server = await stack.gateway!.listen(0, '127.0.0.1');
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/chat/completions`,
    close: async () => {
      server.closeAllConnections();
      server.close();
      await stack.close();
    },
  };
}

/** One run at 32 connections from a child process: req/s, and this process's CPU time per request (µs). */
async function childLoad(url: string, seconds: number, headers: Record<string, string>) {
  const args = [AUTOCANNON, '-j', '-c', '32', '-d', String(seconds), '-m', 'POST', '-H', 'content-type=application/json', '-b', BODY];
  for (const [k, v] of Object.entries(headers)) args.push('-H', `${k}=${v}`);
  const before = process.cpuUsage();
  const { stdout } = await promisify(execFile)(process.execPath, [...args, url], { maxBuffer: 1 << 24 });
  const cpu = process.cpuUsage(before);
  const result = JSON.parse(stdout) as { non2xx: number; requests: { average: number; total: number } };
  if (result.non2xx) throw new Error(`${result.non2xx} non-2xx answers from ${url}`);
  return { rps: result.requests.average, cpu: (cpu.user + cpu.system) / result.requests.total };
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

export async function keysVersusOpen(rounds = 8, seconds = 4): Promise<string[]> {
  const stub = await startStub();
  const file = join(mkdtempSync(join(tmpdir(), 'bench-keys-')), 'client-keys.json');
  const store = new FileKeyStore(file);
  const { key } = await createKey(store, { tenant: 'bench' });
  const a = await gatewayHere(stub.url, { GATEWAY_AUTH: 'open' });
  const keyed = await gatewayHere(stub.url, { GATEWAY_AUTH: 'keys', CLIENT_KEYS_FILE: file });
  const b = await gatewayHere(stub.url, { GATEWAY_AUTH: 'open' });
  const go = (g: typeof a, s: number) => childLoad(g.url, s, g === keyed ? { authorization: `Bearer ${key}` } : {});
  for (const g of [a, keyed, b]) await go(g, 2); // warm-up
  const runs: Array<Record<'a' | 'keys' | 'b', Awaited<ReturnType<typeof go>>>> = [];
  for (let i = 0; i < rounds; i++) {
    const [first, last] = i % 2 ? [b, a] : [a, b];
    const [x, keys, y] = [await go(first, seconds), await go(keyed, seconds), await go(last, seconds)];
    runs.push(i % 2 ? { a: y, keys, b: x } : { a: x, keys, b: y });
  }
  const checkUs = await checkCost(store, key);
  for (const g of [a, keyed, b]) await g.close();
  stub.stop();
  type Run = (typeof runs)[number];
  const ratio = (f: (r: Run) => number) => median(runs.map(f));
  const rps = ratio((r) => r.keys.rps / ((r.a.rps + r.b.rps) / 2));
  const list = (side: keyof Run) => runs.map((r) => r[side].rps.toFixed(0)).join(' ');
  const med = (side: keyof Run, what: 'rps' | 'cpu') => median(runs.map((r) => r[side][what])).toFixed(what === 'rps' ? 0 : 1);
  return [
    `req/s per run (${rounds} rounds of ${seconds} s; keys between open A and open B): A ${list('a')}; keys ${list('keys')}; B ${list('b')}`,
    `req/s (median): open A ${med('a', 'rps')}, keys ${med('keys', 'rps')}, open B ${med('b', 'rps')}`,
    `req/s, keys / open around it (median): ${rps.toFixed(3)} (goal ≥ 0.97: ${rps >= 0.97 ? 'met' : 'not met'}); open B / open A, the noise: ${ratio((r) => r.b.rps / r.a.rps).toFixed(3)}`,
    `CPU per request (median): open A ${med('a', 'cpu')} µs, keys ${med('keys', 'cpu')} µs, open B ${med('b', 'cpu')} µs; keys / open around it ${ratio((r) => r.keys.cpu / ((r.a.cpu + r.b.cpu) / 2)).toFixed(3)}, B / A ${ratio((r) => r.b.cpu / r.a.cpu).toFixed(3)}`,
    `the key check alone (a cached key): ${checkUs.toFixed(2)} µs per request`,
  ];
}

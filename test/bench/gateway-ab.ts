// Interleaved A/B runs of the gateway in `npm run bench:gateway`: what one setting costs against the
// same gateway without it, on the instant stub at 32 connections.
//
// Three gateway stacks live in this one process (createStack, the code `npm start` runs): base A, the
// variant and base B. They take turns under load from a child process (so this process's CPU time is
// theirs alone), the variant between the two base ones, the order reversed every round. Each variant
// run is compared with the mean of the base runs around it, so a change in the machine's other load
// weighs on both sides, and B with A shows the noise of the same comparison when nothing differs. One
// process means the same JIT state and the same CPU placement for all three; separate processes
// differed by more than 3 % between two identical gateways on a busy machine.
import { execFile, spawn } from 'node:child_process';
import type { AddressInfo } from 'node:net';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { promisify } from 'node:util';
import pino from 'pino';
import { createStack, type Stack } from '../../gateway/src/stack';
import { median } from './median';
import { allRoutesTo } from './start-flags';
import { scratchDir } from './scratch';

const BODY = JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'ping' }] });
const AUTOCANNON = createRequire(import.meta.url).resolve('autocannon');

/**
 * One side of a comparison: its environment (beside the stub's URLs and a fresh CSV; a function when
 * each gateway needs its own, a spool folder say), headers, and a change to the built stack.
 */
export interface Side {
  name: string;
  env?: Record<string, string> | (() => Record<string, string>);
  headers?: Record<string, string>;
  adjust?: (stack: Stack) => void;
}

export async function startStub(): Promise<{ url: string; stop: () => void }> {
  const child = spawn(process.execPath, ['test/bench/stub-provider.mjs'], { stdio: ['ignore', 'pipe', 'inherit'] });
  const port = await new Promise<string>((resolve) => child.stdout!.on('data', (d) => resolve(/listening (\d+)/.exec(String(d))![1])));
  return { url: `http://127.0.0.1:${port}/v1`, stop: () => child.kill() };
}

async function gatewayHere(stubUrl: string, side: Side) {
  const meter = join(scratchDir('bench-ab-'), 'events.csv');
  const env = typeof side.env === 'function' ? side.env() : side.env;
  const stack = await createStack({ ...allRoutesTo(stubUrl), METER_CSV_FILE: meter, ...env }, pino({ level: 'silent' }), {
    http: true,
    worker: false,
  });
  side.adjust?.(stack);
  const server = await stack.gateway!.listen(0, '127.0.0.1');
  return {
    side,
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/chat/completions`,
    close: async () => {
      server.closeAllConnections();
      server.close();
      await stack.close();
    },
  };
}
type Here = Awaited<ReturnType<typeof gatewayHere>>;

/** One run at 32 connections from a child process: req/s, and this process's CPU time per request (µs). */
async function childLoad(g: Here, seconds: number) {
  const args = [AUTOCANNON, '-j', '-c', '32', '-d', String(seconds), '-m', 'POST', '-H', 'content-type=application/json', '-b', BODY];
  for (const [k, v] of Object.entries(g.side.headers ?? {})) args.push('-H', `${k}=${v}`);
  const before = process.cpuUsage();
  const { stdout } = await promisify(execFile)(process.execPath, [...args, g.url], { maxBuffer: 1 << 24 });
  const cpu = process.cpuUsage(before);
  const result = JSON.parse(stdout) as { non2xx: number; requests: { average: number; total: number } };
  if (result.non2xx) throw new Error(`${result.non2xx} non-2xx answers from ${g.url}`);
  return { rps: result.requests.average, cpu: (cpu.user + cpu.system) / result.requests.total };
}

export interface Comparison {
  base: Side;
  variant: Side;
  /** The variant's throughput against the base's, at or above which the goal is met (0.97: within 3 %). */
  goal: number;
  rounds?: number;
  seconds?: number;
}

/** Runs the comparison and returns the lines to print. */
export async function interleaved(stubUrl: string, c: Comparison): Promise<string[]> {
  const { rounds = 8, seconds = 4 } = c;
  const a = await gatewayHere(stubUrl, c.base);
  const v = await gatewayHere(stubUrl, c.variant);
  const b = await gatewayHere(stubUrl, c.base);
  try {
    for (const g of [a, v, b]) await childLoad(g, 2); // warm-up
    const runs: Array<Record<'a' | 'v' | 'b', Awaited<ReturnType<typeof childLoad>>>> = [];
    for (let i = 0; i < rounds; i++) {
      const [first, last] = i % 2 ? [b, a] : [a, b];
      const [x, mid, y] = [await childLoad(first, seconds), await childLoad(v, seconds), await childLoad(last, seconds)];
      runs.push(i % 2 ? { a: y, v: mid, b: x } : { a: x, v: mid, b: y });
    }
    type Run = (typeof runs)[number];
    const ratio = (f: (r: Run) => number) => median(runs.map(f));
    const rps = ratio((r) => r.v.rps / ((r.a.rps + r.b.rps) / 2));
    const [bn, vn] = [c.base.name, c.variant.name];
    const list = (side: keyof Run) => runs.map((r) => r[side].rps.toFixed(0)).join(' ');
    const med = (side: keyof Run, what: 'rps' | 'cpu') => median(runs.map((r) => r[side][what])).toFixed(what === 'rps' ? 0 : 1);
    const goal = `goal ≥ ${c.goal}: ${rps >= c.goal ? 'met' : 'not met'}`;
    return [
      `req/s per run (${rounds} rounds of ${seconds} s; ${vn} between ${bn} A and ${bn} B): A ${list('a')}; ${vn} ${list('v')}; B ${list('b')}`,
      `req/s (median): ${bn} A ${med('a', 'rps')}, ${vn} ${med('v', 'rps')}, ${bn} B ${med('b', 'rps')}`,
      `req/s, ${vn} / ${bn} around it (median): ${rps.toFixed(3)} (${goal}); ${bn} B / ${bn} A, the noise: ${ratio((r) => r.b.rps / r.a.rps).toFixed(3)}`,
      `CPU per request (median): ${bn} A ${med('a', 'cpu')} µs, ${vn} ${med('v', 'cpu')} µs, ${bn} B ${med('b', 'cpu')} µs; ${vn} / ${bn} around it ${ratio((r) => r.v.cpu / ((r.a.cpu + r.b.cpu) / 2)).toFixed(3)}, B / A ${ratio((r) => r.b.cpu / r.a.cpu).toFixed(3)}`,
    ];
  } finally {
    for (const g of [a, v, b]) await g.close();
  }
}

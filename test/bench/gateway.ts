// npm run bench:gateway — a stub provider, the built gateway and a load generator (autocannon), all
// on loopback: throughput and latency direct to the stub and through the gateway, at concurrency
// 1 and 32. Goals (issue 3): at 32, at least 70 % of direct throughput; added p50 at most 0.3 ms.
import autocannon from 'autocannon';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 8);

function startProcess(args: string[], env: Record<string, string>, ready: RegExp): Promise<{ child: ChildProcess; line: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, args, { env: { PATH: process.env.PATH!, ...env }, stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout!.on('data', (d) => {
      out += d;
      const m = ready.exec(out);
      if (m) resolve({ child, line: m[0] });
    });
    child.on('exit', (code) => reject(new Error(`exited ${code}: ${out}`)));
  });
}

async function load(url: string, connections: number) {
  const body = JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'ping' }] });
  const result = await autocannon({ url, method: 'POST', body, headers: { 'content-type': 'application/json' }, connections, duration: SECONDS, pipelining: 1 });
  if (result.non2xx) throw new Error(`${result.non2xx} non-2xx answers from ${url}`);
  return { rps: result.requests.average, p50: result.latency.p50, p99: result.latency.p99 };
}

const stub = await startProcess(['test/bench/stub-provider.mjs'], {}, /listening (\d+)/);
const stubPort = /listening (\d+)/.exec(stub.line)![1];
const stubUrl = `http://127.0.0.1:${stubPort}/v1`;
const gateway = await startProcess(
  ['gateway/dist/main.js'],
  {
    PORT: '18181', LOG_LEVEL: 'warn', HOT_BASE_URL: stubUrl, HOT_BASE_URL_2: stubUrl, WARM_A_BASE_URL: stubUrl, WARM_B_BASE_URL: stubUrl,
    METER_CSV_FILE: join(mkdtempSync(join(tmpdir(), 'bench-gw-')), 'events.csv'),
  },
  /./,
);
await new Promise((r) => setTimeout(r, 500));

const rows: string[] = [];
console.log(`Gateway bench: ${SECONDS} s per run, loopback, POST /v1/chat/completions (non-streaming)\n`);
console.log(`${'connections'.padEnd(12)}${'direct req/s'.padStart(14)}${'gateway req/s'.padStart(15)}${'ratio'.padStart(8)}${'direct p50/p99 ms'.padStart(20)}${'gateway p50/p99 ms'.padStart(21)}${'added p50 ms'.padStart(14)}`);
for (const c of [1, 32]) {
  await load(`${stubUrl}/chat/completions`, c); // warm-up of both paths
  const direct = await load(`${stubUrl}/chat/completions`, c);
  await load('http://127.0.0.1:18181/v1/chat/completions', c);
  const via = await load('http://127.0.0.1:18181/v1/chat/completions', c);
  rows.push(
    `${String(c).padEnd(12)}${direct.rps.toFixed(0).padStart(14)}${via.rps.toFixed(0).padStart(15)}${(via.rps / direct.rps).toFixed(2).padStart(8)}` +
      `${`${direct.p50}/${direct.p99}`.padStart(20)}${`${via.p50}/${via.p99}`.padStart(21)}${(via.p50 - direct.p50).toFixed(2).padStart(14)}`,
  );
  console.log(rows.at(-1));
}
console.log('\nautocannon reports latency in whole milliseconds; "added p50" is the difference of the two p50s.');
gateway.child.kill('SIGTERM');
stub.child.kill('SIGTERM');

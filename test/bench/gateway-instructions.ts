// Instructions per request on the hot path, the gateway beside the reference proxy, counted by
// valgrind's callgrind: unlike CPU time, the count hardly moves with what else the machine is doing
// (two runs of the same build agree within about 2 %), so a change of a few per cent in the
// gateway's own work can be read on a shared machine. Each proxy runs under callgrind with
// counting off; after a warm-up it is switched on for a fixed number of requests
// (`callgrind_control -i on|off`), then dumped. User space only: the system calls' own cost (two
// socket writes per request, the same for both) is not in it. V8's optimizing compiler still runs
// in that window under valgrind (it is some 50 times slower), so the count is also given without it.
import autocannon from 'autocannon';
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { allRoutesTo, START_NODE_FLAGS } from './start-flags';
import { startProcess } from './start-process';
import { benchCount } from './usage';

const WARM_UP = benchCount('BENCH_INSTR_WARMUP', 3000);
const COUNTED = benchCount('BENCH_INSTR_REQUESTS', 2000);
const BODY = JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'ping' }] });

/** valgrind's callgrind with counting off until switched on, its dumps written into `dir`. */
const callgrind = (dir: string) => ['valgrind', '--tool=callgrind', '--instr-atstart=no', `--callgrind-out-file=${join(dir, 'cg.%p')}`];

/** callgrind_control exits 0 even when it reached no process: its words tell. */
function control(pid: number, ...command: string[]): void {
  const said = execFileSync('callgrind_control', [...command, String(pid)], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  if (!/^\s*OK\.\s*$/m.test(said)) throw new Error(`callgrind_control ${command.join(' ')}: ${said || 'no answer'}`);
}

async function requests(url: string, amount: number): Promise<void> {
  const r = await autocannon({ url, method: 'POST', body: BODY, headers: { 'content-type': 'application/json' }, connections: 8, amount });
  if (r.non2xx || r.errors) throw new Error(`${r.non2xx} non-2xx answers, ${r.errors} errors from ${url}`);
}

/** Instructions per counted request, in all and without V8's optimizing compiler. */
function countOf(dir: string, pid: number): { all: number; withoutCompiler: number } {
  const dump = readdirSync(dir).find((f) => f.startsWith(`cg.${pid}.`));
  if (!dump) throw new Error(`no callgrind dump for ${pid} in ${dir}`);
  // --auto=no: no annotated source lines, which have the same shape as the function lines.
  const listing = execFileSync('callgrind_annotate', ['--auto=no', '--threshold=100', join(dir, dump)], {
    encoding: 'utf8',
    maxBuffer: 1 << 28,
  });
  const total = /^\s*([\d,]+) \(\s*[\d.]+%\)\s+PROGRAM TOTALS/m.exec(listing);
  if (!total) throw new Error(`no PROGRAM TOTALS in ${dump}`);
  const all = Number(total[1].replaceAll(',', ''));
  let compiler = 0;
  for (const line of listing.split('\n')) {
    const m = /^\s*([\d,]+) \(\s*[\d.]+%\)\s+(.*)$/.exec(line);
    if (m && /compiler::|maglev::/i.test(m[2])) compiler += Number(m[1].replaceAll(',', ''));
  }
  return { all: all / COUNTED, withoutCompiler: (all - compiler) / COUNTED };
}

async function counted(args: string[], env: Record<string, string>, ready: RegExp, path: string) {
  const dir = mkdtempSync(join(tmpdir(), 'bench-instr-'));
  try {
    const proc = await startProcess(args, env, ready, callgrind(dir));
    try {
      const url = `http://127.0.0.1:${proc.port}${path}`;
      await requests(url, WARM_UP);
      control(proc.pid, '-i', 'on');
      await requests(url, COUNTED);
      control(proc.pid, '-i', 'off');
      control(proc.pid, '-d');
      return countOf(dir, proc.pid);
    } finally {
      proc.stop();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

export async function instructionsPerRequest(): Promise<string[]> {
  if (spawnSync('valgrind', ['--version']).status !== 0) return ['skipped: valgrind is not installed'];
  const stub = await startProcess(['test/bench/stub-provider.mjs'], {}, /listening (\d+)/);
  const dir = mkdtempSync(join(tmpdir(), 'bench-instr-csv-'));
  try {
    const base = `http://127.0.0.1:${stub.port}/v1`;
    const reference = await counted(
      ['test/bench/reference-proxy.mjs'],
      { TARGET: `${base}/chat/completions` },
      /listening (\d+)/,
      '/v1/chat/completions',
    );
    const gateway = await counted(
      [...START_NODE_FLAGS, 'gateway/dist/main.js'],
      {
        PORT: '0',
        LOG_LEVEL: 'info',
        ...allRoutesTo(base),
        METER_CSV_FILE: join(dir, 'events.csv'),
      },
      /listening on :(\d+)/,
      '/v1/chat/completions',
    );
    const k = (n: number) => `${(n / 1000).toFixed(0)}k`;
    return [
      `${COUNTED} requests counted after ${WARM_UP} of warm-up, 8 connections, instant stub (user space; system calls not counted)`,
      `in all:                   reference ${k(reference.all)}, gateway ${k(gateway.all)} instructions per request; gateway/reference ${(gateway.all / reference.all).toFixed(2)}`,
      `without V8's compiler:    reference ${k(reference.withoutCompiler)}, gateway ${k(gateway.withoutCompiler)}; gateway/reference ${(gateway.withoutCompiler / reference.withoutCompiler).toFixed(2)}`,
    ];
  } finally {
    stub.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

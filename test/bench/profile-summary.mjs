// Where a process's CPU went, from a V8 CPU profile (`node --cpu-prof`): self and inclusive time
// per function, the top TOP (30) of each. With BURST_MS, only the first BURST_MS ms of each burst
// count (a burst: the first busy sample after at least 300 ms idle), so the start of 1,000
// streams can be read apart from their relay: run streams.ts with
// GATEWAY_NODE_ARGS="--cpu-prof --cpu-prof-dir=/tmp/prof" (REFERENCE_NODE_ARGS for the reference),
// then `node test/bench/profile-summary.mjs /tmp/prof/CPU.*.cpuprofile`.
import { readFileSync } from 'node:fs';

const TOP = Number(process.env.TOP ?? 30);
const BURST_MS = Number(process.env.BURST_MS ?? 0);
const IDLE_GAP_US = 300_000;

const profile = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const nodes = new Map(profile.nodes.map((n) => [n.id, n]));
const parent = new Map();
for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
const label = ({ callFrame: f }) => `${f.functionName || '(anonymous)'} ${f.url.split('/').slice(-2).join('/')}:${f.lineNumber + 1}`;
const idle = (id) => nodes.get(id).callFrame.functionName === '(idle)';

const self = new Map();
const inclusive = new Map();
const add = (map, key, us) => map.set(key, (map.get(key) ?? 0) + us);
let at = profile.startTime;
let lastBusy = -Infinity;
let burstStart = -Infinity;
let bursts = 0;
let busyUs = 0;
let idleUs = 0;
for (let i = 0; i < profile.samples.length; i++) {
  at += profile.timeDeltas[i];
  const id = profile.samples[i];
  const us = profile.timeDeltas[i + 1] ?? 0;
  if (idle(id)) {
    idleUs += us;
    continue;
  }
  if (at - lastBusy > IDLE_GAP_US) {
    burstStart = at;
    bursts++;
  }
  lastBusy = at;
  if (BURST_MS && at - burstStart > BURST_MS * 1000) continue;
  busyUs += us;
  add(self, label(nodes.get(id)), us);
  const seen = new Set();
  for (let n = id; n !== undefined; n = parent.get(n)) {
    const key = label(nodes.get(n));
    if (seen.has(key)) continue; // a recursive function counts once per sample
    seen.add(key);
    add(inclusive, key, us);
  }
}

const ms = (us) => (us / 1000).toFixed(1).padStart(8);
console.log(`busy ${ms(busyUs)} ms counted${BURST_MS ? ` (first ${BURST_MS} ms of ${bursts} bursts)` : ''}, idle ${ms(idleUs)} ms`);
for (const [title, map] of [
  ['self', self],
  ['inclusive', inclusive],
]) {
  console.log(`\n${title}:`);
  for (const [key, us] of [...map].sort((a, b) => b[1] - a[1]).slice(0, TOP))
    console.log(`${ms(us)} ms ${((100 * us) / busyUs).toFixed(1).padStart(5)} %  ${key}`);
}

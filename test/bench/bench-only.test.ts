// `npm run bench:gateway` runs gateway.ts, then the long-streams bench (streams.ts): with BENCH_ONLY,
// which picks one part of gateway.ts, the streams are not that part and must not run after it.
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

const root = join(import.meta.dirname, '..', '..');
const tsx = join(root, 'node_modules', '.bin', 'tsx');

describe('npm run bench:gateway with BENCH_ONLY', () => {
  it('leaves the long-streams bench out', () => {
    // A tiny bench, should it run anyway: two streams, two rounds.
    const env = { ...process.env, BENCH_ONLY: 'fleet', STREAMS: '2', ROUNDS: '2' };
    const r = spawnSync(tsx, ['test/bench/streams.ts'], { cwd: root, encoding: 'utf8', env, timeout: 15_000 });
    expect(r.stdout).not.toContain('Streams bench');
    expect(r.status).toBe(0);
  });
});

// Builds the gateway: gateway/src/main.ts → gateway/dist/main.js (ESM, dependencies left in
// node_modules). esbuild is the same bundler the meter uses; no tsc emit step to keep in sync.
import { build } from 'esbuild';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
await build({
  entryPoints: { main: join(here, 'src', 'main.ts'), worker: join(here, 'src', 'worker-main.ts'), ops: join(here, 'src', 'ops.ts') },
  outdir: join(here, 'dist'),
  bundle: true,
  platform: 'node',
  format: 'esm',
  target: 'node20',
  packages: 'external',
  sourcemap: true,
  logLevel: 'warning',
});
console.log('gateway/dist: main.js, worker.js, ops.js');

// Builds the gateway's commands: bin/gateway.ts → gateway/dist/main.js (and the worker and ops) (ESM, dependencies left in
// node_modules). esbuild is the same bundler the meter uses; no tsc emit step to keep in sync.
import { build } from 'esbuild';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
await build({
  entryPoints: {
    main: join(here, '..', 'bin', 'gateway.ts'),
    worker: join(here, '..', 'bin', 'worker.ts'),
    ops: join(here, '..', 'bin', 'ops.ts'),
  },
  outdir: join(here, 'dist'),
  bundle: true,
  platform: 'node',
  format: 'esm',
  target: 'node20',
  packages: 'external',
  // Split, so that a command's own first lines (bin/gateway.ts: SIGHUP held) run before the
  // dependencies load: the chunk a dynamic import() names is loaded then, with its imports.
  splitting: true,
  chunkNames: 'chunks/[name]-[hash]',
  sourcemap: true,
  logLevel: 'warning',
});
// stderr: `npm run ops` builds first, and its stdout is for results only (a script reads them).
console.error('gateway/dist: main.js, worker.js, ops.js');

// Builds the Apps Script bundle: apps-script/src/main.ts → apps-script/dist/meter.js, plus the
// manifest. Apps Script loads files as classic scripts in one global scope and only sees
// top-level `function` declarations (for triggers, web apps, menus, the editor's Run list), so:
//   1. esbuild bundles everything into an IIFE that assigns the entry's exports to `Meter`;
//   2. for every export of the entry, a top-level `function name(...args)` is appended that
//      passes its arguments to `Meter.name`. The names come from esbuild itself: the metafile of
//      the same entry built as an ES module lists its exports.
import { build } from 'esbuild';
import { copyFileSync, mkdirSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const entry = join(here, 'src', 'main.ts');
const dist = join(here, 'dist');
const GLOBAL = 'Meter';

const common = {
  entryPoints: [entry],
  bundle: true,
  // Apps Script's V8 runtime; lowering to ES2019 keeps us clear of syntax it may not parse.
  target: 'es2019',
  platform: 'neutral',
  charset: 'utf8',
  legalComments: 'none',
  logLevel: 'warning',
};

const probe = await build({ ...common, format: 'esm', write: false, metafile: true, outfile: join(dist, 'probe.mjs') });
const exported = Object.values(probe.metafile.outputs).flatMap((output) => output.exports ?? []);
if (exported.length === 0) throw new Error(`no exports found in ${entry}`);

rmSync(dist, { recursive: true, force: true });
mkdirSync(dist, { recursive: true });

const wrappers = exported.map((name) => `function ${name}(...args) {\n  return ${GLOBAL}.${name}(...args);\n}`).join('\n');

await build({
  ...common,
  outfile: join(dist, 'meter.js'),
  format: 'iife',
  globalName: GLOBAL,
  banner: { js: '// Usage and cost meter. Built from apps-script/src by `npm run build`; do not edit.' },
  footer: { js: `\n// Apps Script entry points (top-level functions).\n${wrappers}\n` },
});

copyFileSync(join(here, 'appsscript.json'), join(dist, 'appsscript.json'));
console.log(`apps-script/dist: appsscript.json, meter.js (${exported.join(', ')})`);

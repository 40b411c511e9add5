// Builds the Apps Script bundle: apps-script/src/main.ts → apps-script/dist/meter.js, plus the
// manifest. Apps Script loads files as classic scripts in one global scope and only sees
// top-level `function` declarations (for triggers, web apps, menus, the editor's Run list), so:
//   1. esbuild bundles everything into an IIFE that assigns the entry's exports to `Meter`;
//   2. for every `export function` of the entry, a top-level `function name(...)` is appended
//      that calls into `Meter`. Tree shaking cannot remove them: they are plain text we write.
import { build } from 'esbuild';
import { copyFileSync, mkdirSync, readFileSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const entry = join(here, 'src', 'main.ts');
const dist = join(here, 'dist');
const GLOBAL = 'Meter';

const exported = [...readFileSync(entry, 'utf8').matchAll(/^export function (\w+)\s*\(([^)]*)\)/gm)].map((m) => ({
  name: m[1],
  params: m[2]
    .split(',')
    .map((p) => p.split(':')[0].trim())
    .filter(Boolean),
}));
if (exported.length === 0) throw new Error(`no exported functions found in ${entry}`);

rmSync(dist, { recursive: true, force: true });
mkdirSync(dist, { recursive: true });

const wrappers = exported
  .map(({ name, params }) => `function ${name}(${params.join(', ')}) {\n  return ${GLOBAL}.${name}(${params.join(', ')});\n}`)
  .join('\n');

await build({
  entryPoints: [entry],
  outfile: join(dist, 'meter.js'),
  bundle: true,
  format: 'iife',
  globalName: GLOBAL,
  // Apps Script's V8 runtime; lowering to ES2019 keeps us clear of syntax it may not parse.
  target: 'es2019',
  platform: 'neutral',
  charset: 'utf8',
  legalComments: 'none',
  banner: { js: '// Usage and cost meter. Built from apps-script/src by `npm run build`; do not edit.' },
  footer: { js: `\n// Apps Script entry points (top-level functions).\n${wrappers}\n` },
  logLevel: 'warning',
});

copyFileSync(join(here, 'appsscript.json'), join(dist, 'appsscript.json'));
console.log(`apps-script/dist: appsscript.json, meter.js (${exported.map((e) => e.name).join(', ')})`);

// What `npm run push` would send: clasp's own file listing (works offline).
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect, it } from 'vitest';

const root = join(import.meta.dirname, '..', '..');

it('clasp pushes only the manifest and the bundle from apps-script/dist', () => {
  expect(JSON.parse(readFileSync(join(root, '.clasp.json'), 'utf8')).rootDir).toBe('apps-script/dist');
  const out = execFileSync(process.execPath, [join(root, 'node_modules/@google/clasp/build/src/index.js'), 'show-file-status', '--json'], {
    cwd: root,
    encoding: 'utf8',
    env: { ...process.env, HOME: root }, // no user credentials are needed or read
  });
  const status = JSON.parse(out.slice(out.indexOf('{')));
  expect(status.filesToPush.sort()).toEqual(['apps-script/dist/appsscript.json', 'apps-script/dist/meter.js']);
});

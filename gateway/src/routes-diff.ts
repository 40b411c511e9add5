/**
 * What differs between two routing maps, one line per JSON path, so routing changes are visible
 * in review (`npm run routes:diff`, bin/routes-diff.ts).
 */
import { readFileSync } from 'node:fs';
import { duplicateKeys, duplicateMessage } from './duplicate-keys';
import { asksForHelp } from './help';
import { withoutBom } from './json-object';

type Json = unknown;
type Print = (line: string) => void;

export function diffJson(a: Json, b: Json, path = ''): string[] {
  if (JSON.stringify(a) === JSON.stringify(b)) return [];
  const isObj = (v: Json) => v !== null && typeof v === 'object';
  if (isObj(a) && isObj(b) && Array.isArray(a) === Array.isArray(b)) {
    const keys = Array.isArray(a)
      ? [...Array(Math.max((a as Json[]).length, (b as Json[]).length)).keys()].map(String)
      : [...new Set([...Object.keys(a as object), ...Object.keys(b as object)])];
    return keys.flatMap((k) => {
      const p = Array.isArray(a) ? `${path}[${k}]` : path ? `${path}.${k}` : k;
      // Own keys only: a map's "constructor" is not Object's.
      const av = Object.hasOwn(a as object, k) ? (a as Record<string, Json>)[k] : undefined;
      const bv = Object.hasOwn(b as object, k) ? (b as Record<string, Json>)[k] : undefined;
      if (av === undefined) return [`+ ${p}: ${JSON.stringify(bv)}`];
      if (bv === undefined) return [`- ${p}: ${JSON.stringify(av)}`];
      return diffJson(av, bv, p);
    });
  }
  return [`~ ${path || '(top level)'}: ${JSON.stringify(a)} → ${JSON.stringify(b)}`];
}

/** A map file's JSON; a file missing or not JSON is one line naming it. */
function readMap(file: string): Json {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (error) {
    const missing = (error as NodeJS.ErrnoException).code === 'ENOENT';
    throw new Error(`${file}: ${missing ? 'no such file' : `not readable (${(error as Error).message})`}`, { cause: error });
  }
  let map: Json;
  try {
    map = JSON.parse(withoutBom(text)); // a byte-order mark, as the gateway reads the map
  } catch (error) {
    throw new Error(`${file}: not JSON (${(error as Error).message})`, { cause: error });
  }
  // The gateway refuses such a map: a diff of the last copy alone would review a map that never runs.
  const twice = duplicateKeys(withoutBom(text))[0];
  if (twice) throw new Error(`${file}: ${duplicateMessage(twice)} at ${twice.join('.')}; the gateway refuses this map`);
  return map;
}

const USAGE = 'usage: npm run routes:diff -- [a.json] [b.json] (default routes.local.json routes.prod.json)';

/** `npm run routes:diff -- [a] [b]`: 0 with the difference printed (or --help), 1 on a map that cannot be read, 2 on usage. */
export function routesDiffCli(args: string[], out: Print, err: Print): number {
  if (asksForHelp(args)) {
    out(USAGE);
    return 0;
  }
  // It takes no options: `--help` or `--bogus` was read as a map's file name ("--help: no such file", exit 1).
  const option = args.find((a) => a.startsWith('-'));
  if (option !== undefined || args.length > 2) {
    err(`${USAGE}, got ${option === undefined ? `${args.length} arguments` : `the option "${option}"`}`);
    return 2;
  }
  const [a = 'routes.local.json', b = 'routes.prod.json'] = args;
  let maps: [Json, Json];
  try {
    maps = [readMap(a), readMap(b)];
  } catch (error) {
    err((error as Error).message);
    return 1;
  }
  const lines = diffJson(...maps);
  out(`${a} → ${b}\n${lines.length ? lines.join('\n') : '(no differences)'}`);
  return 0;
}

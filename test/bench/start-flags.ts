/**
 * How the benches start the gateway: the node flags `npm start` gives it, read from package.json's
 * `start` script, so the benches measure the gateway as it is run (and a change to the flags is
 * measured with it); and every route pointed at the bench's stub.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

const start: string = JSON.parse(readFileSync(join(import.meta.dirname, '../../package.json'), 'utf8')).scripts.start;
// `exec`: npm's child is node itself, not a shell, so a SIGTERM sent to npm reaches the gateway.
const flags = /^exec node((?:\s+--\S+)*)\s+gateway\/dist\/main\.js$/.exec(start.trim());
if (!flags) throw new Error(`package.json "start": expected "exec node [--flag ...] gateway/dist/main.js", got "${start}"`);

export const START_NODE_FLAGS: string[] = flags[1].split(/\s+/).filter(Boolean);

/** Every route of the default routing maps pointed at one stub (the benches measure the gateway, not routing). */
export function allRoutesTo(stubUrl: string): Record<string, string> {
  return { HOT_BASE_URL: stubUrl, HOT_BASE_URL_2: stubUrl, WARM_A_BASE_URL: stubUrl, WARM_B_BASE_URL: stubUrl };
}

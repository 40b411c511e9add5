/**
 * The node flags `npm start` gives the gateway, read from package.json's `start` script, so the
 * benches measure the gateway as it is run (and a change to the flags is measured with it).
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

const start: string = JSON.parse(readFileSync(join(import.meta.dirname, '../../package.json'), 'utf8')).scripts.start;
const flags = /^node((?:\s+--\S+)*)\s+gateway\/dist\/main\.js$/.exec(start.trim());
if (!flags) throw new Error(`package.json "start": expected "node [--flag ...] gateway/dist/main.js", got "${start}"`);

export const START_NODE_FLAGS: string[] = flags[1].split(/\s+/).filter(Boolean);

/** `npm run routes:diff [a] [b]`: the difference of two routing maps (default: the local and the production one). */
import { readFileSync } from 'node:fs';
import { diffJson } from '../gateway/src/routes-diff';

const [a = 'routes.local.json', b = 'routes.prod.json'] = process.argv.slice(2);
const lines = diffJson(JSON.parse(readFileSync(a, 'utf8')), JSON.parse(readFileSync(b, 'utf8')));
process.stdout.write(`${a} → ${b}\n${lines.length ? lines.join('\n') : '(no differences)'}\n`);

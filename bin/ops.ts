/** `npm run ops -- <command>`: the operator commands (see gateway/src/ops.ts). */
import { ops } from '../gateway/src/ops';

ops(
  process.argv.slice(2),
  process.env,
  (l) => process.stdout.write(`${l}\n`),
  (l) => process.stderr.write(`${l}\n`),
).then((code) => process.exit(code));

/** `npm run keys -- create <tenant> [--rpm N] [--tpm N] [--models a,b] | list | revoke <key id or key>` (see gateway/src/keys-cli.ts). */
import { keysCli } from '../gateway/src/keys-cli';

keysCli(
  process.argv.slice(2),
  process.env,
  (l) => process.stdout.write(`${l}\n`),
  (l) => process.stderr.write(`${l}\n`),
).then((code) => process.exit(code));

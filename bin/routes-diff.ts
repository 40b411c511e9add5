/** `npm run routes:diff [a] [b]`: the difference of two routing maps (default: the local and the production one). */
import { routesDiffCli } from '../gateway/src/routes-diff';

process.exitCode = routesDiffCli(
  process.argv.slice(2),
  (l) => process.stdout.write(`${l}\n`),
  (l) => process.stderr.write(`${l}\n`),
);

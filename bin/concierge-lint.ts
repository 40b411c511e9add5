/**
 * `npm run concierge:lint -- [file]` (default: CONCIERGE_FILE or concierge.json): exit 0 only when
 * the file is valid and holds no placeholder; otherwise exit 1 and one line per problem,
 * `<JSON path>: <what is wrong>`; `--help` prints the usage, exit 0. Launch checklist step 1.
 */
import { asksForHelp } from '../gateway/src/help';
import { lintFile } from '../gateway/src/voice/config';

const USAGE = 'usage: npm run concierge:lint -- [file] (one file; default CONCIERGE_FILE or concierge.json)';
const args = process.argv.slice(2);
if (asksForHelp(args)) {
  process.stdout.write(`${USAGE}\n`);
} else if (args.length > 1 || args[0]?.startsWith('-')) {
  // One file or none: the drill's `--config FILE` linted a file named "--config", and a second file went unread.
  const got = args.map((a) => `"${a}"`).join(' ');
  process.stderr.write(`${USAGE}, got ${got}\n`);
  process.exitCode = 2;
} else {
  // An empty CONCIERGE_FILE counts as unset, as the gateway reads it (env.ts).
  const file = args[0] ?? (process.env.CONCIERGE_FILE || 'concierge.json');
  const problems = lintFile(file);
  for (const p of problems) process.stdout.write(`${p.path}: ${p.message}\n`);
  if (problems.length === 0) process.stdout.write(`${file}: clean\n`);
  process.exitCode = problems.length ? 1 : 0;
}

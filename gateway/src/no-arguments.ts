/**
 * `npm start`, `npm run worker` and `npm run lisbon` take every setting from the environment. An
 * argument (`npm start -- --help`, `-- --port 9000`) was ignored and the process started anyway, on
 * 8080 with a worker: `--help` (or `-h`) now prints the usage, anything else is refused before anything starts.
 */
import { asksForHelp } from './help';

const ENVIRONMENT = 'the environment values: docs/gateway.md#environment-values';
/** Each command's usage, and where its settings are described. */
const USAGE = {
  'npm start': `usage: npm start (no arguments: its settings are environment values, e.g. PORT=8081 npm start)\n${ENVIRONMENT}`,
  'npm run worker': `usage: npm run worker (no arguments: its settings are environment values, e.g. QUEUE_STORE_URL=redis://host:6379/0 npm run worker)\n${ENVIRONMENT}`,
  'npm run lisbon':
    'usage: npm run lisbon (no arguments: Redis when QUEUE_STORE_URL is set, else the embedded store)\nthe drill: docs/operations.md#the-lisbon-drill',
};

/** True when there are no arguments and the command may start; otherwise said, with the exit code set (0 for --help, 2). */
export function noArguments(command: keyof typeof USAGE, args: string[]): boolean {
  if (args.length === 0) return true;
  if (asksForHelp(args)) {
    process.stdout.write(`${USAGE[command]}\n`);
    process.exitCode = 0;
    return false;
  }
  process.stderr.write(`${command}: expected no arguments, got "${args.join(' ')}"\n${USAGE[command]}\n`);
  process.exitCode = 2;
  return false;
}

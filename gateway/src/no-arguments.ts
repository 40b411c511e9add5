/**
 * `npm start` and `npm run worker` take every setting from the environment. An argument
 * (`npm start -- --help`, `-- --port 9000`) was ignored and the process started anyway, on 8080 with
 * a worker: `--help` now prints the usage, anything else is refused before anything starts.
 */
const USAGE: Record<string, string> = {
  'npm start': 'usage: npm start (no arguments: its settings are environment values, e.g. PORT=8081 npm start)',
  'npm run worker':
    'usage: npm run worker (no arguments: its settings are environment values, e.g. QUEUE_STORE_URL=redis://host:6379/0 npm run worker)',
};
const WHERE = 'the environment values: docs/gateway.md#environment-values';

/** True when there are no arguments and the command may start; otherwise said, with the exit code set (0 for --help, 2). */
export function noArguments(command: 'npm start' | 'npm run worker', args: string[]): boolean {
  if (args.length === 0) return true;
  if (args.length === 1 && ['--help', '-h'].includes(args[0])) {
    process.stdout.write(`${USAGE[command]}\n${WHERE}\n`);
    process.exitCode = 0;
    return false;
  }
  process.stderr.write(`${command}: expected no arguments, got "${args.join(' ')}"\n${USAGE[command]}\n${WHERE}\n`);
  process.exitCode = 2;
  return false;
}

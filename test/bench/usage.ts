/**
 * A bench's arguments: `--help` or `-h` prints its usage and runs nothing, as every command of the
 * repository does; a bench takes its settings from the environment, so any other argument is refused
 * with the usage (exit 2) rather than ignored while a run of many minutes starts.
 */
import { asksForHelp } from '../../gateway/src/help';

export function benchUsage(usage: string): void {
  const args = process.argv.slice(2);
  if (asksForHelp(args)) {
    process.stdout.write(usage);
    process.exit(0);
  }
  if (args.length) {
    process.stderr.write(`unknown argument ${JSON.stringify(args[0])}: settings are environment variables\n${usage}`);
    process.exit(2);
  }
}

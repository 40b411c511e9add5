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

/** A setting refused: its name, what was expected and what it got, before anything runs (exit 2). */
function refuse(name: string, expected: string, got: string): never {
  process.stderr.write(`${name}: expected ${expected}, got ${JSON.stringify(got)}\n`);
  process.exit(2);
}

/**
 * A whole-number setting (unset or set empty: its default). Read with Number(), a typo ran as NaN
 * (`BENCH_ROWS=200k` generated no events and ended in a stack trace) or as 0.
 */
export function benchCount(name: string, fallback: number, min = 1): number {
  const text = process.env[name];
  if (text === undefined || text === '') return fallback;
  if (!/^\d+$/.test(text) || Number(text) < min) refuse(name, `a whole number from ${min}`, text);
  return Number(text);
}

/** One of a setting's values (unset or set empty: undefined); a typo ran nothing, or the default, with nothing said. */
export function benchChoice<T extends string>(name: string, choices: readonly T[]): T | undefined {
  const text = process.env[name];
  if (text === undefined || text === '') return undefined;
  if (!(choices as readonly string[]).includes(text)) refuse(name, `one of ${choices.join(', ')}`, text);
  return text as T;
}

/** The long-streams bench's settings (streams.ts), read by gateway.ts too: a bad one is named before its first part. */
export const streamsSettings = () => ({
  streams: benchCount('STREAMS', 1000),
  rounds: benchCount('ROUNDS', 6),
  promptKb: benchCount('STREAMS_PROMPT_KB', 0, 0),
});

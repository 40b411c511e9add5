/**
 * Whether a command's arguments ask for its usage: `--help` or `-h` anywhere among them, as in most
 * command-line tools, so `keys create acme --help` prints the usage rather than making a key.
 */
export const asksForHelp = (args: readonly string[]): boolean => args.some((a) => a === '--help' || a === '-h');

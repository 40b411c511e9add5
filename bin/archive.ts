/**
 * Command line of the archive tools (see docs/archive.md): `convert` (npm run archive), `expire`
 * (npm run archive:expire) and `report` (npm run report), each with its usage in USAGE below.
 * Exit status: 0 on success (and on --help, which reads and writes nothing), 1 on bad input (the
 * message says which line and field), 2 on usage.
 */
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { asksForHelp } from '../gateway/src/help';
import { convert } from '../archive/convert';
import { openDuck } from '../archive/duck';
import { DEFAULT_ARCHIVE_DAYS, MAX_ARCHIVE_DAYS, expireArchive } from '../archive/expire';
import { REPORTS, formatRows, runReport, type ReportName } from '../archive/reports';
import { callsFileProblem, voiceRollupSql } from '../archive/voice-rollups';
import { existsSync } from 'node:fs';

export const DEFAULT_ARCHIVE = '.data/archive';

const USAGE = {
  convert: 'usage: npm run archive -- <export.csv | export URL | gateway events CSV> [--out DIR] [--partition] [--replace]',
  expire: `usage: npm run archive:expire -- [--archive DIR] [--days ${DEFAULT_ARCHIVE_DAYS}] [--dry-run]`,
  report: `usage: npm run report -- daily|burn|export-daily [--archive DIR] [--format table|csv|json] | customers [--archive DIR] [--format table|csv|json] [--as-of YYYY-MM-DD] | voice [--calls FILE] [--since YYYY-MM-DD] [--format table|csv|json]`,
};
type Command = keyof typeof USAGE;

class UsageError extends Error {}

function today(): string {
  return new Date().toISOString().slice(0, 10);
}

/** parseArgs whose own refusals (an unknown option, a missing value) are usage errors, exit 2, followed by the command's usage. */
function parse<T extends ParseArgsConfig>(command: Command, config: T) {
  let parsed;
  try {
    parsed = parseArgs({ ...config, tokens: true });
  } catch (error) {
    throw new UsageError(`${(error as Error).message}\n${USAGE[command]}`);
  }
  // parseArgs keeps the last of an option given twice: `expire --days 180 … --days 18` kept 18 days
  // where 180 were meant, and removed the rest. Which of the two was meant is not ours to guess.
  const seen = new Set<string>();
  for (const token of parsed.tokens ?? [])
    if (token.kind === 'option') {
      if (seen.has(token.name)) throw new UsageError(`${token.rawName}: given twice; give it once\n${USAGE[command]}`);
      seen.add(token.name);
    }
  return parsed;
}

/** A calendar day as YYYY-MM-DD: 2026-02-30 has the shape but is no day (DuckDB would fail on it later). */
function day(option: string, value: string): string {
  const parsed = new Date(`${value}T00:00:00Z`);
  if (!/^\d{4}-\d{2}-\d{2}$/.test(value) || Number.isNaN(parsed.getTime()) || parsed.toISOString().slice(0, 10) !== value)
    throw new UsageError(`${option}: expected a day as YYYY-MM-DD, got "${value}"`);
  return value;
}

/**
 * `--days` (or ARCHIVE_RETENTION_DAYS, named as such) as text: digits only, so "", "10x" and "1e2" are
 * not numbers of days; and at most 100 years, so the cutoff stays a date (10000000000 overflowed it).
 */
function wholeDays(option: string, value: string): number {
  if (!/^\d+$/.test(value) || Number(value) < 1 || Number(value) > MAX_ARCHIVE_DAYS)
    throw new UsageError(`${option}: expected a whole number of days from 1 to ${MAX_ARCHIVE_DAYS}, got "${value}"`);
  return Number(value);
}

/**
 * A folder option's value: an empty one (`--out "$ARCHIVE_DIR"` with the variable unset) resolved to
 * the working directory, the repository under npm run, where a run wrote its day files and expiry
 * removed them.
 */
function folder(option: string, value: string): string {
  if (value === '') throw new UsageError(`${option}: expected a folder, got ""`);
  return value;
}

async function convertCommand(rest: string[]): Promise<void> {
  const { values, positionals } = parse('convert', {
    args: rest,
    allowPositionals: true,
    options: { out: { type: 'string', default: DEFAULT_ARCHIVE }, partition: { type: 'boolean' }, replace: { type: 'boolean' } },
  });
  if (positionals.length !== 1) throw new UsageError(USAGE.convert);
  const out = folder('--out', values.out!);
  const result = await convert(positionals[0], {
    out,
    partition: values.partition,
    replace: values.replace,
    log: (line) => process.stderr.write(`${line}\n`),
  });
  process.stdout.write(`${result.files.join('\n')}\n`);
}

function expireCommand(rest: string[]): void {
  const { values } = parse('expire', {
    args: rest,
    options: {
      archive: { type: 'string', default: DEFAULT_ARCHIVE },
      days: { type: 'string' },
      'dry-run': { type: 'boolean' },
    },
  });
  const archive = folder('--archive', values.archive!);
  const fromEnv = values.days === undefined && process.env.ARCHIVE_RETENTION_DAYS !== undefined;
  const days = fromEnv
    ? wholeDays('ARCHIVE_RETENTION_DAYS', process.env.ARCHIVE_RETENTION_DAYS!)
    : wholeDays('--days', values.days ?? String(DEFAULT_ARCHIVE_DAYS));
  const result = expireArchive(archive, days, new Date(), values['dry-run']);
  for (const line of result.left) process.stderr.write(`${line}\n`);
  for (const f of result.removed) process.stdout.write(`${values['dry-run'] ? 'would remove' : 'removed'} ${f}\n`);
  process.stderr.write(
    `${result.removed.length} file(s) of days before ${result.cutoff} ${values['dry-run'] ? 'to remove' : 'removed'}; ${result.kept} kept\n`,
  );
}

/** Runs one query and prints its rows in the format asked for. */
async function printQuery(sql: string, format: 'table' | 'csv' | 'json'): Promise<void> {
  const duck = await openDuck();
  try {
    const { columns, rows } = await duck.query(sql);
    process.stdout.write(formatRows(rows, columns, format));
  } finally {
    duck.close();
  }
}

async function reportCommand(rest: string[]): Promise<void> {
  const { values, positionals } = parse('report', {
    args: rest,
    allowPositionals: true,
    options: {
      archive: { type: 'string' },
      format: { type: 'string', default: 'table' },
      'as-of': { type: 'string' },
      since: { type: 'string' },
      calls: { type: 'string' },
    },
  });
  const format = values.format as 'table' | 'csv' | 'json';
  if (!['table', 'csv', 'json'].includes(format)) throw new UsageError(`--format: expected table, csv or json, got "${values.format}"`);
  if (positionals.length > 1) throw new UsageError(`report: expected one report name, got "${positionals.join(' ')}"`);
  // An option of the other kind of report was read by neither: `daily --since D` printed every day,
  // `voice --archive DIR` read .data/calls.csv.
  const voice = positionals[0] === 'voice';
  // Likewise --as-of, which only customers reads: `export-daily --as-of 2026-10-31` printed the days after it too.
  const takes = positionals[0] === 'customers' ? '--archive, --as-of, --format' : '--archive, --format';
  const other = (voice ? ['archive', 'as-of'] : ['calls', 'since']).find((o) => values[o as keyof typeof values] !== undefined);
  if (other && (voice || REPORTS.includes(positionals[0] as ReportName)))
    throw new UsageError(
      voice
        ? `--${other}: the voice report does not take it (it takes --calls, --since, --format)`
        : `--${other}: only the voice report takes it, not ${positionals[0]} (which takes ${takes})`,
    );
  if (values['as-of'] !== undefined && positionals[0] !== 'customers' && REPORTS.includes(positionals[0] as ReportName))
    throw new UsageError(
      `--as-of: only the customers report takes it (the as-of day and the 6 before), not ${positionals[0]}, which reads every day of the archive (it takes ${takes})`,
    );
  if (voice) {
    // An empty CALLS_CSV_FILE counts as unset, as the gateway reads it (env.ts).
    const calls = values.calls ?? (process.env.CALLS_CSV_FILE || '.data/calls.csv');
    const since = values.since === undefined ? null : day('--since', values.since);
    if (!existsSync(calls))
      throw new UsageError(
        `--calls ${calls}: no such file (the gateway writes .data/calls.csv when METER_URL is not set; or pass the meter's calls export)`,
      );
    const problem = callsFileProblem(calls);
    if (problem) throw new Error(`--calls ${calls}: ${problem}`);
    return printQuery(voiceRollupSql(calls, since), format);
  }
  const name = positionals[0] as ReportName;
  if (!REPORTS.includes(name)) throw new UsageError(`report: expected one of ${REPORTS.join(', ')}, voice; got "${positionals[0] ?? ''}"`);
  const archive = folder('--archive', values.archive ?? DEFAULT_ARCHIVE);
  const asOf = day('--as-of', values['as-of'] ?? today());
  // export-daily is the daily cost as CSV (docs/archive.md): CSV whatever --format says.
  return runReport(name, archive, asOf, (sql) => printQuery(sql, name === 'export-daily' ? 'csv' : format));
}

async function main(argv: string[]): Promise<void> {
  const [command, ...rest] = argv;
  const known = Object.hasOwn(USAGE, command ?? '');
  // Help before anything is read or written: `npm run archive -- x.csv --help` converts nothing.
  if (asksForHelp(known ? rest : argv)) {
    process.stdout.write(`${known ? USAGE[command as Command] : Object.values(USAGE).join('\n')}\n`);
    return;
  }
  if (command === 'convert') return convertCommand(rest);
  if (command === 'expire') return expireCommand(rest);
  if (command === 'report') return reportCommand(rest);
  throw new UsageError(Object.values(USAGE).join('\n'));
}

main(process.argv.slice(2)).catch((error: unknown) => {
  const message = error instanceof Error ? error.message : String(error);
  process.stderr.write(`${message}\n`);
  // A bad argument is 2; a bad input file (ArchiveInputError, which names the line and field) and anything else 1.
  process.exitCode = error instanceof UsageError ? 2 : 1;
});

/**
 * Reports over the Parquet archive (docs/archive.md: daily totals, per customer,
 * rolling burn, daily cost as CSV). Each report is one SQL query that DuckDB runs on the files;
 * the JavaScript side only formats the result.
 * Days are UTC days; "the last 7 days" are the as-of day and the 6 before, as in the meter.
 */
import { statSync } from 'node:fs';
import { resolve } from 'node:path';
import { csvField } from '../schema/csv-cell';
import { dayFiles } from './day-files';
import { lit, openDuck, pathLit } from './duck';
import { publishedView } from './publish';
import { unreadableDayFile } from './unreadable';

export const REPORTS = ['daily', 'customers', 'burn', 'export-daily'] as const;
export type ReportName = (typeof REPORTS)[number];

/** The archive's day files (day-files.ts), as a publish a killed run left half-done will leave them. */
function reportFiles(archive: string): string[] {
  const dir = resolve(archive);
  // A file (a day file given for its folder) too: said as archive:expire says it, not as the scandir error.
  if (!statSync(dir, { throwIfNoEntry: false })?.isDirectory()) throw new Error(`--archive ${archive}: no such folder`);
  // As a publish a killed run left half-done will leave it (publish.ts): no day twice, no event lost.
  const files = publishedView(
    dir,
    dayFiles(dir).map((f) => f.file),
  ).sort();
  if (files.length === 0) throw new Error(`--archive ${archive}: no day files (events_<yyyymmdd>.parquet, npm run archive writes them)`);
  return files;
}

/** The archive's events (files carry all columns). */
function eventsSource(archive: string): string {
  const files = reportFiles(archive);
  return `read_parquet([${files.map(pathLit).join(', ')}], hive_partitioning = false, union_by_name = true)`;
}

/**
 * Calls without a price (schema/unpriced.ts: `UNPRICED` among the `|`-separated codes of error_code):
 * their cost is not in the sums, or only the part known, so the reports count them beside the sums,
 * as the meter's alerts and Digest do.
 */
const UNPRICED_CALLS = `count_if(regexp_matches(error_code, '(^|[|])\\s*UNPRICED\\s*([|]|$)'))::DOUBLE AS unpriced_calls`;

export function reportSql(name: ReportName, archive: string, asOf: string): string {
  const ev = eventsSource(archive);
  const day = `CAST("timestamp" AS DATE)`;
  switch (name) {
    case 'daily':
      return `SELECT ${day} AS day, provider,
          CAST(sum(cost_usd) AS DOUBLE) AS cost_usd,
          sum(input_tokens)::DOUBLE AS input_tokens, sum(output_tokens)::DOUBLE AS output_tokens,
          sum(input_tokens + output_tokens)::DOUBLE AS tokens_total, ${UNPRICED_CALLS}
        FROM ${ev} GROUP BY ALL ORDER BY day, provider`;
    case 'customers':
      return `SELECT customer_id, CAST(sum(cost_usd) AS DOUBLE) AS cost_usd, count(*)::DOUBLE AS calls, ${UNPRICED_CALLS}
        FROM ${ev}
        WHERE ${day} BETWEEN DATE ${lit(asOf)} - INTERVAL 6 DAY AND DATE ${lit(asOf)}
        GROUP BY customer_id ORDER BY cost_usd DESC, customer_id`;
    case 'burn':
      // A calendar of every day from each customer's first to last event day, so days without
      // events count as zero and the 7-day window is 7 calendar days, not 7 rows.
      return `WITH daily AS (
          SELECT customer_id, ${day} AS day, sum(cost_usd) AS cost FROM ${ev} GROUP BY ALL
        ), span AS (
          SELECT customer_id, min(day) AS first, max(day) AS last FROM daily GROUP BY customer_id
        ), calendar AS (
          SELECT customer_id, CAST(unnest(generate_series(first, last, INTERVAL 1 DAY)) AS DATE) AS day FROM span
        )
        SELECT c.customer_id, c.day,
          CAST(coalesce(d.cost, 0) AS DOUBLE) AS cost_usd,
          CAST(sum(coalesce(d.cost, 0)) OVER (PARTITION BY c.customer_id ORDER BY c.day
            RANGE BETWEEN INTERVAL 6 DAY PRECEDING AND CURRENT ROW) AS DOUBLE) AS burn_7d_usd
        FROM calendar c LEFT JOIN daily d USING (customer_id, day)
        ORDER BY c.customer_id, c.day`;
    case 'export-daily':
      return `SELECT ${day} AS day, CAST(sum(cost_usd) AS DOUBLE) AS cost_usd FROM ${ev} GROUP BY ALL ORDER BY day`;
  }
}

/**
 * Runs a report with `run`. A run of `npm run archive` that moves its files in between the listing of
 * the day files and their reading (a day file removed, or a staged one moved into place) fails the
 * read with "No files found": the files are listed again and the report read again, a few times.
 * Another failure names the day file that cannot be read, if one cannot (unreadable.ts).
 */
export async function runReport<T>(name: ReportName, archive: string, asOf: string, run: (sql: string) => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await run(reportSql(name, archive, asOf));
    } catch (error) {
      if (attempt < 3 && /No files found that match the pattern/.test(String((error as Error).message))) continue;
      throw (await unreadableIn(archive)) ?? error;
    }
  }
}

/** The error naming a day file that cannot be read, or null (the report's own error then stands). */
async function unreadableIn(archive: string): Promise<Error | null> {
  let files: string[];
  try {
    files = reportFiles(archive);
  } catch {
    return null; // no such folder, no day files: said as such
  }
  const duck = await openDuck();
  try {
    const problem = await unreadableDayFile(duck, files);
    return problem ? new Error(problem) : null;
  } finally {
    duck.close();
  }
}

type Row = Record<string, unknown>;

function cell(value: unknown): string {
  if (value === null || value === undefined) return '';
  return String(value);
}

export function formatRows(rows: Row[], columns: string[], format: 'table' | 'csv' | 'json'): string {
  if (format === 'json') return JSON.stringify(rows, null, 2) + '\n';
  if (format === 'csv') return [columns.join(','), ...rows.map((r) => columns.map((c) => csvField(r[c])).join(','))].join('\n') + '\n';
  // Not Math.max(...rows): spread as arguments, a report past some 125,000 rows (burn: 2,000
  // customers over two months) overflowed the call stack and printed nothing.
  const widths = columns.map((c) => rows.reduce((w, r) => Math.max(w, cell(r[c]).length), c.length));
  // A column of numbers by any row's value: by the first row's, a cost empty there (its calls unpriced) aligned the column left.
  const numeric = columns.map((c) => rows.some((r) => typeof r[c] === 'number'));
  const line = (cells: string[]) => cells.map((v, i) => (numeric[i] ? v.padStart(widths[i]) : v.padEnd(widths[i]))).join('  ');
  return (
    [line(columns), line(widths.map((w) => '-'.repeat(w))), ...rows.map((r) => line(columns.map((c) => cell(r[c]))))].join('\n') + '\n'
  );
}

/**
 * `npm run archive -- <input> [--out DIR] [--partition] [--replace]`: event CSV → Parquet archive.
 *
 * Input: an export CSV of the meter (`exportArchive` file or `doGet?action=export`), the web app's
 * export URL, or the gateway's local events CSV: all have the 19-field header of the event record.
 * Output: `events_<yyyymmdd>.parquet` per UTC day (zstd), or with --partition Hive folders
 * `provider=<p>/day=<yyyymmdd>/events_<yyyymmdd>.parquet`.
 *
 * Every row is checked before anything is written; a bad row stops the run with its line and
 * field, and the archive is left as it was. A day already in the archive is rewritten as the
 * union of its stored rows and the input's rows, one row per event_id (the input wins), so
 * running the same input again changes nothing and late arrivals join their day; an event_id of
 * the input stored on another day is removed there. With --replace a day's data becomes exactly
 * the input's rows for that day.
 */
import { createWriteStream, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { CSV_HEADER, EVENT_FIELDS } from '../schema/event-record';
import { lit, openDuck, pathLit, type Duck } from './duck';
import { GUARD_ERROR, SELECT_TYPED, STAGE_CHECKS, restoredText, selectTypedGuarded } from './event-sql';
import { dayFiles, removeLeftoverParts, type DayFile } from './day-files';
import { EXPIRED_FILE, isCutoffDay, recordedCutoff } from './expire';
import { fileHead, firstLine, notText } from './file-head';
import { fileLines } from './file-lines';
import { findFragments, lineInInput, withoutFragments } from './fragments';
import { ABANDONED_MS, lockArchive } from './lock';
import { finishPublish, publishAll, publishPending } from './publish';
import { unreadableDayFile } from './unreadable';

export interface ConvertOptions {
  out: string;
  partition?: boolean;
  replace?: boolean;
  /** Progress lines (stderr in the CLI). */
  log?: (line: string) => void;
  /** Environment for the export URL's token. */
  env?: NodeJS.ProcessEnv;
}

export interface ConvertResult {
  rows: number;
  days: string[];
  files: string[];
}

class ArchiveInputError extends Error {}

/** Downloads the web app's export URL (following its 302 with GET) to a temporary file. */
async function download(url: string, env: NodeJS.ProcessEnv, dir: string): Promise<string> {
  const target = new URL(url);
  // fetch refuses such a URL, and its refusal quotes it whole: the password and the token with it.
  if (target.username || target.password)
    throw new ArchiveInputError('export URL: expected no user:password in it (the token goes in METER_TOKEN or ?token=)');
  const token = env.METER_TOKEN;
  if (token && !target.searchParams.has('token')) target.searchParams.set('token', token);
  // fetch's own refusal is "fetch failed" alone: the URL (its token hidden) and the cause are named.
  const response = await fetch(target, { redirect: 'follow' }).catch((error: Error) => {
    const cause = (error.cause as Error | undefined)?.message ?? error.message;
    throw new ArchiveInputError(`export URL ${shown(target.toString())} not reached (${cause})`);
  });
  if (!response.ok || !response.body) throw new ArchiveInputError(`export URL answered HTTP ${response.status}`);
  const file = join(dir, 'download.csv');
  // A connection cut mid-body rejects with "terminated" alone: what was cut, and why, are named.
  await pipeline(Readable.fromWeb(response.body as import('node:stream/web').ReadableStream), createWriteStream(file)).catch(
    (error: Error) => {
      const cause = (error.cause as Error | undefined)?.message ?? error.message;
      throw new ArchiveInputError(`export URL ${shown(target.toString())}: download cut short (${cause}); nothing was written`);
    },
  );
  const head = fileHead(file, 200);
  if (head.startsWith('{')) {
    // The web app answers errors (bad token, bad `since`) as JSON with HTTP 200.
    let message = head;
    try {
      message = JSON.parse(readFileSync(file, 'utf8')).error ?? head;
    } catch {
      /* keep the raw text */
    }
    throw new ArchiveInputError(`export URL refused: ${message}`);
  }
  return file;
}

/** Whether the input is an export URL (a scheme is read in any case, as URLs are), else a file. */
const isUrl = (input: string) => /^https?:\/\//i.test(input);

/** The input as progress lines and errors name it: an export URL's token is a secret (logs keep stderr). */
function shown(input: string): string {
  return isUrl(input) ? input.replace(/([?&]token=)[^&#]*/gi, '$1***') : input;
}

/**
 * Days of other stored files that hold an event_id of the input: the same event exported again with
 * another timestamp (a day's late arrivals, a re-sent event). The input wins there too, or reports
 * over several days would count the event twice.
 */
async function daysHolding(duck: Duck, others: DayFile[], input: string): Promise<string[]> {
  if (others.length === 0) return [];
  const rows = await duck.all<{ file: string }>(
    `SELECT DISTINCT filename AS file FROM read_parquet([${others.map((o) => pathLit(o.file)).join(', ')}], filename = true, hive_partitioning = false, union_by_name = true) ` +
      `WHERE event_id IN (SELECT event_id FROM ${input})`,
  );
  const holding = new Set(rows.map((r) => r.file));
  return [...new Set(others.filter((o) => holding.has(o.file)).map((o) => o.day))];
}

/** A run's scratch folder in the archive, named for its process and start time (ms). */
const SCRATCH = /^\.archive-tmp-\d+-(\d+)$/;

/**
 * Removes the scratch folders of killed runs (reports skip them, but they fill the disk). By age, not
 * by process: the archive may be a folder shared by machines, where a process id says nothing.
 */
function removeAbandonedScratch(out: string, now: number): void {
  for (const name of readdirSync(out)) {
    const started = SCRATCH.exec(name);
    if (started && now - Number(started[1]) > ABANDONED_MS) rmSync(join(out, name), { recursive: true, force: true });
  }
}

/** A local input that is missing or a folder: said before the archive folder is made (a typo left an empty one). */
function checkLocalInput(input: string): void {
  if (isUrl(input)) return;
  if (!existsSync(input)) throw new ArchiveInputError(`${input}: no such file`);
  if (!statSync(input).isFile()) throw new ArchiveInputError(`${input}: not a file (a folder?), expected an event CSV`);
}

export async function convert(input: string, options: ConvertOptions): Promise<ConvertResult> {
  checkLocalInput(input);
  const out = resolve(options.out);
  // Said as such, not as mkdir's EEXIST: a day file given for its folder.
  if (existsSync(out) && !statSync(out).isDirectory())
    throw new ArchiveInputError(`--out ${options.out}: not a folder (a file?), expected the archive folder`);
  const started = Date.now();
  mkdirSync(out, { recursive: true });
  // Two runs merging into one day would each write their own union: the first run's events lost.
  const unlock = lockArchive(out, started, (message) => new ArchiveInputError(message));
  try {
    // First: the publish of a run killed half-way names files in its scratch folder, which may be a day old.
    const finished = finishPublish(out);
    if (finished) options.log?.(finished);
    removeAbandonedScratch(out, started);
    for (const line of removeLeftoverParts(out)) options.log?.(line);
    return await convertLocked(input, out, options, started);
  } finally {
    unlock();
  }
}

/** Writes the rows of a query into Parquet files per day under a folder. */
type CopyDays = (select: string, to: string) => Promise<unknown>;

const COLUMNS = EVENT_FIELDS.map((f) => `"${f}"`).join(', ');

/**
 * A provider's folder name as DuckDB writes it (escaped, 3 bytes a byte past ASCII) may not fit the
 * file system's 255 bytes a name: a provider of 300 characters, or 30 of a non-Latin script, stopped
 * every `--partition` run of its day with "Failed to create directory". Such a provider's folder is
 * its first 12 characters and a hash of the whole; the files still hold the provider as it is. Every
 * provider whose folder DuckDB can write (provider_dir=<escaped>, escaped as url_encode does, within
 * 255 bytes) keeps its name: a provider of 220 characters had its folder moved to the short name.
 */
const PROVIDER_FOLDER_MAX = 255 - 'provider_dir='.length;
const PROVIDER_FOLDER = `CASE WHEN strlen(url_encode(provider)) <= ${PROVIDER_FOLDER_MAX} THEN provider ELSE left(provider, 12) || '~' || left(md5(provider), 16) END`;

/**
 * Partitions (day files) one COPY writes at most when a single one ran out of memory. DuckDB keeps a
 * buffer for every partition it writes, and some 3,000 (a gateway CSV of several years, or of a year
 * of ten providers with --partition) passed the 2 GB limit: "Out of Memory Error", nothing archived.
 */
const PARTITIONS_PER_COPY = 1000;

function dayCopier(duck: Duck, partition: boolean): CopyDays {
  // One pass writes every day. The partition columns stay inside the files, so each file
  // describes itself; the flat layout drops `day` and keeps the 19 fields. Partitioned, the
  // folders are named by columns of their own (provider_dir=…/day_dir=…, see publish), so the
  // files carry the provider itself and not its folder's name.
  const day = `strftime("timestamp", '%Y%m%d')`;
  // Into a folder an earlier group wrote: its day folders are other days', left as they are.
  const copy = (select: string, to: string, more = '') =>
    duck.run(
      partition
        ? `COPY (SELECT ${COLUMNS}, ${day} AS day, ${PROVIDER_FOLDER} AS provider_dir, ${day} AS day_dir FROM (${select})) TO ${lit(to)} ` +
            `(FORMAT parquet, COMPRESSION zstd, PARTITION_BY (provider_dir, day_dir), WRITE_PARTITION_COLUMNS false, FILENAME_PATTERN 'part_{i}'${more})`
        : `COPY (SELECT ${COLUMNS}, ${day} AS day FROM (${select})) TO ${lit(to)} (FORMAT parquet, COMPRESSION zstd, ` +
            `PARTITION_BY (day), WRITE_PARTITION_COLUMNS false, FILENAME_PATTERN 'part_{i}'${more})`,
    );
  return async (select, to) => {
    try {
      await copy(select, to);
    } catch (error) {
      if (!/Out of Memory Error/.test(String((error as Error).message))) throw error;
      rmSync(to, { recursive: true, force: true });
      // Again in groups of whole days, each its own COPY (one read of the input each).
      const perDay = await duck.all<{ d: string; n: number }>(
        `SELECT ${day} AS d, count(DISTINCT ${partition ? PROVIDER_FOLDER : 1})::INTEGER AS n FROM (${select}) GROUP BY d ORDER BY d`,
      );
      for (let i = 0; i < perDay.length;) {
        let n = 0;
        let j = i;
        while (j < perDay.length && (j === i || n + perDay[j].n <= PARTITIONS_PER_COPY)) n += perDay[j++].n;
        const days = `${day} BETWEEN ${lit(perDay[i].d)} AND ${lit(perDay[j - 1].d)}`;
        await copy(`SELECT * FROM (${select}) WHERE ${days}`, to, ', OVERWRITE_OR_IGNORE');
        i = j;
      }
    }
  };
}

/**
 * Where a header differs from the event record's: a column added to the export (or renamed) was
 * one of 19 names in two lines of 200 characters, the new one cut off at the end.
 */
function headerProblem(header: string): string {
  const got = header.split(',');
  const at = EVENT_FIELDS.findIndex((f, i) => got[i] !== f);
  if (at < 0) return `column ${EVENT_FIELDS.length + 1} "${got[EVENT_FIELDS.length].slice(0, 100)}" is not a field of the event record`;
  return got[at] === undefined
    ? `no column ${at + 1}, expected "${EVENT_FIELDS[at]}"`
    : `column ${at + 1}: expected "${EVENT_FIELDS[at]}", got "${got[at].slice(0, 100)}"`;
}

/** The input as a local file with the event header (a URL downloaded into `work` first). */
async function inputFile(input: string, name: string, options: ConvertOptions, work: string): Promise<string> {
  const file = isUrl(input) ? await download(input, options.env ?? process.env, work) : resolve(input);
  if (!existsSync(file) || !statSync(file).isFile()) throw new ArchiveInputError(`${name}: no such file`);
  const header = firstLine(file);
  if (header !== CSV_HEADER) {
    const binary = notText(header);
    if (binary) throw new ArchiveInputError(`${name}: ${binary}: expected an event CSV, with the event header "${CSV_HEADER}"`);
    throw new ArchiveInputError(
      `${name}: line 1: expected the event header "${CSV_HEADER}", got "${header.slice(0, 200)}" (${headerProblem(header)})`,
    );
  }
  return file;
}

/**
 * Pass 1, the common case in one streaming read: check and type each row on its way from the CSV
 * into Parquet files per day in `to`. A bad row stops it (nothing published). `lineOf` gives a line
 * of `csvSource` as a line of the input (they differ when fragments were left out of it).
 */
async function checkedPass(
  duck: Duck,
  copyDays: CopyDays,
  file: string,
  name: string,
  to: string,
  lineOf: (line: number) => number = (line) => line,
): Promise<void> {
  try {
    await copyDays(selectTypedGuarded(readCsv(file)), to);
  } catch (error) {
    const message = String((error as Error).message);
    // A line the CSV reader cannot split into the 19 fields (a download cut short): DuckDB's own
    // message suggests options of the reader, so it is said here in the terms of the other errors.
    const csvLine = /CSV Error on Line: (\d+)/.exec(message);
    if (csvLine) {
      const at = Number(csvLine[1]);
      const line = (await fileLines(file, [at], 'counted')).get(at)!;
      throw new CsvLineError(`${name}: line ${lineOf(line)}: ${csvProblem(message)}; nothing was written`);
    }
    if (!message.includes(GUARD_ERROR)) throw error;
    await throwRowProblems(duck, file, name, lineOf);
  }
}

/** A line DuckDB's CSV reader refused: the one error after which the input is searched for fragments. */
class CsvLineError extends ArchiveInputError {}

/**
 * Pass 1 over the input, and when its reader refused a line, once more without the rows a full disk
 * cut short in the gateway's CSV (archive/fragments.ts), if those were what it refused: said on
 * stderr, line by line. Returns the CSV source the run goes on with.
 */
async function checkedInput(duck: Duck, copyDays: CopyDays, file: string, name: string, first: string, work: string, run: RunLog) {
  try {
    await checkedPass(duck, copyDays, file, name, first);
    return readCsv(file);
  } catch (error) {
    if (!(error instanceof CsvLineError)) throw error;
    const fragments = await findFragments(file);
    if (!fragments?.length) throw error;
    for (const f of fragments)
      run.log(`${name}: line ${f.line}: part of a row a full disk cut short (the row is whole on line ${f.wholeAt}): skipped`);
    const mended = join(work, 'without-fragments.csv');
    withoutFragments(file, mended, fragments);
    rmSync(first, { recursive: true, force: true });
    await checkedPass(duck, copyDays, mended, name, first, (line) => lineInInput(line, fragments));
    return readCsv(mended);
  }
}

/** What pass 1 wrote, and the stored files its days touch. */
interface MergePlan {
  /** The input's rows as a DuckDB source: pass 1's files, or the table of one row per event_id when some repeat. */
  source: string;
  rows: number;
  repeated: number;
  days: string[];
  /** Every stored file of a day the input rewrites: a day's rows are replaced as a whole. */
  existing: string[];
  /** Stored files of other days that held an event_id of the input: rewritten without it. */
  moved: string[];
  movedDays: number;
}

async function mergePlan(
  duck: Duck,
  first: string,
  out: string,
  csvSource: string,
  run: RunLog,
  horizon: string | null,
): Promise<MergePlan> {
  const written = `read_parquet([${parquetUnder(first).map(pathLit).join(', ')}], hive_partitioning = false, union_by_name = true)`;
  const [{ n, repeated }] = await duck.all<{ n: number; repeated: number }>(
    `SELECT count(*)::INTEGER AS n, (count(*) - count(DISTINCT event_id))::INTEGER AS repeated FROM ${written}`,
  );
  let source = written;
  if (repeated > 0) {
    // One row per event_id, the last of each (which needs line order): the input's days are those of
    // the rows kept. A day that only a row replaced later in the input was on is not one of them:
    // with --replace it was emptied, its stored events gone, though no row of the input was for it.
    run.log(`${repeated} repeated event_id(s) in the input: the last of each is kept`);
    await duck.run(`CREATE TABLE staged AS SELECT row_number() OVER () + 1 AS line, * FROM ${csvSource}`);
    await duck.run(
      `CREATE TABLE input AS SELECT * EXCLUDE (line) FROM (${SELECT_TYPED} WHERE line IN (SELECT max(line) FROM staged GROUP BY event_id))` +
        (horizon ? ` WHERE "timestamp" >= TIMESTAMP ${lit(horizon)}` : ''),
    );
    source = 'input';
  }
  const days = n
    ? (await duck.all<{ d: string }>(`SELECT DISTINCT strftime("timestamp", '%Y%m%d') AS d FROM ${source} ORDER BY d`)).map((r) => r.d)
    : [];
  const stored = dayFiles(out);
  const inputDays = new Set(days);
  const others = stored.filter((s) => !inputDays.has(s.day));
  const otherDays = new Set(await daysHolding(duck, others, source));
  const existing = stored.filter((s) => inputDays.has(s.day)).map((s) => s.file);
  const moved = stored.filter((s) => otherDays.has(s.day)).map((s) => s.file);
  return { source, rows: n, repeated, days, existing, moved, movedDays: otherDays.size };
}

/**
 * Pass 2, only when needed: one row per event_id within the input (mergePlan's table), and the union with the stored rows kept beside the input's: the input's days
 * unless --replace, and the other days that held an event_id of the input, always (--replace is
 * about the input's days only). Returns the folder to publish, or null when pass 1's will do.
 */
async function mergedPass(duck: Duck, copyDays: CopyDays, plan: MergePlan, work: string, run: RunLog, replace?: boolean) {
  const keep = [...(plan.existing.length > 0 && !replace ? plan.existing : []), ...plan.moved];
  if (plan.repeated === 0 && keep.length === 0) return null;
  const source = plan.source;
  const kept = keep.length
    ? ` UNION ALL SELECT ${COLUMNS} FROM read_parquet([${keep.map(pathLit).join(', ')}], hive_partitioning = false, union_by_name = true) WHERE event_id NOT IN (SELECT event_id FROM ${source})`
    : '';
  if (keep.length) run.log(`merging with ${keep.length} stored file(s) (${run.elapsed()})`);
  const staged = join(work, 'pass2');
  await copyDays(`SELECT ${COLUMNS} FROM ${source}${kept}`, staged);
  return staged;
}

/**
 * The cutoff `archive:expire` last removed days before (expire.ts), or null when it never ran here.
 * A file that does not hold a day (edited by hand) is said and read as none.
 */
function expiredBefore(out: string, run: RunLog): string | null {
  const text = recordedCutoff(out);
  if (text === null || isCutoffDay(text)) return text;
  run.log(
    `${join(out, EXPIRED_FILE)}: expected the day archive:expire removed days before (YYYY-MM-DD), got "${text.slice(0, 40)}": no day skipped`,
  );
  return null;
}

/**
 * Pass 1's files of days archive:expire removed, dropped with a line saying so: archived again, the
 * expired days came back with each run over an input that still holds them (the gateway's CSV).
 */
async function skipExpired(duck: Duck, first: string, horizon: string, run: RunLog): Promise<void> {
  const before = horizon.replace(/-/g, '');
  const old = parquetUnder(first).filter((f) => (/day(?:_dir)?=(\d{8})\/[^/]+$/.exec(f)?.[1] ?? before) < before);
  if (old.length === 0) return;
  const [{ n, days }] = await duck.all<{ n: number; days: number }>(
    `SELECT count(*)::INTEGER AS n, count(DISTINCT strftime("timestamp", '%Y%m%d'))::INTEGER AS days FROM read_parquet([${old.map(pathLit).join(', ')}], hive_partitioning = false)`,
  );
  for (const f of old) rmSync(f);
  run.log(
    `${n} row(s) of ${days} day(s) before ${horizon} skipped: archive:expire removed those days (${EXPIRED_FILE} in the archive folder; remove it to archive them again)`,
  );
}

/** A run's progress lines, with the time since it started. */
interface RunLog {
  log: (line: string) => void;
  elapsed: () => string;
}

/** The Parquet files under a folder of the run's, listed here: as a DuckDB glob, an archive folder named `archive [eu]` matched nothing. */
const parquetUnder = (dir: string) =>
  existsSync(dir)
    ? readdirSync(dir, { recursive: true })
        .map(String)
        .filter((f) => f.endsWith('.parquet'))
        .map((f) => join(dir, f))
    : [];

/** The run itself, while it holds the archive folder. */
async function convertLocked(input: string, out: string, options: ConvertOptions, started: number): Promise<ConvertResult> {
  const run: RunLog = { log: options.log ?? (() => {}), elapsed: () => `${((Date.now() - started) / 1000).toFixed(1)}s` };
  const work = join(out, `.archive-tmp-${process.pid}-${Date.now()}`);
  mkdirSync(work);
  const duck = await openDuck();
  try {
    const name = shown(input);
    const file = await inputFile(input, name, options, work);
    run.log(`reading ${name} (${(statSync(file).size / 1e6).toFixed(1)} MB)`);
    const partition = options.partition ?? false;
    const copyDays = dayCopier(duck, partition);
    const first = join(work, 'pass1');
    const csvSource = await checkedInput(duck, copyDays, file, name, first, work, run);
    const horizon = expiredBefore(out, run);
    if (horizon) await skipExpired(duck, first, horizon, run);
    // A file with only its header (the export URL on a day without events) writes no file, and
    // read_parquet of nothing is an error: there is nothing to archive.
    if (parquetUnder(first).length === 0) {
      run.log(`read and checked 0 rows: nothing to archive (${run.elapsed()})`);
      return { rows: 0, days: [], files: [] };
    }
    const { plan, staged } = await withStoredFiles(duck, out, async () => {
      const plan = await mergePlan(duck, first, out, csvSource, run, horizon);
      run.log(`read and checked ${plan.rows} rows, ${plan.days.length} day(s) (${run.elapsed()})`);
      if (plan.moved.length > 0) run.log(`event_id(s) of the input stored on ${plan.movedDays} other day(s): removed there`);
      return { plan, staged: (await mergedPass(duck, copyDays, plan, work, run, options.replace)) ?? first };
    });
    const files = publish(staged, out, [...plan.existing, ...plan.moved], partition);
    run.log(`archived ${plan.rows} input rows into ${files.length} file(s) for ${plan.days.length} day(s) (${run.elapsed()})`);
    return { rows: plan.rows, days: plan.days, files };
  } finally {
    duck.close();
    // A publish that failed half-way (publish.ts) still needs its staged files: the next run finishes it.
    if (!publishPending(out)) rmSync(work, { recursive: true, force: true });
  }
}

/**
 * The merge, which reads the stored day files: one DuckDB cannot read (cut short, a page damaged)
 * is named, with what was expected of it (unreadable.ts), and nothing is written.
 */
async function withStoredFiles<T>(duck: Duck, out: string, merge: () => Promise<T>): Promise<T> {
  try {
    return await merge();
  } catch (error) {
    const problem = await unreadableDayFile(
      duck,
      dayFiles(out).map((f) => f.file),
    ).catch(() => null);
    throw problem ? new ArchiveInputError(`${problem}; nothing was written`) : error;
  }
}

/** The CSV as text columns (typing is ours, so the errors can say what was expected), text cells as sent. */
function readCsv(file: string): string {
  const columns = EVENT_FIELDS.map((f) => `${lit(f)}: 'VARCHAR'`).join(', ');
  return restoredText(
    `read_csv(${pathLit(file)}, header = true, auto_detect = false, delim = ',', quote = '"', escape = '"', ` +
      `columns = {${columns}}, all_varchar = true, null_padding = false, strict_mode = true)`,
  );
}

/** What DuckDB's CSV reader found wrong with a line, without the reader options it suggests. */
function csvProblem(message: string): string {
  const columns = /Expected Number of Columns: (\d+) Found: (\d+)/.exec(message);
  if (columns) return `expected ${columns[1]} fields, got ${columns[2]}`;
  if (/unterminated quote/i.test(message)) return 'a quoted field without its closing quote';
  const lines = message.split('\n').map((l) => l.trim());
  return lines.find((l, i) => i > 1 && l && !l.startsWith('Possible fixes')) ?? 'not a CSV line';
}

/** Slow path, only for a file that failed the check: every problem with its line (header = line 1). */
async function throwRowProblems(duck: Duck, file: string, input: string, lineOf: (line: number) => number): Promise<never> {
  await duck.run(`CREATE TABLE staged AS SELECT row_number() OVER () + 1 AS line, * FROM ${readCsv(file)}`);
  const bad = await duck.all<{ line: string; field: string; problem: string }>(`${STAGE_CHECKS} ORDER BY line LIMIT 20`); // line: a BIGINT, as text
  const at = await fileLines(
    file,
    bad.map((b) => Number(b.line)),
    'skipped',
  );
  const lines = bad.map((b) => `line ${lineOf(at.get(Number(b.line))!)}, ${b.field}: ${b.problem}`);
  throw new ArchiveInputError(
    `${input}: ${bad.length === 20 ? 'first 20 problems' : `${bad.length} problem(s)`}; nothing was written\n${lines.join('\n')}`,
  );
}

/**
 * Moves the staged files into the archive. A file of the same name is replaced by the rename
 * itself (atomic); stored files of the merged days that were not overwritten are removed last. The
 * whole is one publish (publish.ts): a run killed half-way is finished by the next.
 */
function publish(staged: string, out: string, replaced: string[], partition: boolean): string[] {
  const written: string[] = [];
  const walk = (dir: string) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) walk(path);
      else if (entry.name.endsWith('.parquet')) written.push(path);
    }
  };
  walk(staged);
  written.sort();
  const renames: [string, string][] = [];
  const perDir = new Map<string, number>();
  for (const src of written) {
    // DuckDB writes day=<yyyymmdd>/part_N.parquet; the archive's names are events_<yyyymmdd>[_N].parquet,
    // flat in the folder, or under provider=<p>/day=<yyyymmdd>/ when partitioned.
    // Partitioned, pass 1 and 2 write provider_dir=<p>/day_dir=<yyyymmdd>/ (dayCopier).
    let rel = src.slice(staged.length + 1);
    const day = /day(?:_dir)?=(\d{8})\/[^/]+$/.exec(rel)?.[1];
    const folder = partition
      ? dirname(rel)
          .replace(/^provider_dir=/, 'provider=')
          .replace(/\/day_dir=(?=\d{8}$)/, '/day=')
      : '';
    const n = (perDir.get(dirname(rel)) ?? 0) + 1;
    perDir.set(dirname(rel), n);
    rel = join(folder, n === 1 ? `events_${day}.parquet` : `events_${day}_${n}.parquet`);
    const dest = join(out, rel);
    renames.push([src, dest]);
  }
  const placed = renames.map(([, dest]) => dest);
  const kept = new Set(placed);
  publishAll(
    out,
    renames,
    replaced.filter((f) => !kept.has(f)),
  );
  return placed;
}

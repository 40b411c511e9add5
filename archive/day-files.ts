/**
 * The archive's own files, one definition for every command: day files `events_<yyyymmdd>[_N].parquet`
 * flat in the archive folder, or under `provider=<p>/day=<yyyymmdd>/` when partitioned. Nothing else
 * under the folder is the archive's (an operator's `backup/`, a killed run's `.archive-tmp-…`, a file
 * of another name): a run does not merge with it, reports do not count it, expiry does not remove it.
 * A day file or a partition folder may be a symlink (kept on another disk): it counts as what it points to.
 *
 * In a folder on another file system a run copies a day file beside its place first
 * (`events_<yyyymmdd>[_N].parquet.<pid>.part`), then renames it over it; a run killed in between
 * leaves that copy, and the next run, holding the archive's lock, removes it (`removeLeftoverParts`).
 */
import { existsSync, lstatSync, readdirSync, rmdirSync, statSync, type Dirent } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { fileAge, pidAlive, unlinkIfThere } from '../gateway/src/pid-lock';
import { ABANDONED_MS } from './lock';

/** A day file's name, as `npm run archive` writes it. */
const DAY_FILE = /^events_(\d{8})(_\d+)?\.parquet$/;
/**
 * The folder names `archive --partition` makes: provider=<p>, and day=<yyyymmdd> inside it. The
 * provider may be empty (a cell cleared by hand in the events tab): DuckDB writes `provider=`.
 */
const PROVIDER_DIR = /^provider=.*$/;
const PARTITION_DIR = /^(provider=.*|day=\d{8})$/;
/** A day file's copy beside its place, named for the run's process (never read as a day file). */
const PART_FILE = /^events_\d{8}(_\d+)?\.parquet\.(\d+)\.part$/;

/** A day file of the archive and the UTC day (yyyymmdd) it holds. */
export interface DayFile {
  file: string;
  day: string;
}

const entries = (dir: string) => readdirSync(dir, { withFileTypes: true });
/** A link that leads nowhere: to nothing, in a loop, or through a file. */
const NOWHERE = new Set(['ENOENT', 'ELOOP', 'ENOTDIR']);
/**
 * What an entry is, a symlink taken as what it points to: an operator may keep a day file, or a
 * provider's folder, on another disk and link it in (a broken link is nothing).
 */
function kindOf(dir: string, e: Dirent): Pick<Dirent, 'isFile' | 'isDirectory'> | undefined {
  if (!e.isSymbolicLink()) return e;
  try {
    return statSync(join(dir, e.name));
  } catch (error) {
    if (NOWHERE.has((error as NodeJS.ErrnoException).code ?? '')) return undefined;
    throw error;
  }
}
const subdirs = (dir: string, shape: RegExp) =>
  entries(dir)
    .filter((e) => shape.test(e.name) && kindOf(dir, e)?.isDirectory())
    .map((e) => join(dir, e.name));

/** The folders that hold day files in either layout. */
const places = (root: string) => [root, ...subdirs(root, PROVIDER_DIR).flatMap((p) => subdirs(p, /^day=\d{8}$/))];

/** The archive's day files in either layout (none when the folder does not exist yet). */
export function dayFiles(root: string): DayFile[] {
  if (!existsSync(root)) return [];
  const files: DayFile[] = [];
  for (const dir of places(root))
    for (const entry of entries(dir)) {
      const day = DAY_FILE.exec(entry.name)?.[1];
      if (day && kindOf(dir, entry)?.isFile()) files.push({ file: join(dir, entry.name), day });
    }
  return files;
}

/**
 * After the archive removed `file`: its partition folders, innermost first, each only if that
 * left it empty. Stops at the first folder that is not a partition folder or still holds anything.
 */
export function removeEmptiedPartitions(root: string, file: string): void {
  for (let dir = dirname(file); dir !== root && dir.startsWith(`${root}/`) && PARTITION_DIR.test(basename(dir)); dir = dirname(dir)) {
    // A folder linked in is the operator's, like the disk it points to: it stays.
    if (lstatSync(dir).isSymbolicLink() || readdirSync(dir).length > 0) return;
    rmdirSync(dir);
  }
}

/** Where this run copies a day file before renaming it to `dest`. */
export const partBeside = (dest: string) => `${dest}.${process.pid}.part`;

/**
 * Removes the copies killed runs left beside their day files. Called holding the archive's lock, so
 * no run of this archive is writing one; a copy named for another process running here is left
 * (a folder linked into two archives: that run may be copying it now) unless older than a day.
 * One that cannot be removed (its folder made read-only since) is left too, never read as a day
 * file: the run goes on, and says so in the lines returned.
 */
export function removeLeftoverParts(root: string): string[] {
  const left: string[] = [];
  for (const dir of places(root))
    for (const entry of entries(dir)) {
      const pid = Number(PART_FILE.exec(entry.name)?.[2]);
      if (!pid || !entry.isFile()) continue;
      const file = join(dir, entry.name);
      if (pid !== process.pid && pidAlive(pid) && fileAge(file) < ABANDONED_MS) continue;
      try {
        unlinkIfThere(file); // rmSync would name EPERM ENOTDIR (it tries the file as a folder)
      } catch (error) {
        const code = (error as NodeJS.ErrnoException).code ?? 'error';
        left.push(`left ${file}: could not remove it (${code}); it is never read as a day file, remove it by hand`);
      }
    }
  return left;
}

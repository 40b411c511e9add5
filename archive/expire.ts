/**
 * `npm run archive:expire`: removes archive files whose day is older than the long window
 * (180 days by the specification). A file's day is in its name (`events_<yyyymmdd>…parquet`), so nothing
 * has to be opened. The object-store equivalent is a lifecycle rule (see README).
 *
 * Only what the archive writes is touched: day files flat in the folder or in its partition
 * folders (`provider=<p>/day=<yyyymmdd>/`), and a partition folder only once removing its last
 * file emptied it. Other files and folders in the archive folder, empty or not, stay.
 *
 * It holds the archive's lock as `npm run archive` does: a run merging an old day would otherwise
 * have its stored file removed under it and write the day back.
 */
import { readdirSync, rmdirSync, rmSync, statSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import { lockArchive } from './lock';

export const DEFAULT_ARCHIVE_DAYS = 180;
/** The longest window taken: 100 years. Beyond it the cutoff leaves the dates a day file can name (1e10 days overflows a Date). */
export const MAX_ARCHIVE_DAYS = 36_500;
/** A flat day file's name, as `archive` writes it. */
export const DAY_FILE = /^events_(\d{8})(_\d+)?\.parquet$/;
/** The folder names `archive --partition` makes: provider=<p>, and day=<yyyymmdd> inside it. */
const PARTITION_DIR = /^(provider=.+|day=\d{8})$/;

export interface ExpireResult {
  removed: string[];
  kept: number;
  cutoff: string;
}

const subdirs = (dir: string, shape: RegExp) =>
  readdirSync(dir, { withFileTypes: true })
    .filter((e) => e.isDirectory() && shape.test(e.name))
    .map((e) => join(dir, e.name));

/**
 * After the archive removed `file`: its partition folders, innermost first, each only if that
 * left it empty. Stops at the first folder that is not a partition folder or still holds anything.
 */
export function removeEmptiedPartitions(root: string, file: string): void {
  for (let dir = dirname(file); dir !== root && dir.startsWith(`${root}/`) && PARTITION_DIR.test(basename(dir)); dir = dirname(dir)) {
    if (readdirSync(dir).length > 0) return;
    rmdirSync(dir);
  }
}

/** Removes files of days strictly before `today − days` (UTC). `dryRun` only lists them. */
export function expireArchive(archive: string, days: number, now = new Date(), dryRun = false): ExpireResult {
  if (!Number.isInteger(days) || days < 1 || days > MAX_ARCHIVE_DAYS)
    throw new Error(`--days: expected a whole number from 1 to ${MAX_ARCHIVE_DAYS}, got ${days}`);
  const today = Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate());
  const cutoff = new Date(today - days * 86_400_000).toISOString().slice(0, 10).replace(/-/g, '');
  const root = resolve(archive);
  // Said as report says it (a mistyped --archive), not as the scandir error.
  if (!statSync(root, { throwIfNoEntry: false })?.isDirectory()) throw new Error(`--archive ${archive}: no such folder`);
  // A dry run removes nothing, so it does not hold the folder (nor refuse a nightly run).
  if (dryRun) return expireDays(root, cutoff, true);
  const unlock = lockArchive(root, Date.now(), (message) => new Error(message));
  try {
    return expireDays(root, cutoff, false);
  } finally {
    unlock();
  }
}

function expireDays(root: string, cutoff: string, dryRun: boolean): ExpireResult {
  const removed: string[] = [];
  let kept = 0;
  // The archive's own places: the folder itself (flat layout) and provider=<p>/day=<yyyymmdd>/.
  const places = [root, ...subdirs(root, /^provider=.+$/).flatMap((p) => subdirs(p, /^day=\d{8}$/))];
  for (const dir of places) {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const day = entry.isFile() ? DAY_FILE.exec(entry.name)?.[1] : undefined;
      if (!day) continue;
      const path = join(dir, entry.name);
      if (day >= cutoff) {
        kept++;
        continue;
      }
      removed.push(path);
      if (dryRun) continue;
      rmSync(path);
      removeEmptiedPartitions(root, path);
    }
  }
  return { removed, kept, cutoff: `${cutoff.slice(0, 4)}-${cutoff.slice(4, 6)}-${cutoff.slice(6)}` };
}

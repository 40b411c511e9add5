/**
 * `npm run archive:expire`: removes archive files whose day is older than the long window
 * (180 days unless --days or ARCHIVE_RETENTION_DAYS says otherwise). A file's day is in its name
 * (`events_<yyyymmdd>…parquet`), so nothing has to be opened. The object-store equivalent is a lifecycle rule (see README).
 *
 * Only what the archive writes is touched: day files flat in the folder or in its partition
 * folders (`provider=<p>/day=<yyyymmdd>/`), and a partition folder only once removing its last
 * file emptied it. Other files and folders in the archive folder, empty or not, stay.
 *
 * It holds the archive's lock as `npm run archive` does: a run merging an old day would otherwise
 * have its stored file removed under it and write the day back.
 */
import { existsSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { dayFiles, removeEmptiedPartitions, removeLeftoverParts } from './day-files';
import { lockArchive } from './lock';
import { finishPublish } from './publish';

export const DEFAULT_ARCHIVE_DAYS = 180;
/**
 * The latest cutoff of the expiries (`YYYY-MM-DD`: days before it were removed), which `npm run archive`
 * reads: it skips input rows of those days, or archiving the gateway's ever-growing events CSV wrote
 * every expired day back.
 */
export const EXPIRED_FILE = '.archive-expired';

/** The cutoff recorded in the archive `root` (EXPIRED_FILE's text), or null when none was. */
export function recordedCutoff(root: string): string | null {
  const file = join(root, EXPIRED_FILE);
  return existsSync(file) ? readFileSync(file, 'utf8').trim() : null;
}
/** A cutoff as EXPIRED_FILE holds it: a day, YYYY-MM-DD. */
export const isCutoffDay = (text: string) => /^\d{4}-\d{2}-\d{2}$/.test(text);
/** The longest window taken: 100 years. Beyond it the cutoff leaves the dates a day file can name (1e10 days overflows a Date). */
export const MAX_ARCHIVE_DAYS = 36_500;
export interface ExpireResult {
  removed: string[];
  /** Lines for stderr: a publish a killed run left, finished (publish.ts); copies killed runs left that could not be removed (day-files.ts). */
  left: string[];
  kept: number;
  cutoff: string;
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
  if (dryRun) return { ...expireDays(root, cutoff, true), left: [] };
  const unlock = lockArchive(root, Date.now(), (message) => new Error(message));
  try {
    // First: the publish a killed run left half-done (publish.ts), then its copies left in a day
    // folder, which would keep that folder from being emptied.
    const finished = finishPublish(root);
    const left = [...(finished ? [finished] : []), ...removeLeftoverParts(root)];
    const result = expireDays(root, cutoff, false);
    // The later of this cutoff and the one recorded: after a shorter window's run, the nightly run's
    // longer one removes nothing, and recorded, it let the archive write those days back.
    const recorded = recordedCutoff(root) ?? '';
    const kept = isCutoffDay(recorded) && recorded > result.cutoff ? recorded : result.cutoff;
    // Whole or not at all: written beside, then renamed.
    writeFileSync(join(root, `${EXPIRED_FILE}.tmp`), `${kept}\n`);
    renameSync(join(root, `${EXPIRED_FILE}.tmp`), join(root, EXPIRED_FILE));
    return { ...result, left };
  } finally {
    unlock();
  }
}

function expireDays(root: string, cutoff: string, dryRun: boolean): Omit<ExpireResult, 'left'> {
  const removed: string[] = [];
  let kept = 0;
  for (const { file, day } of dayFiles(root)) {
    if (day >= cutoff) {
      kept++;
      continue;
    }
    removed.push(file);
    if (dryRun) continue;
    rmSync(file);
    removeEmptiedPartitions(root, file);
  }
  return { removed, kept, cutoff: `${cutoff.slice(0, 4)}-${cutoff.slice(4, 6)}-${cutoff.slice(6)}` };
}

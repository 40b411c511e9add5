/**
 * `npm run archive:expire`: removes archive files whose day is older than the long window
 * (180 days by the specification). A file's day is in its name (`events_<yyyymmdd>…parquet`), so nothing
 * has to be opened. The object-store equivalent is a lifecycle rule (see README).
 */
import { readdirSync, rmSync } from 'node:fs';
import { join, resolve } from 'node:path';

export const DEFAULT_ARCHIVE_DAYS = 180;

export interface ExpireResult {
  removed: string[];
  kept: number;
  cutoff: string;
}

/** Removes files of days strictly before `today − days` (UTC). `dryRun` only lists them. */
export function expireArchive(archive: string, days: number, now = new Date(), dryRun = false): ExpireResult {
  if (!Number.isInteger(days) || days < 1) throw new Error(`--days: expected a whole number >= 1, got ${days}`);
  const today = Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate());
  const cutoff = new Date(today - days * 86_400_000).toISOString().slice(0, 10).replace(/-/g, '');
  const removed: string[] = [];
  let kept = 0;
  const walk = (dir: string) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) {
        walk(path);
        if (!dryRun && readdirSync(path).length === 0) rmSync(path, { recursive: true });
        continue;
      }
      const day = /^events_(\d{8})(_\d+)?\.parquet$/.exec(entry.name)?.[1];
      if (!day) continue;
      if (day < cutoff) {
        removed.push(path);
        if (!dryRun) rmSync(path);
      } else kept++;
    }
  };
  walk(resolve(archive));
  return { removed, kept, cutoff: `${cutoff.slice(0, 4)}-${cutoff.slice(4, 6)}-${cutoff.slice(6)}` };
}

/**
 * The daily retention run's pruning of the `idempotency` tab: a key's row is needed only while a
 * retry of its action can still come (the gateway's own record of the key lasts 7 days, a dead
 * letter is posted again within days), yet one row is added per back-office action for ever.
 * Rows whose `at` is before the cutoff are deleted, each run of consecutive ones in one
 * deleteRows, from the bottom up. Runs under the script lock, which every key's reader and writer
 * takes, and reads the tab afresh each time: a run cut off half-way leaves only whole rows, and
 * the next run deletes what is still old. A row whose `at` is not a date is kept.
 */
import { cellTime } from './events-sheet';
import type { MeterServices } from './services';
import { IDEMPOTENCY, columnIn } from './tabs';

/** At least this long, whatever RETENTION_DAYS says: a dead letter fixed by hand may come back weeks later. */
export const MIN_KEY_DAYS = 30;

/** Deletes the rows of keys recorded before `cutoffMs`; answers how many. */
export function pruneIdempotency(svc: Pick<MeterServices, 'spreadsheet'>, cutoffMs: number): number {
  const sheet = svc.spreadsheet.getSheetByName(IDEMPOTENCY.name);
  const last = sheet ? sheet.getLastRow() : 0;
  if (!sheet || last < 2) return 0;
  const at = sheet.getRange(2, columnIn(IDEMPOTENCY, 'at'), last - 1, 1).getValues();
  const blocks = oldBlocks(at.map((r) => cellTime(r[0]) < cutoffMs));
  const count = blocks.reduce((n, b) => n + b.count, 0);
  if (count === 0) return 0;
  // Sheets refuses to delete every row below the frozen header: the last one is blanked instead
  // (no row added, which the cell limit could refuse).
  if (count >= sheet.getMaxRows() - 1) {
    const lastBlock = blocks[blocks.length - 1];
    sheet.getRange(last, 1, 1, IDEMPOTENCY.header.length).setValues([IDEMPOTENCY.header.map(() => '')]);
    lastBlock.count--;
  }
  for (const b of blocks.reverse()) if (b.count) sheet.deleteRows(b.start, b.count);
  return count;
}

/** Runs of consecutive old rows, as (1-based sheet row, count), top down. */
function oldBlocks(old: boolean[]): Array<{ start: number; count: number }> {
  const blocks: Array<{ start: number; count: number }> = [];
  old.forEach((isOld, i) => {
    if (!isOld) return;
    const prev = blocks[blocks.length - 1];
    if (prev && prev.start + prev.count === i + 2) prev.count++;
    else blocks.push({ start: i + 2, count: 1 });
  });
  return blocks;
}

/**
 * The retention journal (script property `RETENTION_IN_PROGRESS`): what a retention run is about
 * to do, recorded before it rewrites the events tab, so that a run cut off after the rewrite (a
 * Sheets or Properties call that timed out) is finished by the next run, or by the export that
 * comes first (finishInterrupted), instead of leaving the watermark behind (which would stop
 * retention and send the export back to the top).
 *
 * The rewrite itself is one setValues (kept rows shifted up, freed tail blanked): either it
 * happened or it did not. The steps after it (drop the blank tail, move the watermark, close the
 * journal) may each be repeated.
 */
import type { MeterServices, Sheet } from './services';
import { watermarkHolds, writeWatermark, type Watermark } from './watermark';

const JOURNAL_PROPERTY = 'RETENTION_IN_PROGRESS';

export interface RetentionJournal {
  /** The watermark the run started from (it held). */
  before: Watermark;
  /** The watermark once the kept rows are rewritten. */
  after: Watermark;
  /** The freed rows, blank once rewritten: `count` rows from `tailStart`. */
  tailStart: number;
  count: number;
  /** The tab's row count before those rows are dropped: a different count means they were. */
  maxRows: number;
}

export function startJournal(svc: Pick<MeterServices, 'properties'>, journal: RetentionJournal): void {
  svc.properties.setProperty(JOURNAL_PROPERTY, JSON.stringify(journal));
}

/**
 * The steps after the rewrite. The tail is dropped only while the tab still has its row count and
 * nothing was written into it since (ingest reuses blank rows; they are then simply spare rows).
 */
export function finishJournal(svc: Pick<MeterServices, 'properties'>, sheet: Sheet, journal: RetentionJournal): void {
  if (sheet.getMaxRows() === journal.maxRows && sheet.getLastRow() < journal.tailStart) {
    sheet.deleteRows(journal.tailStart, journal.count);
  }
  writeWatermark(svc, journal.after);
  svc.properties.deleteProperty(JOURNAL_PROPERTY);
}

const sameWatermark = (a: Watermark, b: Watermark) => a.row === b.row && a.eventId === b.eventId && a.exportedAt === b.exportedAt;

/**
 * The journal of a run cut off after its rewrite: the watermark is still the one it started from
 * and no longer holds (its rows moved), while the one it was heading for does. Any other journal
 * (the rewrite never happened, the export has moved the watermark since, rows were moved by hand)
 * describes nothing left to do and is dropped.
 */
export function interruptedRun(svc: Pick<MeterServices, 'properties'>, wm: Watermark | null, rows: unknown[][]): RetentionJournal | null {
  const text = svc.properties.getProperty(JOURNAL_PROPERTY);
  if (!text) return null;
  let journal: RetentionJournal | null = null;
  try {
    journal = JSON.parse(text) as RetentionJournal;
  } catch {
    // unreadable: dropped below
  }
  if (
    journal?.before &&
    journal.after &&
    wm &&
    sameWatermark(journal.before, wm) &&
    !watermarkHolds(wm, rows) &&
    watermarkHolds(journal.after, rows)
  ) {
    return journal;
  }
  svc.properties.deleteProperty(JOURNAL_PROPERTY);
  return null;
}

/**
 * For the export, which runs at 01:00, before retention's next run at 03:00: finishes a retention
 * run cut off after its rewrite and gives the watermark it moved to, or null when there is none.
 * Left to the next retention, the stale watermark sent the export back to the top of the tab (the
 * whole tab written again, said to be rows moved by hand). Looked for only when the watermark no
 * longer holds, so the usual export makes no call more.
 */
export function finishInterrupted(
  svc: Pick<MeterServices, 'properties'>,
  sheet: Sheet,
  wm: Watermark | null,
  rows: unknown[][],
): Watermark | null {
  if (!wm || watermarkHolds(wm, rows)) return null;
  const journal = interruptedRun(svc, wm, rows);
  if (!journal) return null;
  finishJournal(svc, sheet, journal);
  return journal.after;
}

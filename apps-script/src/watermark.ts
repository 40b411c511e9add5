/**
 * The export watermark: the last row of the events tab up to which every row has been exported.
 * Retention may only delete rows at or above it. It is kept as a row number plus the event_id in
 * that row, so a watermark that no longer points at the same event (someone sorted the tab or
 * deleted rows by hand) is detected and not trusted.
 */
import { EVENT_AT } from './events-sheet';
import type { MeterServices } from './services';

const WATERMARK_PROPERTY = 'EXPORT_WATERMARK';

export interface Watermark {
  /** Last exported row (1 = only the header: nothing exported yet). */
  row: number;
  eventId: string;
  exportedAt: string;
}

export function readWatermark(svc: Pick<MeterServices, 'properties'>): Watermark | null {
  const text = svc.properties.getProperty(WATERMARK_PROPERTY);
  if (!text) return null;
  try {
    const wm = JSON.parse(text) as Watermark;
    return Number.isInteger(wm.row) && wm.row >= 1 ? wm : null;
  } catch {
    return null;
  }
}

export function writeWatermark(svc: Pick<MeterServices, 'properties'>, wm: Watermark): void {
  svc.properties.setProperty(WATERMARK_PROPERTY, JSON.stringify(wm));
}

/** Does the watermark still point at its event in these data rows (row 2 = index 0)? */
export function watermarkHolds(wm: Watermark | null, rows: unknown[][]): wm is Watermark {
  if (!wm) return false;
  if (wm.row === 1) return true;
  const row = rows[wm.row - 2];
  return row !== undefined && String(row[EVENT_AT.event_id]) === wm.eventId;
}

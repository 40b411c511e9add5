/**
 * Rows the archive export passed over because their timestamp reads as no date (typed by hand in
 * another locale's order, which Sheets keeps as text) or a cell of theirs was edited by hand into
 * text the archive would refuse (schema/archive-cell.ts). The watermark moves past them, or one such
 * row would hold back the export and retention for good; their event_ids are kept here (script
 * property `EXPORT_UNDATED`) so that once the date or cell is corrected, as the meter asks, the next export
 * takes them, and retention, which deletes old rows at or above the watermark, keeps them until then.
 */
import type { MeterServices } from './services';

const UNDATED_PROPERTY = 'EXPORT_UNDATED';
/** A property holds 9 kB: this many ids of at most 128 characters fit, beside the export's claim too. */
export const MAX_UNDATED = 50;

export function readUndated(svc: Pick<MeterServices, 'properties'>): string[] {
  const text = svc.properties.getProperty(UNDATED_PROPERTY);
  if (!text) return [];
  try {
    const ids = JSON.parse(text) as unknown;
    return Array.isArray(ids) ? ids.map(String) : [];
  } catch {
    return [];
  }
}

export function writeUndated(svc: Pick<MeterServices, 'properties'>, ids: string[]): void {
  if (ids.length === 0) svc.properties.deleteProperty(UNDATED_PROPERTY);
  else svc.properties.setProperty(UNDATED_PROPERTY, JSON.stringify(ids));
}

/**
 * Ingest (Document 2, "Ingest event"): one event, or `{events:[...]}` of up to 500.
 *
 * Every event is validated before anything is written; one refused event refuses the request, so
 * a reply of `ok:false` always means nothing was stored. Stored event_ids are acknowledged as
 * duplicates and not stored again, so a client that retries (for instance after losing the
 * answer to the web app's 302) never doubles a row.
 */
import { normalizeEvent, type EventRecord } from '../../schema/event-record';
import { appendRows, eventToRow, findStoredIds, getEventsSheet } from './events-sheet';
import type { MeterServices } from './services';

export const MAX_BATCH = 500;
/** Document 2: "A script lock is tried for up to 5000 ms around the write". */
const LOCK_WAIT_MS = 5000;

export type IngestReply = { ok: true; appended: number; duplicates: number };

/** The events a body carries, validated and defaulted. Throws with the field at fault. */
export function parseEvents(body: unknown, svc: Pick<MeterServices, 'now' | 'uuid'>): EventRecord[] {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw new Error('body: expected a JSON object (one event, or {"events":[...]})');
  }
  const batch = (body as { events?: unknown }).events;
  if (batch === undefined) return [normalizeEvent(body, svc)];
  if (!Array.isArray(batch)) throw new Error('events: expected an array of event objects');
  if (batch.length > MAX_BATCH) {
    throw new Error(`events: expected at most ${MAX_BATCH} events per request, got ${batch.length}`);
  }
  return batch.map((event, index) => normalizeEvent(event, { ...svc, index }));
}

/** Runs `work` under the script lock, or throws a "busy" error without running it. */
export function withScriptLock<T>(svc: Pick<MeterServices, 'lock'>, work: () => T, waitMs = LOCK_WAIT_MS): T {
  if (!svc.lock.tryLock(waitMs)) {
    throw new Error(`meter busy: the write lock was not free within ${waitMs} ms; nothing was written, retry`);
  }
  try {
    return work();
  } finally {
    svc.lock.releaseLock();
  }
}

/** Stores the events that are not stored yet, in one batched write under the script lock. */
export function ingestEvents(svc: MeterServices, events: EventRecord[]): IngestReply {
  // A batch may repeat an id (a client's retry merged into a later batch): the first one counts.
  const unique = new Map<string, EventRecord>();
  for (const event of events) if (!unique.has(event.event_id)) unique.set(event.event_id, event);

  return withScriptLock(svc, () => {
    const sheet = getEventsSheet(svc.spreadsheet);
    const lastRow = sheet.getLastRow();
    const stored = findStoredIds(sheet, [...unique.keys()], lastRow);
    const fresh = [...unique.values()].filter((e) => !stored.has(e.event_id));
    const appended = appendRows(svc.spreadsheet, sheet, fresh.map(eventToRow), lastRow);
    return { ok: true, appended, duplicates: events.length - appended };
  });
}

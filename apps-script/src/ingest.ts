/**
 * Ingest: one event, or `{events:[...]}` of up to 500.
 *
 * Every event is validated before anything is written; one refused event refuses the request, so
 * a reply of `ok:false` always means nothing was stored. Stored event_ids are acknowledged as
 * duplicates and not stored again, so a client that retries (for instance after losing the
 * answer to the web app's 302) never doubles a row.
 */
import { CLOCK_SKEW_ALLOWANCE_MS, EVENT_FIELDS, normalizeEvent, type EventRecord } from '../../schema/event-record';
import { MeterRefusal } from '../../schema/meter-reply';
import { appendRows, checkEventsHeader, eventToRow, findStoredIds, getEventsSheet, lastEventRow } from './events-sheet';
import { withScriptLock } from './lock';
import type { MeterServices } from './services';
import { checkSheetTimeZone } from './sheet-time-zone';

export const MAX_BATCH = 500;

export type IngestReply = { ok: true; appended: number; duplicates: number };

/** The events a body carries, validated and defaulted. Throws with the field at fault. */
export function parseEvents(body: unknown, svc: Pick<MeterServices, 'now' | 'uuid'>): EventRecord[] {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw new MeterRefusal('invalid_body', 'body: expected a JSON object (one event, or {"events":[...]})');
  }
  // Events stamped beyond the clock-skew allowance are refused (with the whole batch).
  const opts = { now: svc.now, uuid: svc.uuid, maxFutureMs: CLOCK_SKEW_ALLOWANCE_MS };
  const batch = (body as { events?: unknown }).events;
  if (batch === undefined) return [normalizeEvent(body, opts)];
  if (!Array.isArray(batch)) throw new MeterRefusal('invalid_body', 'events: expected an array of event objects');
  // An event's fields (or call records) beside the array belong to no event: ignored, a sender's
  // malformed body ({"cost_usd":5,"events":[]}) was answered ok with nothing stored and no word why.
  const beside = [...EVENT_FIELDS, 'calls'].filter((key) => Object.prototype.hasOwnProperty.call(body, key));
  if (beside.length)
    throw new MeterRefusal(
      'invalid_body',
      `body: ${beside.join(', ')} next to "events": an event's fields go inside events[] (or send the one event alone), call records in a body of their own`,
    );
  if (batch.length > MAX_BATCH) {
    throw new MeterRefusal('too_many_events', `events: expected at most ${MAX_BATCH} events per request, got ${batch.length}`);
  }
  return batch.map((event, index) => normalizeEvent(event, { ...opts, index }));
}

/** Stores the events that are not stored yet, in one batched write under the script lock. */
export function ingestEvents(svc: MeterServices, events: EventRecord[]): IngestReply {
  // A batch may repeat an id (a client's retry merged into a later batch): the first one counts.
  const unique = new Map<string, EventRecord>();
  for (const event of events) if (!unique.has(event.event_id)) unique.set(event.event_id, event);

  // Written in another zone, the timestamps would read back hours off once it is GMT again.
  checkSheetTimeZone(svc.spreadsheet);
  return withScriptLock(svc, () => {
    const sheet = getEventsSheet(svc.spreadsheet);
    const lastRow = lastEventRow(sheet, checkEventsHeader(sheet));
    const stored = findStoredIds(sheet, [...unique.keys()], lastRow);
    const fresh = [...unique.values()].filter((e) => !stored.has(e.event_id));
    const appended = appendRows(svc.spreadsheet, sheet, fresh.map(eventToRow), lastRow);
    return { ok: true, appended, duplicates: events.length - appended };
  });
}

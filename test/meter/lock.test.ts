// The script lock is held only around sheet work, on the built bundle: a slow outside URL (the
// recording download, Twilio) must not make other callers' ingest answer "meter busy".
import { describe, expect, it } from 'vitest';
import { aCall } from './maintenance-setup';
import { backOffice, booking, lead, voicemail } from './backoffice-setup';

const event = (id: string) => ({ event_id: id, cost_usd: 0.01 });

describe('the script lock and slow outside services', () => {
  it('ingest arriving during a 20 s recording download is stored, not refused as busy', () => {
    const { platform, act, ingest } = backOffice();
    let during: unknown;
    platform.urlFetch.latencyMs = 20_000;
    platform.urlFetch.meanwhile = (req) => {
      if (req.url.endsWith('.mp3')) during = ingest(event('while-downloading'));
    };
    expect(act('route_to_voicemail', voicemail())).toMatchObject({ ok: true });
    expect(during).toEqual({ ok: true, appended: 1, duplicates: 0 });
  });

  it('ingest arriving while Twilio is slow to take a text is stored, not refused as busy', () => {
    const { platform, act, ingest } = backOffice({ twilio: true });
    let during: unknown;
    platform.urlFetch.latencyMs = 10_000;
    platform.urlFetch.meanwhile = () => (during = ingest(event('while-texting')));
    expect(act('book_slot', booking())).toMatchObject({ ok: true, text: 'sent' });
    expect(during).toEqual({ ok: true, appended: 1, duplicates: 0 });
  });

  it('no UrlFetch, Calendar or Drive call is made while the lock is held, in any action or trigger', () => {
    const { platform, meter, act, ingest } = backOffice({ twilio: true });
    const { booking_id } = act('book_slot', booking());
    act('reschedule_slot', {
      call_id: 'c2',
      idempotency_key: 'key-move-0001',
      args: { booking_id, new_date: '2026-12-01', new_time: '15:00', phone: '+1555' },
    });
    act('create_lead', lead());
    act('route_to_voicemail', voicemail());
    ingest({ events: [{ timestamp: '2026-11-21T10:00:00Z', cost_usd: 250 }] });
    platform.spreadsheet.tab('Config')!.data.find((r) => r[0] === 'SLACK_WEBHOOK_URL')![1] = 'https://hooks.slack.example/x';
    platform.clock.set('2026-11-22T01:00:00Z');
    meter.exportArchive();
    meter.checkSpendCaps();
    expect(platform.calls.get('Folder.createFile')).toBe(2); // the recording and the export
    expect(platform.calls.get('UrlFetchApp.fetch')).toBe(4); // two texts, the recording, the alert
    expect(platform.outboundUnderLock).toEqual([]);
  });
});

describe('the script lock and the writes made under it', () => {
  // Apps Script applies a script's sheet writes at SpreadsheetApp.flush() or when the script ends,
  // not when the lock is let go. A request that took the lock in between read the events tab
  // without the rows just appended: its getLastRow was the old one, so it wrote its own batch over
  // them (those events lost, though their sender was answered ok), and a retry of the same batch
  // found none of its ids and stored them twice.
  it('a batch arriving just as another lets go of the lock is appended after it: neither is written over', () => {
    const { platform, ingest } = backOffice();
    const sheets = platform.spreadsheet;
    sheets.bufferedWrites = []; // as Apps Script: a script's writes wait for a flush or its end
    let second: unknown;
    const release = platform.lock.releaseLock.bind(platform.lock);
    platform.lock.releaseLock = () => {
      release();
      if (second !== undefined) return;
      second = 'running';
      second = ingest({ events: [{ event_id: 'second-1', cost_usd: 2 }] });
      sheets.applyBufferedWrites(); // the second request's script ends
    };
    expect(ingest({ events: [{ event_id: 'first-1', cost_usd: 1 }] })).toEqual({ ok: true, appended: 1, duplicates: 0 });
    sheets.applyBufferedWrites(); // the first request's script ends
    expect(second).toEqual({ ok: true, appended: 1, duplicates: 0 });
    expect(
      sheets
        .tab('events')!
        .data.slice(1)
        .map((r) => r[0]),
    ).toEqual(['first-1', 'second-1']);
  });

  it('every write is committed before the lock is let go: ingest, call records, back-office actions, export, retention', () => {
    const { platform, meter, act, ingest } = backOffice({ twilio: true });
    expect(ingest({ events: [{ event_id: 'e-1', timestamp: '2026-10-01T10:00:00Z', cost_usd: 1 }] })).toMatchObject({ appended: 1 });
    expect(ingest({ event_id: 'e-2', cost_usd: 2 })).toMatchObject({ appended: 1 });
    expect(ingest({ calls: [aCall()] })).toMatchObject({ ok: true, appended: 1 });
    const { booking_id } = act('book_slot', booking());
    act('reschedule_slot', {
      call_id: 'c2',
      idempotency_key: 'key-move-0001',
      args: { booking_id, new_date: '2026-12-01', new_time: '15:00', phone: '+1555' },
    });
    act('create_lead', lead());
    act('route_to_voicemail', voicemail());
    platform.clock.set('2026-11-23T01:00:00Z');
    expect(meter.exportArchive()).toMatch(/wrote 2 row\(s\)/);
    expect(meter.applyRetention()).toMatch(/deleted 1 row\(s\)/);
    expect(platform.unflushedAtRelease).toEqual([]);
  });
});

describe('a flush that fails after the work under the lock succeeded', () => {
  // The action is answered as failed (internal) though its writes may still be applied when the
  // script ends (here they are): a retry with the same key must finish it, not stop short of it.
  it('a booking whose text claim was not flushed: the text was never sent, and the retry sends it once', () => {
    const { platform, act, texts, rows } = backOffice({ twilio: true });
    const claimed = () => rows('idempotency').some((r) => String(r[4]).includes('"text":"sending"'));
    platform.calls.failAfter(
      () => true,
      (name) => name === 'SpreadsheetApp.flush' && claimed(),
    );
    expect(act('book_slot', booking())).toMatchObject({ ok: false, code: 'internal' });
    expect(texts()).toHaveLength(0);
    expect(act('book_slot', booking())).toMatchObject({ ok: true, text: 'sent', replayed: false });
    expect(texts()).toHaveLength(1);
    expect(act('book_slot', booking())).toMatchObject({ ok: true, text: 'sent', replayed: true });
    expect(texts()).toHaveLength(1);
  });
});

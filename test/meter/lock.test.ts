// The script lock is held only around sheet work, on the built bundle: a slow outside URL (the
// recording download, Twilio) must not make other callers' ingest answer "meter busy".
import { describe, expect, it } from 'vitest';
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

// The warning before Google's 10 million cell limit (refreshDigest): the built bundle in node:vm.
import { describe, expect, it } from 'vitest';
import type { FakePlatform } from './fakes/platform';
import { WEBHOOK, eventsTab, freshMeter, setConfig } from './maintenance-setup';

/** Makes the events tab's grid take the spreadsheet to `share` of the limit (the other tabs as they are). */
function fillTo(platform: FakePlatform, share: number): void {
  const events = eventsTab(platform);
  const others = platform.spreadsheet.sheets.filter((s) => s !== events).reduce((n, s) => n + s.maxRows * s.maxColumns, 0);
  events.maxRows = Math.ceil((share * 10_000_000 - others) / events.maxColumns);
}

function meterWithSlack() {
  const { platform, meter } = freshMeter('2026-11-22T12:00:00Z');
  setConfig(platform, 'SLACK_WEBHOOK_URL', WEBHOOK);
  meter.refreshDigest(); // the Digest and public tabs exist
  return { platform, meter };
}

describe('warning before the spreadsheet is full', () => {
  it('past 80 % of the cell limit: one Slack alert a UTC day, saying how full and what to do', () => {
    const { platform, meter } = meterWithSlack();
    fillTo(platform, 0.79);
    expect(meter.refreshDigest()).toMatch(/digest refreshed.*79 % of Google's 10,000,000 cell limit/);
    expect(platform.urlFetch.requests).toHaveLength(0);
    fillTo(platform, 0.85);
    expect(meter.refreshDigest()).toMatch(/85 % of Google's 10,000,000 cell limit.*alert posted/);
    expect(platform.urlFetch.requests).toHaveLength(1);
    const body = platform.urlFetch.payloads()[0];
    expect(body.text).toMatch(/spreadsheet is 85 % full/);
    expect(body.text).toMatch(/events: 8,[\d,]+ cells/); // the tab taking the room
    expect(body.text).toMatch(/spreadsheet_full/);
    expect(body.text).toMatch(/RETENTION_DAYS \(not below 7/); // the floor retention holds to (the caps' week)
    platform.clock.set('2026-11-22T13:00:00Z');
    expect(meter.refreshDigest()).toMatch(/already alerted today/);
    expect(platform.urlFetch.requests).toHaveLength(1);
    platform.clock.set('2026-11-23T00:30:00Z');
    meter.refreshDigest();
    expect(platform.urlFetch.requests).toHaveLength(2);
  });

  it('the Digest tab shows how full the spreadsheet is', () => {
    const { platform, meter } = meterWithSlack();
    fillTo(platform, 0.5);
    meter.refreshDigest();
    expect(platform.spreadsheet.tab('Digest')!.data[0].join(' ')).toMatch(/spreadsheet 50 % full/);
  });

  it('the alert still goes out when the refresh itself is refused as spreadsheet_full', () => {
    const { platform, meter } = meterWithSlack();
    fillTo(platform, 1);
    eventsTab(platform).loadRows(
      2,
      Array.from({ length: 2000 }, (_, i) => [`e${i}`, new Date('2026-11-22T10:00:00Z'), ...Array(17).fill('')]),
    );
    expect(() => meter.refreshDigest()).toThrow(/spreadsheet is full/);
    expect(platform.urlFetch.payloads()[0].text).toMatch(/spreadsheet is 100 % full/);
  });

  it('a post Slack refuses is tried again on the next refresh', () => {
    const { platform, meter } = meterWithSlack();
    fillTo(platform, 0.9);
    platform.urlFetch.respond = () => ({ code: 500 });
    expect(meter.refreshDigest()).toMatch(/Slack answered HTTP 500/);
    platform.urlFetch.respond = () => ({ code: 200, body: 'ok' });
    expect(meter.refreshDigest()).toMatch(/alert posted/);
    expect(platform.urlFetch.requests).toHaveLength(2);
  });

  it('two refreshes that overlap (the hourly trigger, and the menu while its post is out) post one alert; a failed one is still retried', () => {
    const { platform, meter } = meterWithSlack();
    fillTo(platform, 0.9);
    const overlapping: string[] = [];
    platform.urlFetch.meanwhile = () => {
      platform.urlFetch.meanwhile = null;
      overlapping.push(meter.refreshDigest() as string);
    };
    expect(meter.refreshDigest()).toMatch(/alert posted/);
    expect(overlapping).toEqual([expect.stringMatching(/another refresh has been posting the alert since .*: this one posted nothing/)]);
    expect(platform.urlFetch.requests).toHaveLength(1);
    expect(meter.refreshDigest()).toMatch(/already alerted today/);

    platform.clock.set('2026-11-23T12:00:00Z');
    platform.urlFetch.respond = () => ({ code: 500 });
    platform.urlFetch.meanwhile = () => {
      platform.urlFetch.meanwhile = null;
      meter.refreshDigest();
    };
    expect(meter.refreshDigest()).toMatch(/HTTP 500/);
    platform.urlFetch.respond = () => ({ code: 200, body: 'ok' });
    expect(meter.refreshDigest()).toMatch(/alert posted/);
    expect(platform.urlFetch.requests).toHaveLength(3);
    expect(platform.outboundUnderLock).toEqual([]);
  });

  it('a warning posted while the nightly export took the lock is still recorded: the next hour does not post it again', () => {
    const { platform, meter } = meterWithSlack();
    fillTo(platform, 0.9);
    platform.urlFetch.meanwhile = () => {
      platform.urlFetch.meanwhile = null;
      platform.lock.busy = true; // the export reads the whole tab under the lock, for longer than the 30 s wait
    };
    expect(meter.refreshDigest()).toMatch(/alert posted/);
    platform.lock.busy = false;
    platform.clock.set('2026-11-22T13:00:00Z');
    expect(meter.refreshDigest()).toMatch(/already alerted today/);
    expect(platform.urlFetch.requests).toHaveLength(1);
  });
});

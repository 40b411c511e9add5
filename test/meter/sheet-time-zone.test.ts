// The spreadsheet's time zone changed after setup() (File > Settings): Sheets keeps a date-time as
// a wall-clock time and Apps Script reads it back in the spreadsheet's zone, so every stored
// timestamp would read back hours off and days, caps, the digest, exports and retention move
// unsaid. On the built bundle: the functions that read timestamps refuse with a config error
// naming the zone, so does ingest (a date-time written then would read back hours off once the zone
// is GMT again), and setup() sets the zone back.
import { describe, expect, it } from 'vitest';
import { callJson } from './fakes/platform';
import { SECRET, WEBHOOK, aCall, dataRows, eventsTab, freshMeter, post, setConfig } from './maintenance-setup';

const REFUSAL = /the spreadsheet's time zone is America\/New_York, not GMT as setup\(\) set it/;

function meterInNewYork() {
  const { platform, meter } = freshMeter('2026-11-22T12:00:00Z');
  setConfig(platform, 'SLACK_WEBHOOK_URL', WEBHOOK);
  setConfig(platform, 'DAILY_CAP_USD', 1);
  expect(post(meter, { cost_usd: 2 })).toMatchObject({ ok: true, appended: 1 });
  platform.spreadsheet.timeZone = 'America/New_York';
  return { platform, meter };
}

describe("the spreadsheet's time zone changed after setup()", () => {
  it('the scheduled functions refuse with a config error naming the zone, and post nothing', () => {
    const { platform, meter } = meterInNewYork();
    expect(() => meter.checkSpendCaps()).toThrow(REFUSAL);
    expect(() => meter.refreshDigest()).toThrow(REFUSAL);
    expect(() => meter.exportArchive()).toThrow(REFUSAL);
    expect(() => meter.applyRetention()).toThrow(REFUSAL);
    setConfig(platform, 'TEAM_EMAILS', 'ops@example.com');
    expect(() => meter.sendWeeklyDigest()).toThrow(REFUSAL);
    expect(platform.urlFetch.requests).toHaveLength(0);
    expect(platform.mail.sent).toHaveLength(0);
  });

  it('the spend answer and the exports are config_error', () => {
    const { meter } = meterInNewYork();
    const get = (params: Record<string, string>) => callJson(meter, 'doGet', { token: SECRET, ...params });
    expect(get({ action: 'spend' })).toMatchObject({ ok: false, code: 'config_error', error: expect.stringMatching(REFUSAL) });
    expect(get({ action: 'export', since: '2026-11-01' })).toMatchObject({ ok: false, code: 'config_error' });
    expect(get({ action: 'export', what: 'calls', since: '2026-11-01' })).toMatchObject({ ok: false, code: 'config_error' });
  });

  it('ingest of events and calls is refused with nothing written (Sheets would keep New York wall-clock times); the retry after setup() lands in its UTC day', () => {
    const { platform, meter } = meterInNewYork();
    const late = { event_id: 'late-evening', timestamp: '2026-11-22T02:30:00Z', cost_usd: 3 }; // 21:30 on the 21st in New York
    const refused = post(meter, { events: [late] });
    expect(refused).toMatchObject({ ok: false, code: 'config_error', error: expect.stringMatching(REFUSAL) });
    expect(post(meter, { calls: [aCall()] })).toMatchObject({ ok: false, code: 'config_error' });
    expect(dataRows(eventsTab(platform))).toHaveLength(1);
    expect(dataRows(platform.spreadsheet.tab('calls')!)).toHaveLength(0);
    meter.setup();
    expect(post(meter, { events: [late] })).toMatchObject({ ok: true, appended: 1 });
    expect(post(meter, { calls: [aCall()] })).toMatchObject({ ok: true, appended: 1 });
    expect(callJson(meter, 'doGet', { token: SECRET, action: 'spend' })).toMatchObject({ ok: true, day: '2026-11-22', today_cost_usd: 5 });
  });

  it('setup() sets it back and the checks run again; a zone that is UTC under another name is accepted', () => {
    const { platform, meter } = meterInNewYork();
    meter.setup();
    expect(platform.spreadsheet.timeZone).toBe('Etc/GMT');
    expect(meter.checkSpendCaps()).toMatch(/alert posted for daily/);
    platform.spreadsheet.timeZone = 'UTC';
    expect(meter.refreshDigest()).toMatch(/digest refreshed: today \$2\.0000/);
  });
});

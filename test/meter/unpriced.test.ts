// Calls without a price, on the built bundle: counted (not silently $0) in the Digest tab, the
// cap alert and the weekly e-mail. A call is unpriced when its error_code holds UNPRICED, or when
// the sender sent `cost_usd: null` (the gateway does, for a model with no known price).
import { describe, expect, it } from 'vitest';
import { EVENT_FIELDS } from '../../schema/event-record';
import { FakePlatform, callJson, loadBundle } from './fakes/platform';

const SECRET = 'unpriced-secret';
const WEBHOOK = 'https://hooks.slack.example/services/T/B/X';

function meterWithUnpricedCalls() {
  const platform = new FakePlatform();
  platform.clock.set('2026-11-22T12:00:00Z');
  const meter = loadBundle(platform);
  meter.setup();
  platform.properties.setProperty('SECRET_TOKEN', SECRET);
  const reply = callJson(
    meter,
    'doPost',
    { token: SECRET },
    {
      events: [
        { event_id: 'priced', cost_usd: 3, model: 'gpt-known' },
        { event_id: 'flagged', error_code: 'UNPRICED', model: 'new-model' },
        { event_id: 'null-cost', cost_usd: null, model: 'new-model' }, // the gateway's unpriced event
        { event_id: 'failed-too', timestamp: '2026-11-19T10:00:00Z', error_code: 'TIMEOUT|UNPRICED' },
        { event_id: 'old', timestamp: '2026-10-01T10:00:00Z', error_code: 'UNPRICED' }, // outside 30 days
        { event_id: 'pii', error_code: 'UNPRICED', pii_flag: true }, // left out of the digest
        { event_id: 'no-cost-sent', model: 'm' }, // absent cost: the ingest default 0, not unpriced
      ],
    },
  );
  expect(reply).toMatchObject({ ok: true, appended: 7 });
  const cell = (id: string, field: string) =>
    platform.spreadsheet.tab('events')!.data.find((r) => r[0] === id)![EVENT_FIELDS.indexOf(field as never)];
  return { platform, meter, cell };
}

describe('calls without a price', () => {
  it('an explicit cost_usd null keeps the default cost of 0 and is marked UNPRICED; an absent cost is not', () => {
    const { cell } = meterWithUnpricedCalls();
    expect([cell('null-cost', 'cost_usd'), cell('null-cost', 'error_code')]).toEqual([0, 'UNPRICED']);
    expect([cell('no-cost-sent', 'cost_usd'), cell('no-cost-sent', 'error_code')]).toEqual([0, '']);
  });

  it('the Digest tab shows how many calls had no price today, in 7 and in 30 days', () => {
    const { platform, meter } = meterWithUnpricedCalls();
    meter.refreshDigest();
    const grid = platform.spreadsheet.tab('Digest')!.data;
    const at = grid.findIndex((r) => r[0] === 'Calls without a price today');
    expect(grid[at].slice(0, 3)).toEqual([
      'Calls without a price today',
      'Calls without a price, last 7 days',
      'Calls without a price, last 30 days',
    ]);
    expect(grid[at + 1].slice(0, 3)).toEqual([2, 3, 3]);
  });

  it('the cap alert says "N calls without a price"', () => {
    const { platform, meter } = meterWithUnpricedCalls();
    const config = platform.spreadsheet.tab('Config')!.data;
    config.find((r) => r[0] === 'SLACK_WEBHOOK_URL')![1] = WEBHOOK;
    config.find((r) => r[0] === 'DAILY_CAP_USD')![1] = 1;
    meter.checkSpendCaps();
    const [alert] = platform.urlFetch.payloads(WEBHOOK);
    expect(alert.text).toContain('4 calls without a price in the last 7 days (3 today)');
    const blocks = JSON.stringify(alert.blocks);
    expect(blocks).toContain('4 calls without a price');
  });

  it('the weekly e-mail says it too', () => {
    const { platform, meter } = meterWithUnpricedCalls();
    platform.spreadsheet.tab('Config')!.data.find((r) => r[0] === 'TEAM_EMAILS')![1] = 'ops@example.com';
    meter.sendWeeklyDigest();
    const [mail] = platform.mail.sent;
    expect(mail.body).toContain('3 calls without a price in the last 7 days');
    expect(mail.htmlBody).toContain('3 calls without a price in the last 7 days');
  });
});

describe('calls priced in part (a cost sent with UNPRICED: a voice response whose text tokens the concierge has no price for)', () => {
  it('their known part counts in the totals, and the alert and the e-mail do not say they were counted as $0', () => {
    const platform = new FakePlatform();
    platform.clock.set('2026-11-22T12:00:00Z');
    const meter = loadBundle(platform);
    meter.setup();
    platform.properties.setProperty('SECRET_TOKEN', SECRET);
    const event = { event_id: 'part', cost_usd: 2.5, input_tokens: 900, output_tokens: 40, error_code: 'UNPRICED' };
    expect(callJson(meter, 'doPost', { token: SECRET }, { events: [event] })).toMatchObject({ ok: true, appended: 1 });
    const config = platform.spreadsheet.tab('Config')!.data;
    config.find((r) => r[0] === 'SLACK_WEBHOOK_URL')![1] = WEBHOOK;
    config.find((r) => r[0] === 'DAILY_CAP_USD')![1] = 1;
    config.find((r) => r[0] === 'TEAM_EMAILS')![1] = 'ops@example.com';
    meter.checkSpendCaps();
    meter.sendWeeklyDigest();
    const [alert] = platform.urlFetch.payloads(WEBHOOK);
    const [mail] = platform.mail.sent;
    expect(alert.text).toContain('Today: $2.5000 of $1.00 daily cap');
    for (const text of [alert.text, mail.body]) {
      expect(text).toContain('1 call without a price in the last 7 days');
      expect(text).toContain('only the part of it known is counted ($0 when none is)');
      expect(text).not.toContain('counted as $0');
    }
  });
});

describe('calls with an estimated cost (a stream cut on the gateway side, schema/estimated.ts)', () => {
  it('are stored as sent, their cost counts towards the caps, and they are not calls without a price', () => {
    const platform = new FakePlatform();
    platform.clock.set('2026-11-22T12:00:00Z');
    const meter = loadBundle(platform);
    meter.setup();
    platform.properties.setProperty('SECRET_TOKEN', SECRET);
    const event = { event_id: 'cut', cost_usd: 2.5, input_tokens: 900, output_tokens: 40, error_code: 'CLIENT_CLOSED|ESTIMATED' };
    expect(callJson(meter, 'doPost', { token: SECRET }, { events: [event] })).toMatchObject({ ok: true, appended: 1 });
    const row = platform.spreadsheet.tab('events')!.data.find((r) => r[0] === 'cut')!;
    expect(['cost_usd', 'error_code'].map((f) => row[EVENT_FIELDS.indexOf(f as never)])).toEqual([2.5, 'CLIENT_CLOSED|ESTIMATED']);
    const config = platform.spreadsheet.tab('Config')!.data;
    config.find((r) => r[0] === 'SLACK_WEBHOOK_URL')![1] = WEBHOOK;
    config.find((r) => r[0] === 'DAILY_CAP_USD')![1] = 1;
    meter.checkSpendCaps();
    const [alert] = platform.urlFetch.payloads(WEBHOOK);
    expect(alert.text).toContain('Today: $2.5000 of $1.00 daily cap');
    expect(alert.text).not.toContain('without a price');
  });
});

describe('the digest and calls with an estimated cost', () => {
  function meterWithEstimatedCalls() {
    const platform = new FakePlatform();
    platform.clock.set('2026-11-22T12:00:00Z');
    const meter = loadBundle(platform);
    meter.setup();
    platform.properties.setProperty('SECRET_TOKEN', SECRET);
    const events = [
      { event_id: 'measured', cost_usd: 4, customer_id: 'acme' },
      { event_id: 'cut', cost_usd: 2.5, error_code: 'CLIENT_CLOSED|ESTIMATED', customer_id: 'acme' },
      { event_id: 'timed-out', cost_usd: 1, timestamp: '2026-11-19T10:00:00Z', error_code: 'TIMEOUT|ESTIMATED', customer_id: 'acme' },
      { event_id: 'older', cost_usd: 0.5, timestamp: '2026-11-01T10:00:00Z', error_code: 'CLIENT_CLOSED|ESTIMATED' },
      { event_id: 'pii', cost_usd: 9, error_code: 'CLIENT_CLOSED|ESTIMATED', pii_flag: true }, // left out of the digest
    ];
    expect(callJson(meter, 'doPost', { token: SECRET }, { events })).toMatchObject({ ok: true, appended: events.length });
    return { platform, meter };
  }

  it('the Digest tab counts them in the costs and calls and says how much of each total is estimated', () => {
    const { platform, meter } = meterWithEstimatedCalls();
    expect(meter.refreshDigest()).toMatch(/7 days \$7\.50.*; \$3\.50 of it estimated in 7 days/);
    const grid = platform.spreadsheet.tab('Digest')!.data;
    const at = grid.findIndex((r) => r[0] === 'Cost today (UTC)');
    expect(grid[at + 1].slice(0, 3)).toEqual([6.5, 7.5, 8]);
    expect([grid[at][3], grid[at + 1][3]]).toEqual(['Of which estimated: today / 7 days / 30 days', '$2.5000 / $3.50 / $4.00']);
    const customers = grid.findIndex((r) => r[0] === 'customer_id');
    expect(grid[customers + 1].slice(0, 3)).toEqual(['acme', 7.5, 3]);
  });

  it("the Digest's cost today shows the 4 decimals of the spend answer, the alert and the e-mail, never less than the part of it that is estimated", () => {
    const platform = new FakePlatform();
    platform.clock.set('2026-11-22T12:00:00Z');
    const meter = loadBundle(platform);
    meter.setup();
    platform.properties.setProperty('SECRET_TOKEN', SECRET);
    const events = [{ event_id: 'cut', cost_usd: 0.0042, error_code: 'CLIENT_CLOSED|ESTIMATED' }];
    expect(callJson(meter, 'doPost', { token: SECRET }, { events })).toMatchObject({ ok: true, appended: 1 });
    expect(callJson(meter, 'doGet', { action: 'spend', token: SECRET })).toMatchObject({ today_cost_usd: 0.0042 });
    meter.refreshDigest();
    const digest = platform.spreadsheet.tab('Digest')!;
    const row = digest.data.findIndex((r) => r[0] === 'Cost today (UTC)') + 2;
    /** What Sheets shows for a cell with a "$"#,##0.00…-style format: as many decimals as the format has zeros after the point. */
    const shown = (column: number) => {
      const format = digest.numberFormats
        .filter((f) => f.row <= row && row < f.row + f.numRows && f.column <= column && column < f.column + f.numColumns)
        .at(-1)!.value as string;
      return `$${(digest.data[row - 1][column - 1] as number).toFixed(/\.(0+)/.exec(format)![1].length)}`;
    };
    expect([shown(1), shown(2), shown(3)]).toEqual(['$0.0042', '$0.00', '$0.00']);
    expect(digest.data[row - 1][3]).toBe('$0.0042 / $0.00 / $0.00');
  });

  it('the weekly e-mail says how much of the cost is estimated', () => {
    const { platform, meter } = meterWithEstimatedCalls();
    platform.spreadsheet.tab('Config')!.data.find((r) => r[0] === 'TEAM_EMAILS')![1] = 'ops@example.com';
    meter.sendWeeklyDigest();
    const [mail] = platform.mail.sent;
    const sentence = '$3.50 of the last 7 days ($2.5000 of today, $4.00 of the last 30 days) is estimated';
    expect(mail.body).toContain('Last 7 days: $7.50');
    expect(mail.body).toContain(sentence);
    expect(mail.htmlBody).toContain(sentence);
  });
});

// Cost cells typed by hand in the events tab ("$1.50", "1,50", "1.5 USD", text, a negative number):
// on the built bundle, they are left out of every total and counted where spend is shown, never
// read as 0 unsaid nor as another amount ("0x10" is not $16).
import { describe, expect, it } from 'vitest';
import { CALL_FIELDS } from '../../schema/call-record';
import { EVENT_FIELDS } from '../../schema/event-record';
import { callJson } from './fakes/platform';
import { SECRET, WEBHOOK, aCall, eventsTab, freshMeter, post, setConfig } from './maintenance-setup';

const HAND_TYPED = ['$1.50', '1,50', '1.5 USD', 'see invoice', '0x10', -5];

function meterWithHandTypedCosts() {
  const { platform, meter } = freshMeter('2026-11-22T12:00:00Z');
  const events = [{ event_id: 'measured', cost_usd: 2 }, ...HAND_TYPED.map((_, i) => ({ event_id: `typed-${i}`, cost_usd: 1 }))];
  expect(post(meter, { events })).toMatchObject({ ok: true, appended: events.length });
  const cost = EVENT_FIELDS.indexOf('cost_usd');
  // What a person typed over the cost the meter wrote (Sheets keeps such input as text).
  HAND_TYPED.forEach((typed, i) => {
    eventsTab(platform).data.find((r) => r[0] === `typed-${i}`)![cost] = typed;
  });
  return { platform, meter };
}

describe('cost cells typed by hand', () => {
  it('are left out of the spend answer, not read as another amount, and the answer says how many', () => {
    const { meter } = meterWithHandTypedCosts();
    expect(callJson(meter, 'doGet', { action: 'spend', token: SECRET })).toMatchObject({
      today_cost_usd: 2,
      last_7d_cost_usd: 2,
      unreadable_costs_today: 6,
      unreadable_costs_last_7d: 6,
    });
  });

  it('the spend answer counts a cell of an earlier day in the 7 days only, and says 0 when none', () => {
    const { platform, meter } = meterWithHandTypedCosts();
    const at = EVENT_FIELDS.indexOf('timestamp');
    eventsTab(platform).data.find((r) => r[0] === 'typed-0')![at] = new Date('2026-11-20T09:00:00Z');
    eventsTab(platform).data.find((r) => r[0] === 'typed-1')![at] = new Date('2026-11-01T09:00:00Z');
    expect(callJson(meter, 'doGet', { action: 'spend', token: SECRET })).toMatchObject({
      unreadable_costs_today: 4,
      unreadable_costs_last_7d: 5,
    });
    const clean = freshMeter('2026-11-22T12:00:00Z').meter;
    expect(callJson(clean, 'doGet', { action: 'spend', token: SECRET })).toMatchObject({
      unreadable_costs_today: 0,
      unreadable_costs_last_7d: 0,
    });
  });

  it('the cap alert leaves them out of the totals and says how many', () => {
    const { platform, meter } = meterWithHandTypedCosts();
    setConfig(platform, 'SLACK_WEBHOOK_URL', WEBHOOK);
    setConfig(platform, 'DAILY_CAP_USD', 1);
    expect(meter.checkSpendCaps()).toMatch(/6 rows with a cost that is not a number ≥ 0/);
    const [alert] = platform.urlFetch.payloads(WEBHOOK);
    expect(alert.text).toContain('Today: $2.0000 of $1.00 daily cap');
    expect(alert.text).toContain('6 rows with a cost that is not a number ≥ 0 in the last 7 days (6 today): left out of the totals');
    expect(JSON.stringify(alert.blocks)).toContain('6 rows with a cost that is not a number ≥ 0');
  });

  it('the Digest tab leaves them out of its figures and counts them beside the calls without a price', () => {
    const { platform, meter } = meterWithHandTypedCosts();
    expect(meter.refreshDigest()).toMatch(/6 row\(s\) with a cost that is not a number ≥ 0/);
    const grid = platform.spreadsheet.tab('Digest')!.data;
    const scores = grid.findIndex((r) => r[0] === 'Cost today (UTC)');
    expect(grid[scores + 1].slice(0, 3)).toEqual([2, 2, 2]);
    const counts = grid.findIndex((r) => r[0] === 'Calls without a price today');
    expect([grid[counts][3], grid[counts + 1][3]]).toEqual(['Rows with a cost that is not a number ≥ 0, last 30 days', 6]);
  });

  it('the weekly e-mail says so', () => {
    const { platform, meter } = meterWithHandTypedCosts();
    setConfig(platform, 'TEAM_EMAILS', 'ops@example.com');
    meter.sendWeeklyDigest();
    const [mail] = platform.mail.sent;
    expect(mail.body).toContain('Last 7 days: $2.00');
    expect(mail.body).toContain('6 rows in the last 30 days have a cost that is not a number ≥ 0');
    expect(mail.htmlBody).toContain('6 rows in the last 30 days have a cost that is not a number ≥ 0');
  });
});

describe('audio cost cells typed by hand in the calls tab', () => {
  it("are left out of the Digest tab's voice cost per call and per booking, and counted there", () => {
    const { platform, meter } = freshMeter('2026-11-22T12:00:00Z');
    const calls = [
      aCall({ call_id: 'a', est_audio_cost_usd: 0.1 }),
      aCall({ call_id: 'b', est_audio_cost_usd: 0.3 }),
      aCall({ call_id: 'typed-dollar', est_audio_cost_usd: 0.2 }),
      aCall({ call_id: 'typed-hex', outcome: 'abandoned', est_audio_cost_usd: 0.2 }),
    ];
    expect(post(meter, { calls })).toMatchObject({ ok: true, appended: 4 });
    const cost = CALL_FIELDS.indexOf('est_audio_cost_usd');
    const tab = platform.spreadsheet.tab('calls')!;
    tab.data.find((r) => r[0] === 'typed-dollar')![cost] = '$0.20';
    tab.data.find((r) => r[0] === 'typed-hex')![cost] = '0x10';
    meter.refreshDigest();
    const grid = platform.spreadsheet.tab('Digest')!.data;
    const value = (label: string) => grid.find((r) => r[0] === label)!.slice(1, 3);
    expect(value('cost per call (model, USD)')[1]).toBeCloseTo((0.1 + 0.3) / 2, 12);
    // Two of the three bookings have a cost: the third is left out, not counted as $0.
    expect(value('cost per booking (model, USD)')[1]).toBeCloseTo((0.1 + 0.3) / 2, 12);
    expect(value('calls with a cost that is not a number ≥ 0')).toEqual([2, 2]);
  });
});

describe('a row typed by hand whose timestamp is not a date', () => {
  function meterWithUndatedRow(typed = '22/11/2026 10:00') {
    const { platform, meter } = freshMeter('2026-11-22T12:00:00Z');
    expect(
      post(meter, {
        events: [
          { event_id: 'measured', cost_usd: 2 },
          { event_id: 'typed', cost_usd: 80 },
        ],
      }),
    ).toMatchObject({ ok: true });
    // A date typed in another locale's order: Sheets keeps it as text.
    eventsTab(platform).data.find((r) => r[0] === 'typed')![EVENT_FIELDS.indexOf('timestamp')] = typed;
    return { platform, meter };
  }

  it.each(['2026', '0.1', '2/30/2026', 'Nov 2026'])(
    'is not read as some other day when it holds %j: the spend answer counts it as undated',
    (typed) => {
      const { meter } = meterWithUndatedRow(typed);
      expect(callJson(meter, 'doGet', { action: 'spend', token: SECRET })).toMatchObject({
        today_cost_usd: 2,
        unreadable_costs_today: 1,
        unreadable_costs_last_7d: 1,
      });
    },
  );

  it('is counted in the spend answer as left out of the totals, not dropped unsaid', () => {
    const { meter } = meterWithUndatedRow();
    expect(callJson(meter, 'doGet', { action: 'spend', token: SECRET })).toMatchObject({
      today_cost_usd: 2,
      unreadable_costs_today: 1,
      unreadable_costs_last_7d: 1,
    });
  });

  it('checkSpendCaps says so on every run', () => {
    const { meter } = meterWithUndatedRow();
    expect(meter.checkSpendCaps()).toMatch(
      /1 row with a cost and a timestamp that is not a date: left out of every total, correct it in the events tab/,
    );
  });
});

describe('token cells typed by hand', () => {
  it("are left out of the Digest's tokens per model, not read as a negative count or as hex, so the $ per 1K tokens stays right", () => {
    const { platform, meter } = freshMeter('2026-11-22T12:00:00Z');
    const events = [
      { event_id: 'measured', model: 'gpt-a', input_tokens: 600, output_tokens: 400, cost_usd: 2 },
      { event_id: 'typed-negative', model: 'gpt-a', input_tokens: 100 },
      { event_id: 'typed-hex', model: 'gpt-a', output_tokens: 100 },
    ];
    expect(post(meter, { events })).toMatchObject({ ok: true, appended: 3 });
    const row = (id: string) => eventsTab(platform).data.find((r) => r[0] === id)!;
    row('typed-negative')[EVENT_FIELDS.indexOf('input_tokens')] = -900;
    row('typed-hex')[EVENT_FIELDS.indexOf('output_tokens')] = '0x10000';
    meter.refreshDigest();
    const grid = platform.spreadsheet.tab('Digest')!.data;
    const models = grid.findIndex((r) => r[0] === 'model');
    expect(grid[models + 1]).toEqual(['gpt-a', 1000, 2, 2]);
  });
});

describe('count cells typed by hand in the calls tab', () => {
  it("are left out of the Digest's average turns and TTFB, not averaged in as 0", () => {
    const { platform, meter } = freshMeter('2026-11-22T12:00:00Z');
    const calls = [
      aCall({ call_id: 'a', turns: 4, ttfb_s: 1 }),
      aCall({ call_id: 'b', turns: 8, ttfb_s: 2 }),
      aCall({ call_id: 'typed', turns: 6, ttfb_s: 1.5 }),
    ];
    expect(post(meter, { calls })).toMatchObject({ ok: true, appended: 3 });
    const row = platform.spreadsheet.tab('calls')!.data.find((r) => r[0] === 'typed')!;
    row[CALL_FIELDS.indexOf('turns')] = '6 turns';
    row[CALL_FIELDS.indexOf('ttfb_s')] = -1.5;
    meter.refreshDigest();
    const grid = platform.spreadsheet.tab('Digest')!.data;
    const value = (label: string) => grid.find((r) => r[0] === label)!.slice(1, 3);
    expect(value('calls')).toEqual([3, 3]);
    expect(value('average turns')).toEqual([6, 6]);
    expect(value('average TTFB (s)')).toEqual([1.5, 1.5]);
  });
});

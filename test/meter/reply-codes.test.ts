// The meter's reply codes: every ok:false reply of the built bundle carries a code from
// schema/meter-reply.ts, and the gateway's meter sink keeps aside (does not retry) exactly the
// permanent ones, talking to the bundle over HTTP as it would to Apps Script.
import { mkdtempSync, readFileSync, existsSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { WebAppSink } from '../../gateway/src/meter-web-app';
import { normalizeEvent } from '../../schema/event-record';
import { METER_REPLY_CODES } from '../../schema/meter-reply';
import { FakePlatform, callJson, loadBundle, webEvent, type Bundle, type FakeTextOutput } from './fakes/platform';
import { aCall } from './maintenance-setup';
import { SHEETS_CALL } from './fakes/calls';

const SECRET = 'codes-secret';

function freshMeter() {
  const platform = new FakePlatform();
  platform.clock.set('2026-11-22T12:00:00Z');
  const meter = loadBundle(platform);
  meter.setup();
  platform.properties.setProperty('SECRET_TOKEN', SECRET);
  return { platform, meter };
}

describe('reply codes of the web app', () => {
  it('every refusal carries the code that says what kind it is', () => {
    const { platform, meter } = freshMeter();
    const post = (body: unknown, params: Record<string, string> = {}) => callJson(meter, 'doPost', { token: SECRET, ...params }, body);
    const get = (params: Record<string, string>) => callJson(meter, 'doGet', { token: SECRET, ...params });
    const cases: Array<[string, unknown]> = [
      ['unauthorized', callJson(meter, 'doPost', { token: 'wrong' }, {})],
      ['invalid_body', post('not json')],
      ['invalid_body', post({ events: 'x' })],
      ['invalid_event', post({ events: [{}, { cost_usd: -1 }] })],
      ['future_timestamp', post({ timestamp: '2099-01-01T00:00:00Z' })],
      ['too_many_events', post({ events: Array.from({ length: 501 }, () => ({})) })],
      ['invalid_call', post({ calls: [{ call_id: 'c' }] })],
      ['unknown_action', post({}, { action: 'drop_tables' })],
      ['unknown_action', get({ action: 'drop' })],
      ['invalid_argument', get({ action: 'export', since: 'yesterday' })],
      ['invalid_argument', get({ action: 'export', what: 'invoices', since: '2026-11-01' })],
      ['invalid_argument', post({ call_id: 'c', idempotency_key: 'key-00000001', args: { phone: '' } }, { action: 'create_lead' })],
    ];
    const leadBody = { call_id: 'c', idempotency_key: 'key-00000002', args: { name: 'Rui', phone: '+351930000000' } };
    post(leadBody, { action: 'create_lead' });
    platform.spreadsheet.tab('idempotency')!.data[1].splice(2, 3, '', '2026-11-22T12:00:00.000Z', '{"lead');
    cases.push(['record_unreadable', post(leadBody, { action: 'create_lead' })]);
    platform.spreadsheet.tab('Config')!.data[1][1] = '50$';
    cases.push(['config_error', get({ action: 'spend' })]);
    platform.lock.busy = true;
    cases.push(['busy', post({})]);
    platform.lock.busy = false;
    platform.calls.failAfter(() => true, SHEETS_CALL);
    cases.push(['internal', post({})]);
    const events = platform.spreadsheet.tab('events')!;
    const otherCells = platform.spreadsheet.sheets.filter((s) => s !== events).reduce((n, s) => n + s.maxRows * s.maxColumns, 0);
    events.maxRows = Math.floor((10_000_000 - otherCells) / 19);
    events.loadRows(events.maxRows - 1, [Array(19).fill('x')]);
    cases.push(['spreadsheet_full', post({ events: [{}, {}] })]);
    platform.spreadsheet.sheets.splice(platform.spreadsheet.sheets.indexOf(events), 1);
    cases.push(['not_set_up', post({})]);
    for (const [code, reply] of cases) {
      expect(reply).toMatchObject({ ok: false, code, error: expect.any(String) });
      expect(Object.keys(METER_REPLY_CODES)).toContain(code);
    }
    expect(new Set(cases.map(([code]) => code)).size).toBe(Object.keys(METER_REPLY_CODES).length);
  });
});

describe('a full spreadsheet', () => {
  it('refuses call records that would grow their tab past the cell limit as spreadsheet_full; nothing is written', () => {
    const { platform, meter } = freshMeter();
    const calls = platform.spreadsheet.tab('calls')!;
    // No spare rows in events_public either: a write near the limit takes those back first (digest.test.ts).
    const pub = platform.spreadsheet.tab('events_public');
    if (pub) pub.maxRows = Math.max(1, platform.spreadsheet.tab('events')!.data.length);
    const otherCells = platform.spreadsheet.sheets.filter((s) => s !== calls).reduce((n, s) => n + s.maxRows * s.maxColumns, 0);
    calls.maxRows = Math.floor((10_000_000 - otherCells) / calls.maxColumns);
    calls.loadRows(calls.maxRows - 1, [Array(calls.maxColumns).fill('x')]);
    const before = calls.data.length;
    const call = (id: string) => aCall({ call_id: id, started_at: '2026-11-22T10:00:00.000Z' });
    const reply = callJson(meter, 'doPost', { token: SECRET }, { calls: [call('a'), call('b')] });
    expect(reply).toMatchObject({ ok: false, code: 'spreadsheet_full' });
    expect(calls.data.length).toBe(before);
  });
});

/** The bundle behind HTTP as Apps Script serves it: POST → 302 → GET the reply. `override` replaces replies. */
class MeterOverHttp {
  server!: Server;
  url = '';
  override: ((body: string) => object | null) | null = null;
  private replies = new Map<string, string>();
  constructor(private readonly meter: Bundle) {}
  async start() {
    let n = 0;
    this.server = createServer(async (req, res) => {
      let body = '';
      for await (const chunk of req) body += chunk;
      const url = new URL(req.url!, 'http://x');
      if (req.method === 'POST') {
        const overridden = this.override?.(body);
        const reply = overridden
          ? JSON.stringify(overridden)
          : (this.meter.doPost(webEvent(Object.fromEntries(url.searchParams), body)) as FakeTextOutput).getContent();
        const key = `k${n++}`;
        this.replies.set(key, reply);
        return void res.writeHead(302, { location: `/echo?user_content_key=${key}` }).end();
      }
      res.writeHead(200, { 'content-type': 'application/json' }).end(this.replies.get(url.searchParams.get('user_content_key')!) ?? '{}');
    });
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}/exec`;
    return this;
  }
  stop() {
    this.server.closeAllConnections();
    return new Promise<void>((r) => this.server.close(() => r()));
  }
}

const quiet = { warn: () => {}, info: () => {}, error: () => {} };
let http: MeterOverHttp | undefined;
afterEach(async () => {
  await http?.stop();
  http = undefined;
});

describe("the gateway's meter sink decides by the code", () => {
  async function sinkTo() {
    const { platform, meter } = freshMeter();
    http = await new MeterOverHttp(meter).start();
    const spoolDir = mkdtempSync(join(tmpdir(), 'codes-spool-'));
    const sink = new WebAppSink({ url: http.url, token: SECRET, spoolDir, flushIntervalMs: 60_000, maxBackoffMs: 0, log: quiet });
    const rejected = () =>
      existsSync(join(spoolDir, 'rejected.jsonl')) ? readFileSync(join(spoolDir, 'rejected.jsonl'), 'utf8').trim().split('\n') : [];
    return { platform, sink, rejected, stored: () => platform.spreadsheet.tab('events')!.data.length - 1 };
  }
  const event = (id: string, over: object = {}) => ({
    ...normalizeEvent({ event_id: id, cost_usd: 0.01 }, { now: () => new Date('2026-11-22T11:00:00Z'), uuid: () => 'u' }),
    ...over,
  });

  it('a batch the meter refuses as invalid is kept aside, not retried; the next batch goes through', async () => {
    const { sink, rejected, stored } = await sinkTo();
    sink.send({ ...event('bad'), timestamp: new Date('2099-01-01T00:00:00Z') }); // future_timestamp
    await sink.flush();
    expect(rejected()).toHaveLength(1);
    expect(sink.stats).toMatchObject({ rejected: 1, failedPosts: 0 });
    sink.send(event('good'));
    await sink.flush();
    expect(stored()).toBe(1);
    await sink.close();
  });

  it('busy, and a refusal without a code (an older meter), stay spooled and are delivered later', async () => {
    const { platform, sink, rejected, stored } = await sinkTo();
    platform.lock.busy = true;
    sink.send(event('e1'));
    await sink.flush();
    expect(sink.stats.failedPosts).toBe(1);
    platform.lock.busy = false;
    http!.override = () => ({ ok: false, error: 'events[0].cost_usd: expected a number >= 0' });
    await sink.flush();
    expect(sink.stats.failedPosts).toBe(2);
    http!.override = null;
    await sink.flush();
    expect(stored()).toBe(1);
    expect(rejected()).toEqual([]);
    await sink.close();
  });
});

// The built Apps Script bundle, executed as built in node:vm against the fakes: what it holds,
// setup(), and the manifest's scopes.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { EVENT_FIELDS } from '../../schema/event-record';
import { Formula } from './fakes/cells';
import { DIST, FakePlatform, bundleSource, callJson, loadBundle } from './fakes/platform';

describe('the bundle as built', () => {
  const source = bundleSource();

  it('holds only the manifest and .js files', async () => {
    const { readdirSync } = await import('node:fs');
    expect(readdirSync(DIST).sort()).toEqual(['appsscript.json', 'meter.js']);
  });

  it('has no module syntax or Node APIs left', () => {
    expect(source).not.toMatch(/^\s*(import|export)\s/m);
    expect(source).not.toMatch(/\brequire\s*\(/);
    expect(source).not.toMatch(/\b(process|Buffer|__dirname|globalThis\.process)\b/);
  });

  it('defines at top level every global function the web app, the triggers and the menu call', () => {
    const platform = new FakePlatform();
    const meter = loadBundle(platform);
    const globals = ['doPost', 'doGet', 'setup', 'onOpen', 'checkSpendCaps', 'applyRetention', 'exportArchive', 'sendWeeklyDigest'];
    for (const name of globals) {
      expect(source).toMatch(new RegExp(`^function ${name}\\(`, 'm'));
      expect(typeof meter[name]).toBe('function');
    }
  });

  it('has the manifest the deployment needs', () => {
    const manifest = JSON.parse(readFileSync(join(DIST, 'appsscript.json'), 'utf8'));
    expect(manifest).toMatchObject({
      runtimeVersion: 'V8',
      timeZone: 'Etc/UTC',
      exceptionLogging: 'STACKDRIVER',
      webapp: { executeAs: 'USER_DEPLOYING', access: 'ANYONE_ANONYMOUS' },
    });
    expect(manifest.oauthScopes.length).toBeGreaterThan(0);
  });
});

describe('setup()', () => {
  it('creates the events and Config tabs as docs/meter.md says', () => {
    const platform = new FakePlatform();
    const meter = loadBundle(platform);
    meter.setup();
    const events = platform.spreadsheet.tab('events')!;
    expect(events.data[0]).toEqual([...EVENT_FIELDS]);
    expect(events.frozenRows).toBe(1);
    expect(events.maxColumns).toBe(19);
    expect(events.filter).not.toBeNull();
    const formats = new Map(events.numberFormats.map((f) => [f.column, f.value]));
    expect(formats.get(2)).toMatch(/yyyy-mm-dd.*hh:mm:ss/);
    expect(formats.get(7)).toBe('0');
    expect(formats.get(10)).toMatch(/0\.0000##/);
    const lists = events.validations.filter((v) => (v.value as { kind: string }).kind === 'list').map((v) => v.column);
    expect(lists.sort((a, b) => a - b)).toEqual([3, 18]);
    // Every decision the gateway writes is in the sheet's list, so its rows are not marked invalid.
    const decisions = events.validations.find((v) => v.column === 18)!.value as { values: string[] };
    for (const d of ['default', 'model', 'queue', 'human_review', 'fallback_variant', 'idempotent_replay'])
      expect(decisions.values).toContain(d);
    const boxes = events.validations.find((v) => (v.value as { kind: string }).kind === 'checkbox')!;
    expect([boxes.column, boxes.numColumns]).toEqual([15, 2]);
    expect(platform.spreadsheet.timeZone).toBe('Etc/GMT');

    const config = platform.spreadsheet.tab('Config')!;
    expect(config.data.slice(0, 4).map((r) => r[0])).toEqual(['key', 'DAILY_CAP_USD', 'BURN_7D_CAP_USD', 'SLACK_WEBHOOK_URL']);
    expect(config.data[1][1]).toBe(50);
    expect(config.data[2][1]).toBe(200);
    expect(config.data[3][1]).toBe('');
    expect(config.data[4][0]).toBe('SECRET_TOKEN');
    expect(String(config.data[4][1])).toMatch(/^[0-9a-f]{64}$/);
  });

  it('is safe to run again: same tabs, same secret, one trigger per handler', () => {
    const platform = new FakePlatform();
    const meter = loadBundle(platform);
    meter.setup();
    const secret = platform.spreadsheet.tab('Config')!.data[4][1];
    const triggerIds = platform.scriptApp.triggers.map((t) => t.getUniqueId());
    const second = meter.setup() as string;
    expect(second).toMatch(/Nothing to change/);
    meter.setup();
    expect(platform.spreadsheet.sheets.map((s) => s.nameForTest()).filter((n) => n === 'events')).toHaveLength(1);
    expect(platform.spreadsheet.tab('Config')!.data[4][1]).toBe(secret);
    expect(platform.scriptApp.triggers.map((t) => t.getUniqueId())).toEqual(triggerIds);
    const handlers = platform.scriptApp.triggers.map((t) => t.getHandlerFunction()).sort();
    expect(handlers).toEqual([...new Set(handlers)]);
    expect(handlers).toEqual(expect.arrayContaining(['checkSpendCaps', 'applyRetention', 'exportArchive', 'sendWeeklyDigest']));
    const weekly = platform.scriptApp.triggers.find((t) => t.getHandlerFunction() === 'sendWeeklyDigest')!.spec;
    expect(weekly).toMatchObject({ every: 'weeks', weekDay: 'MONDAY', atHour: 8, timeZone: 'Etc/UTC' });
  });

  it('repairs: a deleted header and a duplicated trigger are restored, operator rows are kept', () => {
    const platform = new FakePlatform();
    const meter = loadBundle(platform);
    meter.setup();
    const config = platform.spreadsheet.tab('Config')!;
    config.data[1][1] = 75; // operator's own cap
    const operatorRow = config.data.length + 1;
    config.loadRows(operatorRow, [['ON_CALL', 'ops@example.com']]);
    platform.spreadsheet.tab('events')!.data[0] = EVENT_FIELDS.map(() => '');
    platform.scriptApp.newTrigger('checkSpendCaps').timeBased().everyMinutes(5).create();
    meter.setup();
    expect(platform.spreadsheet.tab('events')!.data[0]).toEqual([...EVENT_FIELDS]);
    expect(config.data[1][1]).toBe(75);
    expect(config.data[operatorRow - 1]).toEqual(['ON_CALL', 'ops@example.com']);
    expect(config.data.filter((r) => r[0] === 'TEAM_EMAILS')).toHaveLength(1);
    expect(platform.scriptApp.triggers.filter((t) => t.getHandlerFunction() === 'checkSpendCaps')).toHaveLength(1);
  });

  it('adding a missing Config key leaves the other values as they are: text that looks like a number, formulas', () => {
    const platform = new FakePlatform();
    const meter = loadBundle(platform);
    meter.setup();
    const config = platform.spreadsheet.tab('Config')!;
    const row = (key: string) => config.data.find((r) => r[0] === key)!;
    // Typed with Sheets' quote prefix, so the cells hold text; and an operator's formula.
    row('SECRET_TOKEN')[1] = '000123';
    row('CALENDAR_ID')[1] = '2026-01-31';
    config.loadRows(config.data.length + 1, [['ON_CALL', new Formula('=Team!A1') as unknown as string]]);
    // An older Config without TEAM_EMAILS: setup adds it.
    config.data.splice(config.data.indexOf(row('TEAM_EMAILS')), 1);
    expect(meter.setup()).toMatch(/added TEAM_EMAILS/);
    expect(row('SECRET_TOKEN')[1]).toBe('000123');
    expect(row('CALENDAR_ID')[1]).toBe('2026-01-31');
    expect(row('ON_CALL')[1]).toEqual(new Formula('=Team!A1'));
    expect(config.data.filter((r) => r[0] === 'TEAM_EMAILS')).toHaveLength(1);
    // The secret still opens the web app.
    expect(callJson(meter, 'doGet', { action: 'spend', token: '000123' })).toMatchObject({ ok: true });
  });

  it('adds the meter menu on open', () => {
    const platform = new FakePlatform();
    const meter = loadBundle(platform);
    meter.onOpen();
    expect(platform.ui.menus[0].name).toBe('Meter');
    expect(platform.ui.menus[0].items.map(([, fn]) => fn)).toContain('setup');
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

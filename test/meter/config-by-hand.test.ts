// The Config tab as an operator edits it by hand: on the built bundle, a value is found whatever
// the case its key was typed in, and setup() does not add a second row beside it.
import { describe, expect, it } from 'vitest';
import { callJson } from './fakes/platform';
import { SECRET, freshMeter, post } from './maintenance-setup';

describe('Config keys typed by hand', () => {
  it('a cap whose key was retyped in lower case is the cap, not the default, and setup() adds no second row', () => {
    const { platform, meter } = freshMeter('2026-11-22T12:00:00Z');
    const config = platform.spreadsheet.tab('Config')!;
    const row = config.data.find((r) => r[0] === 'DAILY_CAP_USD')!;
    row[0] = ' daily_cap_usd ';
    row[1] = 10;
    expect(post(meter, { events: [{ cost_usd: 20 }] })).toMatchObject({ ok: true, appended: 1 });
    expect(callJson(meter, 'doGet', { action: 'spend', token: SECRET })).toMatchObject({ daily_cap_usd: 10, cap_exceeded: true });
    meter.setup();
    expect(config.data.filter((r) => String(r[0]).trim().toUpperCase() === 'DAILY_CAP_USD')).toHaveLength(1);
    expect(callJson(meter, 'doGet', { action: 'spend', token: SECRET })).toMatchObject({ daily_cap_usd: 10, cap_exceeded: true });
  });
});

describe('a Config key on two rows', () => {
  it('with two different caps is refused, naming the rows, rather than the first row winning unsaid', () => {
    const { platform, meter } = freshMeter('2026-11-22T12:00:00Z');
    const config = platform.spreadsheet.tab('Config')!;
    const at = config.data.length + 1;
    config.data.push(['DAILY_CAP_USD', 10]);
    expect(post(meter, { events: [{ cost_usd: 20 }] })).toMatchObject({ ok: true, appended: 1 });
    const answer = callJson(meter, 'doGet', { action: 'spend', token: SECRET });
    expect(answer).toMatchObject({ ok: false, code: 'config_error' });
    expect(answer.error).toBe(`Config DAILY_CAP_USD is on rows 2 and ${at} with different values: keep one row`);
    expect(() => meter.checkSpendCaps()).toThrow(/Config DAILY_CAP_USD is on rows 2 and/);
  });

  it('of the secret is refused without quoting either value', () => {
    const { platform, meter } = freshMeter('2026-11-22T12:00:00Z');
    platform.properties.deleteProperty('SECRET_TOKEN');
    const config = platform.spreadsheet.tab('Config')!;
    const secret = String(config.data.find((r) => r[0] === 'SECRET_TOKEN')![1]);
    config.data.push(['SECRET_TOKEN', 'typed-again']);
    const reply = callJson(meter, 'doPost', { token: 'typed-again' }, { cost_usd: 1 });
    expect(reply).toMatchObject({ ok: false, code: 'config_error' });
    expect(reply.error).toMatch(/^Config SECRET_TOKEN is on rows 5 and \d+ with different values: keep one row$/);
    expect(JSON.stringify(reply)).not.toContain(secret);
  });

  it('with the same value twice is read as that value', () => {
    const { platform, meter } = freshMeter('2026-11-22T12:00:00Z');
    platform.spreadsheet.tab('Config')!.data.push(['daily_cap_usd', ' 50 ']);
    expect(callJson(meter, 'doGet', { action: 'spend', token: SECRET })).toMatchObject({ ok: true, daily_cap_usd: 50 });
  });
});

describe('the Config tab renamed by hand', () => {
  it('is refused as not set up, rather than the web app turning open and the caps back to their defaults', () => {
    const { platform, meter } = freshMeter('2026-11-22T12:00:00Z');
    platform.properties.deleteProperty('SECRET_TOKEN'); // the secret setup() wrote in the tab
    const config = platform.spreadsheet.tab('Config')!;
    config.data.find((r) => r[0] === 'DAILY_CAP_USD')![1] = 10;
    config.setName('Settings');
    const reply = callJson(meter, 'doPost', { token: 'anything' }, { cost_usd: 20 });
    expect(reply).toMatchObject({ ok: false, code: 'not_set_up' });
    expect(reply.error).toMatch(/the "Config" tab is missing/);
    expect(platform.spreadsheet.tab('events')!.data.length).toBe(1);
    expect(() => meter.checkSpendCaps()).toThrow(/the "Config" tab is missing/);
  });
});

describe('the secret kept out of the sheet', () => {
  it('as a Script Property, with the Config cell emptied: setup() run again writes no new secret into the sheet', () => {
    // It filled the emptied cell with a fresh random secret and said so ("generated a random
    // SECRET_TOKEN"): a secret back in the sheet, and one that authenticates nothing while the
    // property wins, so a gateway given it was refused as unauthorized.
    const { platform, meter } = freshMeter('2026-11-22T12:00:00Z');
    const row = platform.spreadsheet.tab('Config')!.data.find((r) => r[0] === 'SECRET_TOKEN')!;
    row[1] = '';
    expect(meter.setup()).not.toMatch(/SECRET_TOKEN/);
    expect(row[1]).toBe('');
    expect(post(meter, { cost_usd: 1 })).toMatchObject({ ok: true, appended: 1 });
    // With no secret anywhere, setup() still makes one.
    platform.properties.deleteProperty('SECRET_TOKEN');
    expect(meter.setup()).toMatch(/generated a random SECRET_TOKEN/);
    expect(String(row[1])).toMatch(/^[0-9a-f]{64}$/);
  });
});

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

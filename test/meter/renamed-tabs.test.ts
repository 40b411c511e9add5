// A tab of the meter renamed by hand (events → "Events 2026", the hidden idempotency tab): on the
// built bundle, the meter refuses naming the renamed tab rather than making a new, empty one that
// it would then read alone (today's spend unseen by the caps, a retried action run twice).
import { describe, expect, it } from 'vitest';
import { callJson } from './fakes/platform';
import { SECRET, aCall, eventsTab, freshMeter, post } from './maintenance-setup';
import { backOffice, lead } from './backoffice-setup';

const renamedEvents = /the "events" tab is missing, and the tab "Events 2026" has its header: rename "Events 2026" back to "events"/;

function meterWithEventsRenamed() {
  const { platform, meter } = freshMeter('2026-11-22T12:00:00Z');
  expect(post(meter, { events: [{ event_id: 'big', cost_usd: 80 }] })).toMatchObject({ ok: true, appended: 1 });
  eventsTab(platform).setName('Events 2026');
  return { platform, meter };
}

describe('the events tab renamed by hand', () => {
  it('the spend answer and ingest refuse, naming the renamed tab', () => {
    const { meter } = meterWithEventsRenamed();
    const spend = callJson(meter, 'doGet', { action: 'spend', token: SECRET });
    expect(spend).toMatchObject({ ok: false, code: 'not_set_up', error: expect.stringMatching(renamedEvents) });
    expect(post(meter, { events: [{ event_id: 'next', cost_usd: 1 }] })).toMatchObject({ ok: false, code: 'not_set_up' });
  });

  it('setup() makes no new events tab and says so, so the spend stays the $80 over the cap once renamed back', () => {
    const { platform, meter } = meterWithEventsRenamed();
    const said = meter.setup();
    expect(said).toMatch(new RegExp(`Note: ${renamedEvents.source}`));
    expect(platform.spreadsheet.tab('events')).toBeUndefined();
    platform.spreadsheet.tab('Events 2026')!.setName('events');
    expect(callJson(meter, 'doGet', { action: 'spend', token: SECRET })).toMatchObject({
      ok: true,
      today_cost_usd: 80,
      cap_exceeded: true,
    });
  });

  it('a tab simply deleted is still made again by setup()', () => {
    const { platform, meter } = freshMeter('2026-11-22T12:00:00Z');
    const { sheets } = platform.spreadsheet;
    sheets.splice(sheets.indexOf(eventsTab(platform)), 1);
    expect(meter.setup()).toMatch(/created tab events/);
    expect(callJson(meter, 'doGet', { action: 'spend', token: SECRET })).toMatchObject({ ok: true, today_cost_usd: 0 });
  });
});

describe('the idempotency tab renamed by hand', () => {
  it('a retried action is refused naming the renamed tab, not run a second time', () => {
    const { platform, act, rows } = backOffice();
    expect(act('create_lead', lead())).toMatchObject({ ok: true, replayed: false });
    platform.spreadsheet.tab('idempotency')!.setName('keys');
    const retry = act('create_lead', lead());
    expect(retry).toMatchObject({ ok: false, code: 'not_set_up' });
    expect(retry.error).toMatch(/the "idempotency" tab is missing, and the tab "keys" has its header/);
    expect(rows('leads')).toHaveLength(1);
  });
});

describe('the calls tab renamed by hand', () => {
  function meterWithCallsRenamed() {
    const { platform, meter } = freshMeter('2026-11-22T12:00:00Z');
    expect(post(meter, { calls: [aCall({ started_at: '2026-11-22T10:00:00.000Z' })] })).toMatchObject({ ok: true, appended: 1 });
    platform.spreadsheet.tab('calls')!.setName('Calls Nov');
    return { platform, meter };
  }
  const renamedCalls = /the "calls" tab is missing, and the tab "Calls Nov" has its header/;

  it('the export of the calls refuses naming it, rather than answering no calls', () => {
    const { meter } = meterWithCallsRenamed();
    const answer = callJson(meter, 'doGet', { action: 'export', what: 'calls', since: '2026-11-01', token: SECRET });
    expect(answer).toMatchObject({ ok: false, code: 'not_set_up', error: expect.stringMatching(renamedCalls) });
  });

  it('the digest refuses rather than showing no calls in its voice rollups', () => {
    const { meter } = meterWithCallsRenamed();
    expect(() => meter.refreshDigest()).toThrow(renamedCalls);
  });
});

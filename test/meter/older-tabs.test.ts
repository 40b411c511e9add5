// Tabs made by an earlier version, before a column was added at their end (the calls tab's
// ended_reason, the back office's idempotency_key), where the operator had since kept a column of
// their own in that place: on the built bundle, the meter's new column is not written over theirs.
import { describe, expect, it } from 'vitest';
import { CALL_FIELDS } from '../../schema/call-record';
import { callJson } from './fakes/platform';
import { SECRET, aCall, freshMeter, post } from './maintenance-setup';
import { backOffice, lead } from './backoffice-setup';

/** The calls tab as an earlier version made it (no ended_reason), with the operator's notes column after it. */
function meterWithOldCallsTab() {
  const { platform, meter } = freshMeter('2026-11-22T12:00:00Z');
  const calls = platform.spreadsheet.tab('calls')!;
  const old = CALL_FIELDS.slice(0, -1);
  const row = old.map((f) => (f === 'started_at' ? new Date('2026-11-22T09:00:00Z') : f === 'call_id' ? 'c-old' : ''));
  calls.data = [
    [...old, 'notes'],
    [...row, 'call back Monday'],
  ];
  return { platform, meter, calls };
}

describe('a calls tab from before ended_reason, with an operator column where it now goes', () => {
  it('a post of call records is refused naming the column, and the notes stay theirs', () => {
    const { meter, calls } = meterWithOldCallsTab();
    const reply = post(meter, { calls: [aCall({ started_at: '2026-11-22T10:00:00.000Z', ended_reason: 'caller_hangup' })] });
    expect(reply).toMatchObject({ ok: false, code: 'config_error' });
    expect(reply.error).toMatch(
      /calls: cell O1 holds "notes" where this version keeps "ended_reason".*Insert an empty column before column O so yours move to the right/,
    );
    expect(calls.data[0][14]).toBe('notes');
    expect(calls.data.length).toBe(2);
  });

  it('setup() leaves the column as it is and says so', () => {
    const { meter, calls } = meterWithOldCallsTab();
    expect(meter.setup()).toMatch(/Note: calls: cell O1 holds "notes" where this version keeps "ended_reason"/);
    expect(calls.data[0][14]).toBe('notes');
  });

  it('the export of the calls tab refuses rather than exporting the notes as ended_reason', () => {
    const { meter } = meterWithOldCallsTab();
    const answer = callJson(meter, 'doGet', { action: 'export', what: 'calls', since: '2026-11-01', token: SECRET });
    expect(answer).toMatchObject({ ok: false, code: 'config_error' });
    expect(answer.error).toMatch(/cell O1 holds "notes"/);
  });

  it('once the operator inserts an empty column before theirs, records go in and the notes follow', () => {
    const { meter, calls } = meterWithOldCallsTab();
    for (const line of calls.data) line.splice(14, 0, '');
    calls.maxColumns += 1;
    expect(post(meter, { calls: [aCall({ started_at: '2026-11-22T10:00:00.000Z', ended_reason: 'caller_hangup' })] })).toMatchObject({
      ok: true,
      appended: 1,
    });
    expect(calls.data[0].slice(14, 16)).toEqual(['ended_reason', 'notes']);
    expect(calls.data[1][15]).toBe('call back Monday');
    expect(calls.data[2][14]).toBe('caller_hangup');
  });
});

describe('a leads tab from before idempotency_key, with an operator column where it now goes', () => {
  it('create_lead is refused naming the column, and the tab is left as it is', () => {
    const { platform, act, rows } = backOffice();
    const leads = platform.spreadsheet.tab('leads')!;
    const header = [...leads.data[0].slice(0, 12), 'owner'];
    leads.data = [header, ['L-1', '', 'c0', '+351930000001', 'Rita', '', '', '', '', '', 'new', '', 'Joana']];
    const reply = act('create_lead', lead());
    expect(reply).toMatchObject({ ok: false, code: 'config_error' });
    expect(reply.error).toMatch(/leads: cell M1 holds "owner" where this version keeps "idempotency_key"/);
    expect(leads.data[0]).toEqual(header);
    expect(rows('leads')).toHaveLength(1);
  });
});

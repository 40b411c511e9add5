// Columns of the events tab moved or renamed by hand: on the built bundle, what reads the tab by
// column refuses, naming the tab, the cell and the header it expected, instead of reading another
// field as the cost (a cost column dragged to the end left `eval_score`, empty, read as $0).
import { describe, expect, it } from 'vitest';
import { CALL_FIELDS } from '../../schema/call-record';
import { EVENT_FIELDS } from '../../schema/event-record';
import { callJson } from './fakes/platform';
import { SECRET, WEBHOOK, aCall, eventsTab, freshMeter, post, setConfig } from './maintenance-setup';
import { backOffice, lead } from './backoffice-setup';

/** The meter with $80 spent today and the cost column dragged to the end, as Sheets moves a column. */
function meterWithCostColumnMoved() {
  const { platform, meter } = freshMeter('2026-11-22T12:00:00Z');
  expect(post(meter, { events: [{ event_id: 'big', cost_usd: 80 }] })).toMatchObject({ ok: true, appended: 1 });
  const cost = EVENT_FIELDS.indexOf('cost_usd');
  for (const row of eventsTab(platform).data) row.push(...row.splice(cost, 1));
  return { platform, meter };
}

const refusal = /events tab, cell J1: expected the header "cost_usd", found "eval_score"/;

describe('columns of the events tab moved by hand', () => {
  it('the spend answer refuses, naming the cell, rather than a cost of $0 under the cap', () => {
    const { meter } = meterWithCostColumnMoved();
    const answer = callJson(meter, 'doGet', { action: 'spend', token: SECRET });
    expect(answer).toMatchObject({ ok: false, code: 'config_error' });
    expect(answer.error).toMatch(refusal);
  });

  it('checkSpendCaps stops with the same error rather than finding spend under the cap', () => {
    const { platform, meter } = meterWithCostColumnMoved();
    setConfig(platform, 'SLACK_WEBHOOK_URL', WEBHOOK);
    expect(() => meter.checkSpendCaps()).toThrow(refusal);
  });

  it('the digest, the export and retention refuse too, and write nothing', () => {
    const { platform, meter } = meterWithCostColumnMoved();
    const before = JSON.stringify(eventsTab(platform).data);
    expect(() => meter.refreshDigest()).toThrow(refusal);
    expect(() => meter.exportArchive()).toThrow(refusal);
    expect(() => meter.applyRetention()).toThrow(refusal);
    expect(JSON.stringify(eventsTab(platform).data)).toBe(before);
  });

  it('a header renamed in place is refused the same way until setup() writes it back', () => {
    const { platform, meter } = freshMeter('2026-11-22T12:00:00Z');
    post(meter, { events: [{ event_id: 'a', cost_usd: 80 }] });
    eventsTab(platform).data[0][EVENT_FIELDS.indexOf('cost_usd')] = 'Cost (USD)';
    expect(callJson(meter, 'doGet', { action: 'spend', token: SECRET }).error).toMatch(
      /cell J1: expected the header "cost_usd", found "Cost \(USD\)"/,
    );
    meter.setup();
    expect(callJson(meter, 'doGet', { action: 'spend', token: SECRET })).toMatchObject({
      ok: true,
      today_cost_usd: 80,
      cap_exceeded: true,
    });
  });
});

describe('setup() on an events tab with columns moved by hand', () => {
  it('leaves the header as it is and says so, so the moved cost column is still refused rather than read as eval_score', () => {
    const { platform, meter } = meterWithCostColumnMoved();
    const header = [...eventsTab(platform).data[0]];
    const said = meter.setup();
    expect(said).toMatch(/Note: events: .*cell J1 holds "eval_score", expected "cost_usd".*header left as it is/);
    expect(said).toMatch(/Note: Digest not refreshed: events tab, cell J1/);
    expect(eventsTab(platform).data[0]).toEqual(header);
    expect(callJson(meter, 'doGet', { action: 'spend', token: SECRET }).error).toMatch(refusal);
  });
});

describe('ingest into an events tab with columns moved by hand', () => {
  it('refuses the batch, naming the cell, rather than writing each value under another field', () => {
    const { platform, meter } = meterWithCostColumnMoved();
    const before = eventsTab(platform).data.length;
    const reply = post(meter, { events: [{ event_id: 'after-move', cost_usd: 5, eval_score: 0.9 }] });
    expect(reply).toMatchObject({ ok: false, code: 'config_error' });
    expect(reply.error).toMatch(refusal);
    expect(eventsTab(platform).data.length).toBe(before);
  });
});

describe('a column of the events tab deleted by hand', () => {
  it('is refused by name (config_error), not with Google\'s "coordinates of the range are outside the dimensions" (internal)', () => {
    const { platform, meter } = freshMeter('2026-11-22T12:00:00Z');
    post(meter, { events: [{ event_id: 'a', cost_usd: 1 }] });
    eventsTab(platform).deleteColumns(EVENT_FIELDS.indexOf('eval_score') + 1, 1); // always empty, so someone removed it
    const deleted = /events tab: 18 columns where the meter keeps 19 .*a column was deleted by hand/;
    const reply = post(meter, { events: [{ event_id: 'b', cost_usd: 5 }] });
    expect(reply).toMatchObject({ ok: false, code: 'config_error' });
    expect(reply.error).toMatch(deleted);
    expect(() => meter.checkSpendCaps()).toThrow(deleted);
    expect(() => meter.refreshDigest()).toThrow(deleted);
    expect(() => meter.exportArchive()).toThrow(deleted);
    expect(() => meter.applyRetention()).toThrow(deleted);
    expect(eventsTab(platform).data.map((r) => r[0])).toEqual(['event_id', 'a']);
  });
});

describe('setup() on a back-office tab with columns moved by hand', () => {
  it('leaves the header of the contacts tab as it is and names the moved cells', () => {
    const { platform, meter } = freshMeter('2026-11-22T12:00:00Z');
    const contacts = platform.spreadsheet.tab('contacts')!;
    contacts.data.push(['+15550100', 'ada@example.com', 'Ada', 'c1', 'book', '', false, '', '']);
    for (const row of contacts.data) [row[1], row[2]] = [row[2], row[1]]; // email dragged before name
    const header = [...contacts.data[0]];
    expect(meter.setup()).toMatch(
      /Note: contacts: columns were moved by hand \(cell B1 holds "email", expected "name"; cell C1 holds "name", expected "email"\); header left as it is/,
    );
    expect(contacts.data[0]).toEqual(header);
  });
});

describe('a back-office action on a tab with columns moved by hand', () => {
  it('is refused with config_error naming the cells, and nothing lands under another column', () => {
    const { platform, act, rows } = backOffice();
    const leads = platform.spreadsheet.tab('leads')!;
    for (const row of leads.data) [row[4], row[5]] = [row[5], row[4]]; // email dragged before name
    const reply = act('create_lead', lead());
    expect(reply).toMatchObject({ ok: false, code: 'config_error' });
    expect(reply.error).toMatch(
      /leads: columns were moved by hand \(cell E1 holds "email", expected "name"; cell F1 holds "name", expected "email"\)/,
    );
    expect(rows('leads')).toEqual([]);
  });
});

describe('a post of call records into a calls tab with columns moved by hand', () => {
  it('is refused with config_error naming the cells, writing nothing', () => {
    const { platform, meter } = freshMeter('2026-11-22T12:00:00Z');
    const calls = platform.spreadsheet.tab('calls')!;
    for (const row of calls.data) [row[1], row[2]] = [row[2], row[1]];
    const reply = post(meter, { calls: [aCall()] });
    expect(reply).toMatchObject({ ok: false, code: 'config_error' });
    expect(reply.error).toMatch(/^calls: columns were moved by hand \(cell B1 holds "duration_s", expected "started_at"/);
    expect(calls.data.length).toBe(1);
  });
});

describe('the calls tab with columns moved by hand, read', () => {
  function meterWithCallsMoved() {
    const { platform, meter } = freshMeter('2026-11-22T12:00:00Z');
    expect(post(meter, { calls: [aCall({ started_at: '2026-11-22T10:00:00.000Z' })] })).toMatchObject({ ok: true, appended: 1 });
    const calls = platform.spreadsheet.tab('calls')!;
    const cost = CALL_FIELDS.indexOf('est_audio_cost_usd');
    for (const row of calls.data) row.push(...row.splice(cost, 1));
    return { platform, meter };
  }
  const callsRefusal = /calls: columns were moved by hand \(cell L1 holds "telephony_minutes", expected "est_audio_cost_usd"/;

  it('the digest refuses rather than reading another column as the audio cost', () => {
    const { meter } = meterWithCallsMoved();
    expect(() => meter.refreshDigest()).toThrow(callsRefusal);
  });

  it("does not hold back the spend: the Digest's spend figures are refreshed and the weekly e-mail goes out, saying why the voice block is not", () => {
    const { platform, meter } = meterWithCallsMoved();
    expect(post(meter, { events: [{ event_id: 'spent', cost_usd: 12.5 }] })).toMatchObject({ ok: true, appended: 1 });
    expect(() => meter.refreshDigest()).toThrow(callsRefusal);
    const digest = platform.spreadsheet.tab('Digest')!.data;
    expect(digest[3].slice(0, 3)).toEqual([12.5, 12.5, 12.5]);
    const voice = digest.findIndex((row) => row[0] === 'Voice concierge (calls tab)');
    expect(String(digest[voice][1])).toMatch(/^not read: calls: columns were moved by hand/);
    setConfig(platform, 'TEAM_EMAILS', 'finance@example.com');
    expect(meter.sendWeeklyDigest()).toMatch(/^sent to 1 recipient\(s\); .*voice rollups were not read: calls: columns were moved by hand/);
    expect(platform.mail.sent).toHaveLength(1);
    expect(platform.mail.sent[0].subject).toBe('AI spend digest: $12.50 in the last 7 days');
  });

  it("setup() says the Digest's spend figures were refreshed and only its voice block was not", () => {
    const { platform, meter } = meterWithCallsMoved();
    expect(post(meter, { events: [{ event_id: 'spent', cost_usd: 12.5 }] })).toMatchObject({ ok: true, appended: 1 });
    const said = meter.setup();
    expect(said).not.toMatch(/Digest not refreshed/);
    expect(said).toMatch(/Note: Digest refreshed but for its voice block: calls: columns were moved by hand/);
    expect(platform.spreadsheet.tab('Digest')!.data[3].slice(0, 3)).toEqual([12.5, 12.5, 12.5]);
  });

  it('the weekly e-mail does not say the Digest tab could not be refreshed when only its voice block was not', () => {
    const { platform, meter } = meterWithCallsMoved();
    expect(post(meter, { events: [{ event_id: 'spent', cost_usd: 12.5 }] })).toMatchObject({ ok: true, appended: 1 });
    setConfig(platform, 'TEAM_EMAILS', 'finance@example.com');
    const result = meter.sendWeeklyDigest();
    expect(result).not.toMatch(/could not be refreshed/);
    expect(result).toMatch(/^sent to 1 recipient\(s\); the voice rollups were not read: calls: columns were moved by hand/);
    const [mail] = platform.mail.sent;
    expect(mail.body).not.toMatch(/could not be refreshed/);
    expect(mail.htmlBody).not.toMatch(/could not be refreshed/);
    expect(mail.body).toMatch(
      /The voice rollups \(calls tab\) were not read, the Digest's voice block left n\/a: calls: columns were moved by hand/,
    );
    expect(mail.htmlBody).toMatch(/The voice rollups \(calls tab\) were not read, the Digest's voice block left n\/a/);
  });

  it('the weekly e-mail does not say the voice block was left n/a when the Digest tab could not be written at all', () => {
    const { platform, meter } = meterWithCallsMoved();
    expect(() => meter.refreshDigest()).toThrow(callsRefusal);
    const digestBefore = JSON.stringify(platform.spreadsheet.tab('Digest')!.data);
    setConfig(platform, 'TEAM_EMAILS', 'finance@example.com');
    platform.calls.failAfter((name) => name === 'Range.setFormula');
    expect(meter.sendWeeklyDigest()).toMatch(/the Digest tab could not be refreshed \(Service Spreadsheets timed out/);
    expect(JSON.stringify(platform.spreadsheet.tab('Digest')!.data)).toBe(digestBefore);
    const [mail] = platform.mail.sent;
    expect(mail.body).toMatch(/The Digest tab could not be refreshed: Service Spreadsheets timed out/);
    expect(mail.body).toMatch(/The voice rollups \(calls tab\) were not read: calls: columns were moved by hand/);
    expect(mail.body).not.toMatch(/left n\/a/);
    expect(mail.htmlBody).not.toMatch(/left n\/a/);
  });

  it('the export of the calls tab refuses with config_error', () => {
    const { meter } = meterWithCallsMoved();
    const answer = callJson(meter, 'doGet', { action: 'export', what: 'calls', since: '2026-11-01', token: SECRET });
    expect(answer).toMatchObject({ ok: false, code: 'config_error', error: expect.stringMatching(callsRefusal) });
  });
});

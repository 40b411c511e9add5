// ended_reason in the shared call record: the meter's calls tab (built bundle, fakes) including a
// tab made before the field existed, and the archive's voice rollups over a calls.csv that mixes
// rows written before and after it.
import { appendFileSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { openDuck } from '../../archive/duck';
import { voiceRollupSql } from '../../archive/voice-rollups';
import { CALL_FIELDS, callToCsvLine, type CallRecord } from '../../schema/call-record';
import { FakePlatform, callJson, loadBundle, webEvent, type FakeTextOutput } from '../meter/fakes/platform';

const record = (over: Partial<CallRecord>): CallRecord => ({
  call_id: 'c',
  started_at: '2026-11-21T10:00:00.000Z',
  duration_s: 60,
  model: 'gpt-realtime-mini',
  intent_primary: 'book',
  turns: 4,
  ttfb_s: 1.2,
  asr_wer: null,
  confidence_avg: 0.9,
  escalated: false,
  outcome: 'booking',
  est_audio_cost_usd: 0.1,
  telephony_minutes: 1,
  country: 'PT',
  ...over,
});

describe('ended_reason in the calls tab and the archive', () => {
  it('a calls tab from before the field gains the column at the end; old rows keep theirs; the export carries it', () => {
    const platform = new FakePlatform();
    platform.clock.set('2026-11-22T12:00:00Z');
    const meter = loadBundle(platform);
    meter.setup();
    platform.properties.setProperty('SECRET_TOKEN', 's');
    // The tab as an earlier release made it: 14 columns, one stored call.
    const tab = platform.spreadsheet.tab('calls')!;
    tab.deleteColumns(CALL_FIELDS.length, 1);
    tab.data[0] = tab.data[0].slice(0, CALL_FIELDS.length - 1);
    const old = { ...record({ call_id: 'old-1' }) };
    expect(callJson(meter, 'doPost', { token: 's' }, { calls: [old] })).toMatchObject({ ok: true, appended: 1 });
    const post = callJson(
      meter,
      'doPost',
      { token: 's' },
      { calls: [record({ call_id: 'new-1', escalated: true, ended_reason: 'low_confidence' })] },
    );
    expect(post).toEqual({ ok: true, appended: 1, duplicates: 0 });
    expect(tab.data[0]).toEqual([...CALL_FIELDS]);
    expect(tab.data.slice(1).map((r) => [r[0], r[14] ?? ''])).toEqual([
      ['old-1', ''],
      ['new-1', 'low_confidence'],
    ]);
    meter.setup(); // repairs again without complaint
    const csv = (meter.doGet(webEvent({ token: 's', action: 'export', what: 'calls', since: '2026-11-21' })) as FakeTextOutput)
      .getContent()
      .trim()
      .split('\r\n');
    expect(csv[0].split(',').at(-1)).toBe('ended_reason');
    expect(csv.slice(1).map((l) => l.split(',').at(-1))).toEqual(['', 'low_confidence']);
    const bad = callJson(meter, 'doPost', { token: 's' }, { calls: [record({ call_id: 'x', ended_reason: 'Hung Up!' })] });
    expect(bad).toMatchObject({ ok: false, error: expect.stringMatching(/^calls\[0\]\.ended_reason: /) });
  });

  it('the voice rollups read a calls.csv whose older rows have no ended_reason', async () => {
    const file = join(mkdtempSync(join(tmpdir(), 'calls-')), 'calls.csv');
    const oldHeader = CALL_FIELDS.slice(0, -1).join(',');
    const oldLine = callToCsvLine(record({ call_id: 'a' })).replace(/,$/, '');
    writeFileSync(file, `${oldHeader}\n${oldLine}\n`);
    appendFileSync(file, `${callToCsvLine(record({ call_id: 'b', escalated: true, outcome: 'abandoned', ended_reason: 'latency' }))}\n`);
    const duck = await openDuck();
    try {
      const [r] = await duck.all(voiceRollupSql(file, null));
      expect(r).toMatchObject({ calls: 2, answered_calls: 2, bookings: 1, escalations: 1 });
      const reasons = await duck.all(
        `SELECT call_id, ended_reason FROM read_csv('${file}', header = true, auto_detect = false, null_padding = true, columns = {${CALL_FIELDS.map((f) => `'${f}': 'VARCHAR'`).join(', ')}}) ORDER BY call_id`,
      );
      expect(reasons).toEqual([
        { call_id: 'a', ended_reason: null },
        { call_id: 'b', ended_reason: 'latency' },
      ]);
    } finally {
      duck.close();
    }
  });
});

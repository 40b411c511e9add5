/** A meter bundle with a clock the tests control, and small helpers, for the maintenance tests. */
import type { Cell } from './fakes/cells';
import { FakePlatform, callJson, loadBundle, type Bundle } from './fakes/platform';
import type { FakeSheet } from './fakes/spreadsheet';

export const SECRET = 'maintenance-secret';
export const WEBHOOK = 'https://hooks.slack.example/services/T000/B000/XXXX';

export function freshMeter(at = '2026-11-22T12:00:00.000Z') {
  const platform = new FakePlatform();
  platform.clock.set(at);
  const meter = loadBundle(platform);
  meter.setup();
  platform.properties.setProperty('SECRET_TOKEN', SECRET);
  return { platform, meter };
}
export const post = (meter: Bundle, body: unknown) => callJson(meter, 'doPost', { token: SECRET }, body);
const configRow = (platform: FakePlatform, key: string) => platform.spreadsheet.tab('Config')!.data.find((r) => r[0] === key)!;
export const setConfig = (platform: FakePlatform, key: string, value: Cell) => {
  configRow(platform, key)[1] = value;
};
export const eventsTab = (platform: FakePlatform) => platform.spreadsheet.tab('events')!;
export const dataRows = (sheet: FakeSheet) => sheet.data.slice(1);

/** A valid call record as the gateway sends it, with `over` in place of its fields. */
export const aCall = (over: Record<string, unknown> = {}) => ({
  call_id: 'c1',
  started_at: '2026-11-21T10:00:00.000Z',
  duration_s: 60,
  model: 'gpt-realtime',
  intent_primary: 'book',
  turns: 4,
  ttfb_s: null,
  asr_wer: null,
  confidence_avg: null,
  escalated: false,
  outcome: 'booking',
  est_audio_cost_usd: 0.1,
  telephony_minutes: 1,
  country: '',
  ...over,
});

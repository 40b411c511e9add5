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

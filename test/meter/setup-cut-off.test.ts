// setup() cut off by Google's services right after it made a back-office tab (Sheets timed out
// before it was sized and its header frozen): on the built bundle, running setup() again repairs
// the tab rather than leaving Google's 26-column grid, empty cells that count towards the
// spreadsheet's 10 million, for good.
import { describe, expect, it } from 'vitest';
import { SHEETS_CALL } from './fakes/calls';
import { FakePlatform, loadBundle } from './fakes/platform';

/** setup() on a new spreadsheet, Sheets timing out at the first call after the contacts tab is made. */
function cutAfterContactsMade() {
  const platform = new FakePlatform();
  platform.clock.set('2026-11-22T12:00:00Z');
  const meter = loadBundle(platform);
  const made = () => platform.spreadsheet.tab('contacts') !== undefined;
  platform.calls.failAfter((name) => name === 'Sheet.getMaxColumns' && made(), SHEETS_CALL);
  expect(() => meter.setup()).toThrow(/timed out/);
  return { platform, meter };
}

describe('setup() cut off just after making a back-office tab', () => {
  it('leaves it at 26 columns; setup() again gives it its 9 and freezes its header', () => {
    const { platform, meter } = cutAfterContactsMade();
    const contacts = platform.spreadsheet.tab('contacts')!;
    expect(contacts.maxColumns).toBe(26);
    meter.setup();
    expect(contacts.maxColumns).toBe(9);
    expect(contacts.frozenRows).toBe(1);
    expect(contacts.data[0]).toEqual([
      'phone',
      'name',
      'email',
      'call_id',
      'intent',
      'transcript_excerpt',
      'opted_out',
      'created_at',
      'updated_at',
    ]);
  });

  it('a column the operator put after the header, with values, is left as it is', () => {
    const { platform, meter } = cutAfterContactsMade();
    meter.setup();
    const contacts = platform.spreadsheet.tab('contacts')!;
    contacts.insertColumnsAfter(9, 2);
    contacts.data[0][10] = 'notes';
    meter.setup();
    expect(contacts.maxColumns).toBe(11);
    expect(contacts.data[0][10]).toBe('notes');
  });
});

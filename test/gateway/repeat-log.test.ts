// A warning one cause repeats: said at once, then once a minute with how many were not logged.
import { expect, it } from 'vitest';
import { RepeatLog } from '../../gateway/src/repeat-log';

it('each kind is logged the first time, then once per minute with the count of those not logged', () => {
  const lines: string[] = [];
  let now = 1_000_000;
  const repeats = new RepeatLog(() => now);
  const say = (kind: string, line: string) => {
    const more = repeats.due(kind);
    if (more !== null) lines.push(`${line}${more}`);
  };
  for (let i = 0; i < 5; i++) say('/twilio/voice unsigned', `refused ${i}`);
  say('/twilio/voice mismatch', 'mismatch 0'); // another kind is not held back by the first
  now += 60_000;
  say('/twilio/voice unsigned', 'refused 5');
  say('/twilio/voice unsigned', 'refused 6');
  expect(lines).toEqual([
    'refused 0; more alike are logged once a minute',
    'mismatch 0; more alike are logged once a minute',
    'refused 5; 4 more alike since the last line',
  ]);
});

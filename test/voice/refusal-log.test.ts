// Refused Twilio requests: each kind said at once, then once a minute with how many were not logged.
import { expect, it } from 'vitest';
import { RefusalLog } from '../../gateway/src/voice/phone/refusal-log';

it('each kind of refusal is logged the first time, then once per minute with the count of those not logged', () => {
  const lines: string[] = [];
  let now = 1_000_000;
  const log = new RefusalLog(
    (m) => lines.push(m),
    () => now,
  );
  for (let i = 0; i < 5; i++) log.refused('/twilio/voice unsigned', `refused ${i}`);
  log.refused('/twilio/voice mismatch', 'mismatch 0'); // another kind is not held back by the first
  now += 60_000;
  log.refused('/twilio/voice unsigned', 'refused 5');
  log.refused('/twilio/voice unsigned', 'refused 6');
  expect(lines).toEqual([
    'refused 0; more alike are logged once a minute',
    'mismatch 0; more alike are logged once a minute',
    'refused 5; 4 more refused alike since the last line',
  ]);
});

// VOICE_TENANT is the customer_id of every meter event a phone call makes: its responses, its
// transcriptions and its telephony minutes alike, so the meter's cost by customer holds the call whole.
import { afterEach, describe, expect, it } from 'vitest';
import { bridgeStack, ACCOUNT_SID, PUBLIC_URL, type BridgeStack } from './peers/bridge-stack';
import { brain } from './peers/script';
import { until } from './peers/wait';

let s: BridgeStack | null = null;
afterEach(async () => {
  await s?.close();
  s = null;
});

const RATES = { PT: { price_unit: 'USD', inbound: { local: 0.01 }, outbound: [], fetched_at: '2026-11-01T00:00:00.000Z' } };

describe('phone bridge: the tenant of a call', () => {
  it("every meter event of an answered call, the telephony minutes too, carries the bridge's tenant", async () => {
    s = await bridgeStack(undefined, { rates: RATES });
    s.realtime.brain = brain({});
    const call = await s.twilio.call('CA0801');
    await until(call, 'frame', () => call.playedBytes > 0 && call.playedBytes === call.receivedBytes, 'the greeting heard');
    call.hangUp();
    await s.endOf('CA0801');
    const events = s.meterEvents.filter((e) => e.job_id === 'CA0801');
    expect(events.map((e) => e.provider)).toContain('twilio');
    expect(events.map((e) => [e.provider, e.customer_id])).toEqual(events.map((e) => [e.provider, 'acme-dental']));
  });

  it('a call that ends without a stream (the monthly pause, a status callback) meters its minutes under the tenant too', async () => {
    s = await bridgeStack(undefined, { rates: RATES, statusGraceMs: 1 });
    await s.voice.rollup(1_000_000);
    const answer = await s.twilio.placeCall({
      CallSid: 'CA0802',
      AccountSid: ACCOUNT_SID,
      From: '+351910000002',
      To: '+351210000000',
      FromCountry: 'PT',
    });
    expect(answer.stream).toBeNull();
    const status = await s.twilio.callback(`${PUBLIC_URL}/twilio/status`, {
      CallSid: 'CA0802',
      AccountSid: ACCOUNT_SID,
      CallStatus: 'completed',
    });
    expect(status.status).toBe(204);
    await s.endOf('CA0802');
    const events = s.meterEvents.filter((e) => e.job_id === 'CA0802');
    expect(events.map((e) => [e.provider, e.customer_id])).toEqual([['twilio', 'acme-dental']]);
  });
});

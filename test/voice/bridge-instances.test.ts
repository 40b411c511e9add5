// Two gateway instances on one Redis, as behind a load balancer: Twilio's webhooks may reach one
// and the call's media stream the other. What a call's session decided on one instance holds for
// a callback that reaches the other.
import { afterEach, describe, expect, it } from 'vitest';
import { bridgeStack, ACCOUNT_SID, PUBLIC_URL, type BridgeStack } from './peers/bridge-stack';
import { brain, speak } from './peers/script';
import { until } from './peers/wait';

let s: BridgeStack | null = null;
afterEach(async () => {
  await s?.close();
  s = null;
});

const FORM = { AccountSid: ACCOUNT_SID, From: '+351910000003', To: '+351210000000', CallStatus: 'ringing', FromCountry: 'PT' };

describe('phone bridge: two instances', () => {
  it("a realtime failure sent to voicemail on the stream's instance, the caller gone without a message: the other instance's status callback records realtime_failure", async () => {
    s = await bridgeStack(undefined, { statusGraceMs: 300 });
    const streams = await s.twin();
    s.realtime.refuse = true;
    const answer = await s.twilio.placeCall({ CallSid: 'CA0901', ...FORM });
    const call = await streams.twilio.openStream('CA0901', answer);
    await until(streams.twilio.events, 'update', () => true, 'the redirect to voicemail');
    if (!call.closed) await until(call, 'closed');
    await new Promise<void>((r) => {
      const check = () => (streams.bridge.liveCalls === 0 ? r() : setTimeout(check, 20));
      check();
    });
    const status = await s.twilio.callback(`${PUBLIC_URL}/twilio/status`, {
      CallSid: 'CA0901',
      AccountSid: ACCOUNT_SID,
      CallStatus: 'completed',
    });
    expect(status.status).toBe(204);
    await until(s.events, 'record', () => true, 'the record');
    expect(s.records).toEqual([expect.objectContaining({ call_id: 'CA0901', outcome: 'abandoned', ended_reason: 'realtime_failure' })]);
  });

  it("a caller put through to voicemail at their request on the stream's instance, gone without a message: the other instance's status callback records caller_request", async () => {
    s = await bridgeStack(undefined, { statusGraceMs: 300 });
    const streams = await s.twin();
    s.realtime.brain = brain({
      turns: [{ call: { name: 'route_to_voicemail', args: { transcript: '', phone: FORM.From, utc: '2026-11-23T22:00:00Z' } } }],
    });
    const answer = await s.twilio.placeCall({ CallSid: 'CA0903', ...FORM });
    const call = await streams.twilio.openStream('CA0903', answer);
    await until(call, 'media'); // the greeting
    speak(call);
    const update = await until<{ form: Record<string, string> }>(streams.twilio.events, 'update', () => true, 'the redirect to voicemail');
    expect(update.form.Twiml).toContain('<Record');
    if (!call.closed) await until(call, 'closed');
    await new Promise<void>((r) => {
      const check = () => (streams.bridge.liveCalls === 0 ? r() : setTimeout(check, 20));
      check();
    });
    const status = await s.twilio.callback(`${PUBLIC_URL}/twilio/status`, {
      CallSid: 'CA0903',
      AccountSid: ACCOUNT_SID,
      CallStatus: 'completed',
    });
    expect(status.status).toBe(204);
    await until(s.events, 'record', () => true, 'the record');
    expect(s.records).toEqual([expect.objectContaining({ call_id: 'CA0903', outcome: 'abandoned', ended_reason: 'caller_request' })]);
  });

  it("a call's stream replayed on the other instance after the call ended opens no second session: nothing metered, no second record", async () => {
    s = await bridgeStack();
    const other = await s.twin();
    s.realtime.brain = brain({});
    const answer = await s.twilio.placeCall({ CallSid: 'CA0902', ...FORM });
    const call = await s.twilio.openStream('CA0902', answer);
    await until(s.realtime, 'connection');
    await until(call, 'frame', () => call.playedBytes > 0 && call.playedBytes === call.receivedBytes, 'the greeting heard');
    call.hangUp();
    await s.endOf('CA0902');
    const metered = s.meterEvents.length;
    // The same signed handshake and start, ticket included, well within the ticket's 10 minutes.
    const replayed = await other.twilio.openStream('CA0902', answer);
    expect(await until<{ code: number; reason: string }>(replayed, 'closed')).toEqual({
      code: 1008,
      reason: 'this call already ended',
    });
    expect(s.realtime.conns).toHaveLength(1);
    expect(s.meterEvents).toHaveLength(metered);
    expect(s.records).toEqual([expect.objectContaining({ call_id: 'CA0902', ended_reason: 'caller_hangup' })]);
  });
});

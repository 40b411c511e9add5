// The pricing deflection over the phone, through the bridge with the local Twilio and realtime
// peers: the link texted once through Twilio's Messages API, the model handed the short message and
// the callback offer, the offer and its window recorded on the call; a text that fails says so.
import { afterEach, describe, expect, it } from 'vitest';
import { TwilioCalls } from '../../gateway/src/voice/phone/twilio-calls';
import { ACCOUNT_SID, AUTH_TOKEN, bridgeStack, type BridgeStack } from './peers/bridge-stack';
import type { RtConn } from './peers/realtime-peer';
import { assistantAudio, brain, speak } from './peers/script';
import { until } from './peers/wait';

let s: BridgeStack | null = null;
afterEach(async () => {
  await s?.close();
  s = null;
});

describe('pricing deflection over the phone', () => {
  it('the link is texted to the caller once, from the number they called; the model gets the short message and the 15-minute callback offer, recorded', async () => {
    s = await bridgeStack();
    s.realtime.heardQueue = [
      { text: 'yes, how much is a cleaning?', logprob: -0.05 },
      { text: 'and the price again?', logprob: -0.05 },
    ];
    s.realtime.brain = brain({
      turns: [{ call: { name: 'lookup_pricing_page', args: {} } }, { call: { name: 'lookup_pricing_page', args: {} } }],
      afterOutput: { audio: assistantAudio(300), transcript: 'Our prices are online; I will text you the link.' },
    });
    const call = await s.twilio.call('CA0806', '+351910000055');
    const conn = await until<RtConn>(s.realtime, 'connection');
    const outputs: any[] = [];
    conn.on(
      'client',
      (e: any) =>
        e.type === 'conversation.item.create' && e.item.type === 'function_call_output' && outputs.push(JSON.parse(e.item.output)),
    );
    await until(call, 'frame', () => call.playedBytes > 0 && call.playedBytes === call.receivedBytes, 'the greeting heard');
    for (let turn = 1; turn <= 2; turn++) {
      speak(call);
      await until(conn, 'client', () => outputs.length === turn, `function output ${turn}`);
      await until(call, 'frame', () => call.playedBytes === call.receivedBytes, 'the answer heard');
    }
    expect(s.twilio.texts).toEqual([{ To: '+351910000055', From: '+351210000000', Body: 'Our prices: https://example.com/prices' }]);
    expect(outputs[0]).toEqual({
      ok: true,
      result: {
        url: 'https://example.com/prices',
        say: 'Our prices are online; I will text you the link to the menu now.',
        text: 'sent',
        offer_callback: true,
        callback_minutes_window: 15,
      },
    });
    expect(outputs[1]).toEqual(outputs[0]); // asked twice: one text
    const before = Date.now();
    call.hangUp();
    const end = await s.endOf('CA0806');
    expect(end.record).toMatchObject({ outcome: 'deflected_to_pricing', intent_primary: 'pricing_deflection' });
    expect(end.pricing).toMatchObject({
      link: 'https://example.com/prices',
      text: 'sent',
      callback_offered: true,
      callback_minutes_window: 15,
    });
    const by = Date.parse(end.pricing!.callback_by!);
    expect(by - before).toBeGreaterThan(14 * 60_000);
    expect(by - before).toBeLessThanOrEqual(15 * 60_000);
  });
});

describe('pricing deflection: the model asks twice at once', () => {
  it('two lookups in one response (parallel function calls) text the link once, and both are answered with its status', async () => {
    s = await bridgeStack();
    s.realtime.brain = brain({});
    const call = await s.twilio.call('CA0807', '+351910000056');
    const conn = await until<RtConn>(s.realtime, 'connection');
    const outputs: any[] = [];
    conn.on(
      'client',
      (e: any) =>
        e.type === 'conversation.item.create' && e.item.type === 'function_call_output' && outputs.push(JSON.parse(e.item.output)),
    );
    await until(call, 'frame', () => call.playedBytes > 0 && call.playedBytes === call.receivedBytes, 'the greeting heard');
    const response = { id: 'resp_twice', status: 'in_progress', output: [], metadata: null };
    conn.send({ type: 'response.created', response });
    for (const callId of ['call_p1', 'call_p2'])
      conn.send({
        type: 'response.function_call_arguments.done',
        response_id: 'resp_twice',
        item_id: `item_${callId}`,
        output_index: 0,
        call_id: callId,
        name: 'lookup_pricing_page',
        arguments: '{}',
      });
    conn.send({ type: 'response.done', response: { ...response, status: 'completed' } });
    await until(conn, 'client', () => outputs.length === 2, 'both function outputs');
    // Before: each lookup found no text sent yet and sent its own: the caller got the link twice.
    expect(s.twilio.texts).toEqual([{ To: '+351910000056', From: '+351210000000', Body: 'Our prices: https://example.com/prices' }]);
    expect(outputs.map((o) => o.result.text)).toEqual(['sent', 'sent']);
    call.hangUp();
    expect((await s.endOf('CA0807')).pricing).toMatchObject({ text: 'sent', callback_offered: true });
  });
});

describe('texts through the Messages API', () => {
  it('refused (4xx) → unsent, failed (5xx) → unknown; never retried, so never sent twice', async () => {
    s = await bridgeStack();
    const calls = new TwilioCalls({ apiUrl: s.twilio.apiUrl, accountSid: ACCOUNT_SID, authToken: AUTH_TOKEN, backoffMs: 1 });
    s.twilio.textStatus = 400;
    expect(await calls.text('+351910000055', '+351210000000', 'x')).toBe('unsent: Twilio text: HTTP 400: refused');
    s.twilio.textStatus = 500;
    expect(await calls.text('+351910000055', '+351210000000', 'x')).toBe('unknown: Twilio text: HTTP 500: refused');
    expect(s.twilio.texts).toHaveLength(2);
    s.twilio.textStatus = 201;
    expect(await calls.text('+351910000055', '+351210000000', 'x')).toBe('sent');
  });
});

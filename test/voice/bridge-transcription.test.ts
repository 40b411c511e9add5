// The caller's words are transcribed by the session's transcription model, which the Realtime API
// bills apart from the responses and reports in each `input_audio_transcription.completed`'s
// `usage`: through the bridge with the local Twilio and realtime peers, that usage is one meter
// event per caller turn (its own model, priced from the same price list as chat calls), and its
// cost is in the spend guard's per-call cost and so in the call record's.
import { calcPrice } from '@pydantic/genai-prices';
import { afterEach, describe, expect, it } from 'vitest';
import { bridgeStack, type BridgeStack } from './peers/bridge-stack';
import type { RtConn } from './peers/realtime-peer';
import { assistantAudio, brain, serverEvent, speak } from './peers/script';
import { until } from './peers/wait';

let s: BridgeStack | null = null;
afterEach(async () => {
  await s?.close();
  s = null;
});

/** One caller turn, answered and heard; then the caller hangs up. */
async function oneTurn(stack: BridgeStack, callSid: string) {
  stack.realtime.brain = brain({ turns: [{ audio: assistantAudio(300), transcript: 'Sure, what day?' }] });
  const call = await stack.twilio.call(callSid);
  const conn = stack.realtime.conns[0] ?? (await until<RtConn>(stack.realtime, 'connection'));
  await until(call, 'frame', () => call.playedBytes > 0 && call.playedBytes === call.receivedBytes, 'the greeting heard');
  const transcribed = serverEvent(conn, 'conversation.item.input_audio_transcription.completed');
  const answered = serverEvent(conn, 'response.done', (e) => e.response.output?.[0]?.type === 'message');
  speak(call, 400);
  await Promise.all([transcribed, answered]);
  await until(call, 'frame', () => call.playedBytes === call.receivedBytes, 'the answer heard');
  const model = (conn.session?.audio?.input?.transcription as { model: string }).model;
  call.hangUp();
  const { record } = await stack.endOf(callSid);
  const events = stack.meterEvents.filter((e) => e.job_id === callSid);
  return { record: record!, model, conn, events };
}

describe("the caller's transcription is billed", () => {
  it('each transcription is one meter event of the transcription model, priced from its tokens, once however often it is reported; its cost is in the record', async () => {
    s = await bridgeStack();
    const usage = {
      type: 'tokens',
      input_tokens: 1200,
      input_token_details: { text_tokens: 200, audio_tokens: 1000 },
      output_tokens: 80,
      total_tokens: 1280,
    };
    // The server reports the same completed transcription three times.
    s.realtime.heardQueue = [{ text: 'yes, I would like to book a cleaning', logprob: -0.05, usage, repeated: 2 }];
    const { record, model, events } = await oneTurn(s, 'CAT01');
    const transcriptions = events.filter((e) => e.model === model);
    expect(transcriptions).toHaveLength(1);
    const price = calcPrice({ input_tokens: 1200, input_audio_tokens: 1000, output_tokens: 80 }, model, { providerId: 'openai' })!;
    expect(price.total_price).toBeGreaterThan(0);
    expect(transcriptions[0]).toMatchObject({
      provider: 'openai',
      model,
      input_tokens: 1200,
      output_tokens: 80,
      customer_id: 'acme-dental',
      error_code: '',
    });
    expect(transcriptions[0].cost_usd).toBeCloseTo(price.total_price, 9);
    // The greeting and the answer are the realtime model's, as before.
    expect(events.filter((e) => e.model === s!.config.meta.model)).toHaveLength(2);
    // The guard counted it once: the record's cost is every metered cost, the transcription's too.
    const metered = events.reduce((a, e) => a + e.cost_usd!, 0);
    expect(record.est_audio_cost_usd).toBeCloseTo(metered, 6);
    expect(record.turns).toBe(2); // a transcription is no turn
  });

  it('a transcription billed by duration (or by a model without a known price) is metered as UNPRICED, never as a silent $0; one that comes after the answer too', async () => {
    s = await bridgeStack();
    s.realtime.heardQueue = [{ text: 'yes, fine', logprob: -0.05, usage: { type: 'duration', seconds: 2.4 }, late: true }];
    const { record, model, events } = await oneTurn(s, 'CAT02');
    const transcriptions = events.filter((e) => e.model === model);
    expect(transcriptions).toHaveLength(1);
    expect(transcriptions[0]).toMatchObject({ provider: 'openai', cost_usd: null, error_code: 'UNPRICED', job_id: 'CAT02' });
    const responses = events.filter((e) => e.model === s!.config.meta.model);
    expect(responses).toHaveLength(2);
    expect(record.est_audio_cost_usd).toBeCloseTo(
      responses.reduce((a, e) => a + e.cost_usd!, 0),
      6,
    );
  });
});

describe("the caller's transcription at the end of a call", () => {
  it('a transcription that completes after the caller hung up, while the answer cut by the hang-up is settled, is still metered and counted', async () => {
    s = await bridgeStack();
    s.realtime.chunkBytes = 160;
    s.realtime.paceMs = 20; // the answer is still coming at the hang-up
    s.realtime.brain = brain({ turns: [{ audio: assistantAudio(6000), transcript: 'A long answer' }] });
    // Its transcription comes once the answer is done: after the hang-up cancelled it.
    s.realtime.heardQueue = [{ text: 'yes, tell me about prices', logprob: -0.05, late: true }];
    const call = await s.twilio.call('CAT03');
    const conn = s.realtime.conns[0] ?? (await until<RtConn>(s.realtime, 'connection'));
    await until(call, 'frame', () => call.playedBytes > 0 && call.playedBytes === call.receivedBytes, 'the greeting heard');
    const heardBefore = call.receivedBytes;
    speak(call, 400);
    await until(call, 'frame', () => call.receivedBytes >= heardBefore + 4000, 'half a second of the answer sent');
    const transcribed = serverEvent(conn, 'conversation.item.input_audio_transcription.completed');
    call.hangUp();
    await transcribed;
    const { record } = await s.endOf('CAT03');
    const model = (conn.session?.audio?.input?.transcription as { model: string }).model;
    const events = s.meterEvents.filter((e) => e.job_id === 'CAT03');
    expect(events.filter((e) => e.model === model)).toHaveLength(1);
    expect(record!.est_audio_cost_usd).toBeCloseTo(
      events.reduce((a, e) => a + e.cost_usd!, 0),
      6,
    );
  });
});

describe("the caller's words, reported more than once", () => {
  it('a completed transcription the server repeats is one caller line and one turn for the guard: a low confidence counts once', async () => {
    s = await bridgeStack();
    // Heard poorly (confidence 0.37, under min_confidence), and reported twice.
    s.realtime.heardQueue = [{ text: 'yes, hello', logprob: -1, repeated: 1 }];
    const { conn } = await oneTurn(s, 'CAT05');
    expect(conn.served.filter((e) => e.type === 'conversation.item.input_audio_transcription.completed')).toHaveLength(2);
    const end = await s.endOf('CAT05');
    // Before: the words were taken again: the line twice in what was said, and two low-confidence
    // turns for the guard where the caller had one (its rule escalates at two).
    expect(end.transcript.filter((l) => l.speaker === 'user').map((l) => l.text)).toEqual(['yes, hello']);
    const state = (await s.voice.get('CAT05'))!.state;
    expect(state.confidences).toHaveLength(1);
    expect(state.lowConfidence).toBe(1);
    expect(end.ended_reason).toBe('caller_hangup'); // before: transferred, low_confidence
  });
});

// The conversation a new realtime session is given after a reconnect, on loopback peers: every
// line the caller heard is in it, even when the event that carries its whole transcript
// (`response.output_audio_transcript.done`) never reached the bridge.
import { afterEach, describe, expect, it } from 'vitest';
import { bridgeStack, type BridgeStack } from './peers/bridge-stack';
import type { RtConn } from './peers/realtime-peer';
import { assistantAudio, brain, clientEvent, speak } from './peers/script';
import type { MediaCall } from './peers/twilio-peer';
import { until } from './peers/wait';

let s: BridgeStack | null = null;
afterEach(async () => {
  await s?.close();
  s = null;
});

const HOURS = 'We are open from nine to five, Monday to Friday.';

/** A call past its greeting; the caller's next turn is answered with HOURS (2 s of audio). */
async function askedForHours(stack: BridgeStack, callSid: string): Promise<{ call: MediaCall; conn: RtConn }> {
  stack.realtime.heardQueue = [{ text: 'yes, when are you open?', logprob: -0.05 }];
  stack.realtime.brain = brain({ turns: [{ audio: assistantAudio(2000), transcript: HOURS }] });
  const call = await stack.twilio.call(callSid);
  const conn = await until<RtConn>(stack.realtime, 'connection');
  await until(call, 'frame', () => call.playedBytes > 0 && call.playedBytes === call.receivedBytes, 'the greeting heard');
  return { call, conn };
}

/** Closes the session (a close frame after what was sent) once it sent an event that matches. */
function cutAfter(conn: RtConn, pred: (e: any) => boolean): void {
  const on = (e: { type: string }) => {
    if (!pred(e)) return;
    conn.off('server', on);
    conn.ws.close(1011);
  };
  conn.on('server', on);
}

/** The assistant's lines the new session was given, once it was asked to go on. */
async function replayedAssistantLines(stack: BridgeStack): Promise<string[]> {
  const again = await until<RtConn>(stack.realtime, 'connection');
  await clientEvent(again, 'session.update');
  await clientEvent(again, 'input_audio_buffer.append');
  return again.events
    .filter((e: any) => e.type === 'conversation.item.create' && e.item.role === 'assistant')
    .map((e: any) => e.item.content[0].text as string);
}

describe('phone bridge: the conversation replayed after a reconnect', () => {
  it("an answer whose transcript event was lost is replayed from its response.done's transcript", async () => {
    s = await bridgeStack();
    s.realtime.lose = (e) => e.type === 'response.output_audio_transcript.done' && e.transcript === HOURS;
    const { call, conn } = await askedForHours(s, 'CA1101');
    cutAfter(conn, (e) => e.type === 'response.done' && e.response.output[0]?.content?.[0]?.transcript === HOURS);
    speak(call);
    const lines = await replayedAssistantLines(s);
    expect(lines).toEqual(['Hello, this is an AI assistant.', HOURS]);
    call.hangUp();
    const end = await s.endOf('CA1101');
    expect(end.transcript.map((l) => l.text)).toEqual(['Hello, this is an AI assistant.', 'yes, when are you open?', HOURS]);
  });

  it('an answer cut by the session dropping mid-way is replayed as far as its transcript had come (the part the caller heard)', async () => {
    s = await bridgeStack();
    s.realtime.paceMs = 5; // the answer streams: the cut lands in its middle
    const { call, conn } = await askedForHours(s, 'CA1102');
    let pieces = '';
    const gather = (e: any) => {
      if (e.type === 'response.output_audio_transcript.delta') pieces += e.delta;
    };
    conn.on('server', gather);
    cutAfter(conn, (e) => e.type === 'response.output_audio_transcript.delta' && pieces.length >= 10);
    speak(call);
    const lines = await replayedAssistantLines(s);
    expect(pieces.length).toBeLessThan(HOURS.length);
    expect(lines).toEqual(['Hello, this is an AI assistant.', pieces.trim()]);
    call.hangUp();
    await s.endOf('CA1102');
  });
});

// The conversation a new realtime session is given after a reconnect, on loopback peers: every
// line the caller heard is in it, even when the event that carries its whole transcript
// (`response.output_audio_transcript.done`) never reached the bridge; and every caller turn in
// its place, before the answer to it, whether its transcription came late, failed or never came.
import { afterEach, describe, expect, it } from 'vitest';
import { bridgeStack, type BridgeStack } from './peers/bridge-stack';
import type { RtConn } from './peers/realtime-peer';
import { assistantAudio, brain, clientEvent, serverEvent, speak } from './peers/script';
import type { MediaCall } from './peers/twilio-peer';
import { until } from './peers/wait';

let s: BridgeStack | null = null;
afterEach(async () => {
  await s?.close();
  s = null;
});

const HOURS = 'We are open from nine to five, Monday to Friday.';

/** A call past its greeting: the caller heard it whole. */
async function greeted(stack: BridgeStack, callSid: string): Promise<{ call: MediaCall; conn: RtConn }> {
  const call = await stack.twilio.call(callSid);
  const conn = await until<RtConn>(stack.realtime, 'connection');
  await until(call, 'frame', () => call.playedBytes > 0 && call.playedBytes === call.receivedBytes, 'the greeting heard');
  return { call, conn };
}

/** A call past its greeting; the caller's next turn is answered with HOURS (2 s of audio). */
function askedForHours(stack: BridgeStack, callSid: string): Promise<{ call: MediaCall; conn: RtConn }> {
  stack.realtime.heardQueue = [{ text: 'yes, when are you open?', logprob: -0.05 }];
  stack.realtime.brain = brain({ turns: [{ audio: assistantAudio(2000), transcript: HOURS }] });
  return greeted(stack, callSid);
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

/** The items the new session was given, in order, once it was asked to go on. */
async function replayedItems(stack: BridgeStack): Promise<any[]> {
  const again = await until<RtConn>(stack.realtime, 'connection');
  await clientEvent(again, 'session.update');
  await clientEvent(again, 'input_audio_buffer.append');
  return again.events.filter((e: any) => e.type === 'conversation.item.create').map((e: any) => e.item);
}

/** The assistant's lines the new session was given, once it was asked to go on. */
const replayedAssistantLines = async (stack: BridgeStack): Promise<string[]> =>
  (await replayedItems(stack)).filter((i) => i.role === 'assistant').map((i) => i.content[0].text as string);

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

const NOT_TRANSCRIBED = '(the caller spoke; not transcribed)';
const HELP = { audio: assistantAudio(300), transcript: 'How can I help?' };

/** Every line the new session was given, in order, as `speaker: text`. */
const replayedLines = async (stack: BridgeStack): Promise<string[]> =>
  (await replayedItems(stack)).map((i) => `${i.role}: ${i.content[0].text as string}`);

/** A call past its greeting and the caller's first turn ("yes"), whose answer, HELP, is done and heard. */
async function pastHelp(stack: BridgeStack, callSid: string): Promise<{ call: MediaCall; conn: RtConn }> {
  const { call, conn } = await greeted(stack, callSid);
  speak(call);
  await serverEvent(conn, 'response.done', (e) => e.response.output[0]?.content?.[0]?.transcript === HELP.transcript);
  await until(call, 'frame', () => call.playedBytes === call.receivedBytes, 'the answer heard'); // not cut by the next turn
  return { call, conn };
}

/** The lines of a call past HELP whose next turn was not transcribed, as `speaker: text`. */
const HELPED_THEN_NOT_TRANSCRIBED = [
  'assistant: Hello, this is an AI assistant.',
  'user: yes',
  `assistant: ${HELP.transcript}`,
  `user: ${NOT_TRANSCRIBED}`,
];

const said = (end: { transcript: Array<{ speaker: string; text: string }> }) => end.transcript.map((l) => `${l.speaker}: ${l.text}`);

describe('phone bridge: every caller turn in its place, transcribed or not', () => {
  it('a turn whose transcription failed stays in its place as not transcribed, in the history and the transcript; its code is logged, never its message', async () => {
    s = await bridgeStack();
    const failed = { type: 'invalid_request_error', code: 'audio_unintelligible', message: 'could not use "my card is 4111 1111"' };
    s.realtime.heardQueue = [
      { text: 'yes', logprob: -0.05 },
      { text: '', logprob: -0.05, failed },
    ];
    s.realtime.brain = brain({ turns: [HELP, { audio: assistantAudio(600), transcript: HOURS }] });
    const { call, conn } = await pastHelp(s, 'CA1103');
    cutAfter(conn, (e) => e.type === 'response.done' && e.response.output[0]?.content?.[0]?.transcript === HOURS);
    speak(call);
    const expected = [...HELPED_THEN_NOT_TRANSCRIBED, `assistant: ${HOURS}`];
    expect(await replayedLines(s)).toEqual(expected);
    call.hangUp();
    const end = await s.endOf('CA1103');
    expect(said(end)).toEqual(expected);
    expect(s.logs.filter((l) => l.includes('audio_unintelligible'))).toHaveLength(1);
    expect(s.logs.join('\n')).not.toContain('4111');
  });

  it('a turn the session was lost before transcribing stays in its place as not transcribed, and the new session is asked to answer it', async () => {
    s = await bridgeStack();
    s.realtime.heardQueue = [{ text: 'yes', logprob: -0.05 }];
    const again = { audio: assistantAudio(300), transcript: 'Sorry, could you say that again?' };
    s.realtime.brain = brain({ turns: [HELP], afterOutput: again });
    const { call, conn } = await pastHelp(s, 'CA1104');
    cutAfter(conn, (e) => e.type === 'input_audio_buffer.committed'); // before its transcription or answer
    speak(call);
    const expected = HELPED_THEN_NOT_TRANSCRIBED;
    const before = call.receivedBytes;
    expect(await replayedLines(s)).toEqual(expected);
    expect(s.realtime.conns[1].session?.instructions).toContain(NOT_TRANSCRIBED); // the model is told what it means
    const heard = () => call.receivedBytes >= before + again.audio.length && call.playedBytes === call.receivedBytes;
    await until(call, 'frame', heard, 'the new session’s answer heard');
    call.hangUp();
    expect(said(await s.endOf('CA1104'))).toEqual([...expected, `assistant: ${again.transcript}`]);
  });

  it('a transcription that comes after the answer to it is put before that answer, as the caller said it', async () => {
    s = await bridgeStack();
    s.realtime.heardQueue = [{ text: 'yes, when are you open?', logprob: -0.05, late: true }];
    s.realtime.brain = brain({ turns: [{ audio: assistantAudio(300), transcript: HOURS }] });
    const { call, conn } = await greeted(s, 'CA1105');
    speak(call);
    await serverEvent(conn, 'conversation.item.input_audio_transcription.completed');
    call.hangUp();
    expect(said(await s.endOf('CA1105'))).toEqual([
      'assistant: Hello, this is an AI assistant.',
      'user: yes, when are you open?',
      `assistant: ${HOURS}`,
    ]);
  });

  it('a failed transcription is no answer to the opening line (it is asked again) and no low-confidence transcript for the guard', async () => {
    s = await bridgeStack(() => undefined, { consentWaitMs: 400 });
    const failed = { type: 'server_error', code: 'transcription_failed', message: 'failed' };
    s.realtime.heardQueue = [
      { text: '', logprob: -0.05, failed },
      { text: 'yes', logprob: -0.05 },
      { text: '', logprob: -0.05, failed },
    ];
    s.realtime.brain = brain({});
    const { call, conn } = await greeted(s, 'CA1106');
    speak(call);
    await clientEvent(conn, 'response.create', (e: any) => e.response?.instructions?.startsWith('Repeat'));
    await serverEvent(conn, 'response.done', (e) => e.response.metadata?.bridge === 'consent');
    await until(call, 'frame', () => call.playedBytes === call.receivedBytes, 'the repeat heard');
    speak(call);
    await serverEvent(conn, 'response.done', (e) => e.response.status === 'completed' && e.response.metadata === null);
    await until(call, 'frame', () => call.playedBytes === call.receivedBytes, 'the answer heard');
    speak(call);
    await serverEvent(conn, 'response.done', (e) => e.response.status === 'completed' && e.response.metadata === null);
    call.hangUp();
    const end = await s.endOf('CA1106');
    expect(end.record).toMatchObject({ ended_reason: 'caller_hangup', escalated: false });
    expect(end.record!.confidence_avg).toBeCloseTo(Math.exp(-0.05), 3); // the one transcript only
  });
});

describe('phone bridge: an answer the caller cut off', () => {
  it('is kept in the transcript and the history as far as the caller heard it, marked cut, as the server truncated it', async () => {
    s = await bridgeStack();
    s.realtime.chunkBytes = 320;
    s.realtime.heardQueue = [{ text: 'yes, when are you open?', logprob: -0.05 }];
    s.realtime.brain = brain({ turns: [{ audio: assistantAudio(4000), transcript: HOURS }] });
    const { call, conn } = await greeted(s, 'CA1107');
    const greeting = call.receivedBytes;
    speak(call);
    // All of it generated, its whole transcript given, a second of it heard: the caller speaks over it.
    await serverEvent(conn, 'response.output_audio_transcript.done', (e) => e.transcript === HOURS);
    await until(call, 'frame', () => call.playedBytes >= greeting + 8000, 'a second of the answer heard');
    speak(call);
    await serverEvent(conn, 'conversation.item.truncated');
    conn.ws.close(1011);
    const lines = await replayedAssistantLines(s);
    call.hangUp();
    const end = await s.endOf('CA1107');
    const line = end.transcript.find((l) => l.speaker === 'assistant' && HOURS.startsWith(l.text.replace(/…$/, '')))!;
    expect(line).toMatchObject({ cut: true });
    expect(line.text).toMatch(/^We are open\b.*…$/);
    expect(line.text.length).toBeLessThan(HOURS.length);
    expect(lines[1]).toBe(line.text);
  });
});

// Keys the caller presses, on loopback peers: Twilio's `dtmf` messages on the media stream. An
// entry (keys in a row, ended by `#` or a pause) is the caller's turn for the model, which answers
// it; `0` alone is a request for a person: the caller is transferred.
import { afterEach, describe, expect, it } from 'vitest';
import { bridgeStack, type BridgeStack } from './peers/bridge-stack';
import type { BrainContext, Reply, RtConn } from './peers/realtime-peer';
import { BOOKING, assistantAudio, brain, clientEvent, serverEvent, speak } from './peers/script';
import type { MediaCall } from './peers/twilio-peer';
import { until } from './peers/wait';

let s: BridgeStack | null = null;
afterEach(async () => {
  await s?.close();
  s = null;
});

const HUMAN = '+351211234567';
const GOT_IT = { audio: assistantAudio(300), transcript: 'Thank you, I have your booking number.' };
/** The answer to keys pressed again. */
const SECOND = { audio: assistantAudio(300), transcript: 'And I have the second number too.' };

async function answered(stack: BridgeStack, callSid: string): Promise<{ call: MediaCall; conn: RtConn }> {
  const call = await stack.twilio.call(callSid);
  const conn = await until<RtConn>(stack.realtime, 'connection');
  await until(call, 'frame', () => call.playedBytes > 0 && call.playedBytes === call.receivedBytes, 'the greeting heard');
  return { call, conn };
}

/** The user text items the session was given (the keypad entries). */
const typed = (conn: RtConn) =>
  conn.events
    .filter((e: any) => e.type === 'conversation.item.create' && e.item.role === 'user')
    .map((e: any) => e.item.content[0].text as string);

/** The caller presses these keys, one by one. */
const press = (call: MediaCall, keys: string) => {
  for (const key of keys) call.press(key);
};

/** The server says the answer with this reply's transcript is done. */
const answerDone = (conn: RtConn, reply: Reply) =>
  serverEvent(conn, 'response.done', (e) => e.response.output[0]?.content?.[0]?.transcript === reply.transcript);

/** The caller has heard all that was played to it. */
const heard = (call: MediaCall, what: string) => until(call, 'frame', () => call.playedBytes === call.receivedBytes, what);

/** No answer was refused; the caller hangs up: the call's transcript, line by line. */
async function hungUp(stack: BridgeStack, call: MediaCall, callSid: string): Promise<string[]> {
  expect(stack.logs.filter((l) => l.includes('realtime error'))).toEqual([]);
  call.hangUp();
  return (await stack.endOf(callSid)).transcript.map((l) => l.text);
}

type Brain = (ctx: BrainContext) => Reply | null;

/** The answers the bridge asks for on its own (a plain response.create) are `answers`, in turn; the rest are `other`'s. */
const answering =
  (answers: Array<Reply | null>, other: Brain): Brain =>
  (ctx) =>
    ctx.trigger === 'create' && !ctx.instructions ? (answers.shift() ?? null) : other(ctx);

/**
 * As `answering`, but as the bridge asks for the one before the last, its start reaches the bridge
 * late (held until `catchUp`) and `meanwhile` runs: the caller presses keys.
 */
const lateWithKeys =
  (answers: Reply[], meanwhile: () => void, other: Brain): Brain =>
  (ctx) => {
    if (ctx.trigger !== 'create' || ctx.instructions) return other(ctx);
    if (answers.length === 2) {
      ctx.conn.lag();
      meanwhile();
    }
    return answers.shift() ?? null;
  };

/** Once the keys' entry is given to the lagging session, what the server held reaches the bridge, and `reply` is done. */
async function caughtUp(conn: RtConn, keys: string, reply: Reply): Promise<void> {
  await clientEvent(conn, 'conversation.item.create', (e: any) => e.item.content?.[0]?.text === `(keys pressed: ${keys})`);
  const done = answerDone(conn, reply);
  conn.catchUp();
  await done;
}

/** The caller asks for a booking: the model calls book_slot on that turn (the brain for the rest). */
function asksForBooking(stack: BridgeStack): Brain {
  stack.realtime.heardQueue = [{ text: 'I would like to book a cleaning tomorrow at ten', logprob: -0.1 }];
  return brain({ turns: [{ call: { name: 'book_slot', args: BOOKING } }] });
}

/** The caller speaks; once the function's result is given, the answer to it begins and plays: its id. */
async function resultAnswerPlaying(call: MediaCall, conn: RtConn): Promise<string> {
  const given = () => conn.events.some((e: any) => e.type === 'conversation.item.create' && e.item.type === 'function_call_output');
  const toResult = serverEvent(conn, 'response.created', given);
  speak(call);
  const id = (await toResult).response.id as string;
  await until(call, 'media', () => true, 'the answer to the result playing');
  return id;
}

/** 100 ms more of what is playing has been heard (an answer the keys cut is then in the transcript, as far as it was heard). */
async function someHeard(call: MediaCall): Promise<void> {
  const from = call.playedBytes;
  await until(call, 'frame', () => call.playedBytes >= from + 800, 'some of the answer heard');
}

const RATE_LIMITED = { type: 'failed', error: { type: 'invalid_request_error', code: 'inference_rate_limit_exceeded' } };

/** The server begins an answer the test makes: what it said of it. */
function begun(conn: RtConn, id: string) {
  const response = { id, status: 'in_progress', output: [], metadata: null };
  conn.send({ type: 'response.created', response });
  return response;
}

/** That answer fails, rate limited. */
const failRateLimited = (conn: RtConn, response: ReturnType<typeof begun>) =>
  conn.send({ type: 'response.done', response: { ...response, status: 'failed', status_details: RATE_LIMITED } });

describe('phone bridge: the keypad', () => {
  it('keys in a row are one entry, given to the model as the caller’s turn and answered; a pause ends an entry as # does', async () => {
    s = await bridgeStack(undefined, { keypadPauseMs: 300 });
    s.realtime.brain = brain({ afterOutput: GOT_IT });
    const { call, conn } = await answered(s, 'CA1201');
    press(call, '4x27#'); // "x" is no key of a phone
    const item = await clientEvent(conn, 'conversation.item.create', (e: any) => e.item.role === 'user');
    expect(conn.session?.instructions).toContain('(keys pressed: ');
    expect(item.item).toEqual({
      id: expect.stringMatching(/^keys_/),
      type: 'message',
      role: 'user',
      content: [{ type: 'input_text', text: '(keys pressed: 427)' }],
    });
    const asked = conn.events.slice(conn.events.indexOf(item) + 1);
    expect(asked).toContainEqual({ type: 'response.create' });
    await answerDone(conn, GOT_IT);
    await heard(call, 'the answer heard');
    press(call, '1*');
    await until(conn, 'client', () => typed(conn).length === 2, 'the second entry, after the pause');
    expect(typed(conn)).toEqual(['(keys pressed: 427)', '(keys pressed: 1*)']);
    call.hangUp();
    const end = await s.endOf('CA1201');
    expect(end.transcript.filter((l) => l.speaker === 'user').map((l) => l.text)).toEqual(['(keys pressed: 427)', '(keys pressed: 1*)']);
    expect(s.twilio.updates).toEqual([]);
  });

  it('an entry of more than 32 keys is given to the model marked as cut, with how many were pressed; one of 32 whole', async () => {
    s = await bridgeStack(undefined, { keypadPauseMs: 300 });
    s.realtime.brain = brain({ afterOutput: GOT_IT });
    const { call, conn } = await answered(s, 'CA1208');
    const long = '1234567890'.repeat(4); // 40 keys: a number no caller means to type in full
    press(call, `${long}#`);
    const item = await clientEvent(conn, 'conversation.item.create', (e: any) => e.item.role === 'user');
    const cut = `(keys pressed: ${long.slice(0, 32)}… cut: 40 keys pressed, only the first 32 kept)`;
    // before: "(keys pressed: <the first 32 keys>)", as if the caller had typed just those
    expect(item.item.content[0].text).toBe(cut);
    expect(conn.session?.instructions).toContain('cut: 40 keys pressed, only the first 32 kept)');
    expect(conn.events.slice(conn.events.indexOf(item) + 1)).toContainEqual({ type: 'response.create' });
    await answerDone(conn, GOT_IT);
    await heard(call, 'the answer heard');
    press(call, long.slice(0, 32));
    await until(conn, 'client', () => typed(conn).length === 2, 'the second entry, after the pause');
    expect(typed(conn)).toEqual([cut, `(keys pressed: ${long.slice(0, 32)})`]);
    call.hangUp();
    const end = await s.endOf('CA1208');
    expect(end.transcript.filter((l) => l.speaker === 'user').map((l) => l.text)).toEqual(typed(conn));
  });

  it('keys pressed over an answer cut it, as speaking over it does: the caller hears the answer to the keys', async () => {
    s = await bridgeStack(undefined, { keypadPauseMs: 300 });
    s.realtime.paceMs = 20; // the long answer streams as the API's does
    s.realtime.brain = brain({
      turns: [{ audio: assistantAudio(3000), transcript: 'Please type your booking number.' }],
      afterOutput: GOT_IT,
    });
    const { call, conn } = await answered(s, 'CA1203');
    const long = serverEvent(conn, 'response.created');
    speak(call);
    const cut = (await long).response.id as string;
    await until(call, 'media', () => true, 'the long answer playing');
    await someHeard(call);
    press(call, '9#');
    const item = await clientEvent(conn, 'conversation.item.create', (e: any) => e.item.role === 'user');
    expect(conn.events.slice(0, conn.events.indexOf(item)).some((e) => e.type === 'response.cancel')).toBe(true);
    if (!call.clears.length) await until(call, 'clear', () => true, 'Twilio told to clear the answer');
    await serverEvent(conn, 'response.done', (e) => e.response.id === cut && e.response.status === 'cancelled');
    await answerDone(conn, GOT_IT);
    await heard(call, 'the answer heard');
    expect(call.receivedBytes).toBeLessThan(assistantAudio(300).length * 2 + assistantAudio(3000).length);
    // The answer the keys cut came before them, as far as the caller heard it (before: after the keys).
    const [before, keys, after] = (await hungUp(s, call, 'CA1203')).slice(-3);
    expect([keys, after]).toEqual(['(keys pressed: 9)', GOT_IT.transcript]);
    expect(before).toMatch(/…$/); // marked cut
    expect('Please type your booking number.'.startsWith(before.slice(0, -1))).toBe(true);
  });

  it('keys pressed while the model pauses mid-answer (all of it sent so far heard) cut it as speaking does: truncated where it stopped, its line marked cut', async () => {
    s = await bridgeStack(undefined, { keypadPauseMs: 300 });
    const greeting = assistantAudio(300);
    const talk = brain({ greeting: { audio: greeting, transcript: 'consent line' } });
    s.realtime.brain = (ctx) => (ctx.trigger === 'turn' ? null : talk(ctx)); // the answer below is the test's
    const call = await s.twilio.call('CA1215');
    const conn = await until<RtConn>(s.realtime, 'connection');
    await until(call, 'frame', () => call.playedBytes >= greeting.length, 'the consent line heard');
    speak(call, 400); // agrees
    await serverEvent(conn, 'input_audio_buffer.committed');
    const base = { response_id: 'resp_pause', item_id: 'item_pause', output_index: 0, content_index: 0 };
    conn.send({ type: 'response.created', response: { id: 'resp_pause', status: 'in_progress', output: [], metadata: null } });
    conn.send({ type: 'response.output_audio.delta', ...base, delta: assistantAudio(300).toString('base64') });
    conn.send({ type: 'response.output_audio_transcript.delta', ...base, delta: 'Our prices' });
    const sent = greeting.length + 2400;
    await until(call, 'frame', () => call.receivedBytes >= sent && call.echoedBytes === call.receivedBytes, 'all of it heard');
    const truncated = clientEvent(conn, 'conversation.item.truncate');
    press(call, '9#'); // in the pause
    expect(await truncated).toMatchObject({ item_id: 'item_pause', content_index: 0, audio_end_ms: 300 });
    conn.send({ type: 'response.output_audio.delta', ...base, delta: assistantAudio(2000).toString('base64') });
    conn.send({ type: 'response.output_audio_transcript.delta', ...base, delta: ' start at fifty euros a month.' });
    conn.send({ type: 'response.output_audio.done', ...base });
    conn.send({ type: 'response.output_audio_transcript.done', ...base, transcript: 'Our prices start at fifty euros a month.' });
    conn.send({ type: 'response.done', response: { id: 'resp_pause', status: 'cancelled', output: [], metadata: null } });
    await clientEvent(conn, 'conversation.item.create', (e: any) => e.item.role === 'user');
    call.hangUp();
    const end = await s.endOf('CA1215');
    expect(call.receivedBytes).toBe(sent);
    // before: "Our prices", as if the caller had been told all there was
    expect(end.transcript.map((l) => l.text).slice(-2)).toEqual(['Our prices…', '(keys pressed: 9)']);
  });

  it('keys pressed over an answer already generated cut it where the caller was: the model is told what was heard of it, as when the caller speaks over it', async () => {
    s = await bridgeStack(undefined, { keypadPauseMs: 300 });
    const greeting = assistantAudio(300);
    s.realtime.brain = brain({
      greeting: { audio: greeting, transcript: 'consent line' },
      turns: [{ audio: assistantAudio(3000), transcript: 'Please type your booking number.' }],
      afterOutput: GOT_IT,
    });
    const { call, conn } = await answered(s, 'CA1210');
    speak(call);
    const answer = await serverEvent(conn, 'response.done', (e) => e.response.metadata === null && e.response.status === 'completed');
    await until(call, 'frame', () => call.playedBytes >= greeting.length + 8000, 'one second of the answer heard');
    const told = call.echoedBytes - greeting.length;
    press(call, '9#');
    const cleared = await until<{ playedBytes: number }>(call, 'clear');
    // before: Twilio cleared, but the model kept the whole answer as said, 3 s the caller never heard
    const truncate = await clientEvent(conn, 'conversation.item.truncate');
    expect(truncate).toMatchObject({ item_id: answer.response.output[0].id, content_index: 0 });
    // Between what the echoes before the keys said was heard and what was heard at the clear (as in bridge.test.ts).
    expect(told).toBeGreaterThan(0);
    expect(truncate.audio_end_ms).toBeGreaterThanOrEqual(told / 8);
    expect(truncate.audio_end_ms).toBeLessThanOrEqual((cleared.playedBytes - greeting.length) / 8);
    await answerDone(conn, GOT_IT);
    call.hangUp();
    await s.endOf('CA1210');
  });

  it('keys pressed while the model answers a function’s result cut that answer, and the caller hears an answer to the keys', async () => {
    s = await bridgeStack(undefined, { keypadPauseMs: 300 });
    s.realtime.paceMs = 20; // the answer to the result streams as the API's does: the keys land in its middle
    const answers = [{ audio: assistantAudio(3000), transcript: 'You are booked for ten tomorrow, and here is more.' }, GOT_IT];
    s.realtime.brain = answering(answers, asksForBooking(s));
    const { call, conn } = await answered(s, 'CA1209');
    const cut = await resultAnswerPlaying(call, conn);
    await someHeard(call);
    press(call, '42#');
    await clientEvent(conn, 'conversation.item.create', (e: any) => e.item.role === 'user');
    await serverEvent(conn, 'response.done', (e) => e.response.id === cut && e.response.status === 'cancelled');
    // before: nothing asked for an answer after the keys, and the caller waited in silence
    await answerDone(conn, GOT_IT);
    await heard(call, 'the answer to the keys heard');
    const [before, keys, after] = (await hungUp(s, call, 'CA1209')).slice(-3);
    expect([keys, after]).toEqual(['(keys pressed: 42)', GOT_IT.transcript]);
    expect(before).toMatch(/…$/); // marked cut
    expect('You are booked for ten tomorrow, and here is more.'.startsWith(before.slice(0, -1))).toBe(true);
  });

  it('keys pressed again before the answer to the first keys has begun are answered too, with no refused answer', async () => {
    s = await bridgeStack(undefined, { keypadPauseMs: 300 });
    // The answer to the first keys is asked for: its start reaches the bridge late, and the caller
    // presses keys again meanwhile.
    s.realtime.brain = lateWithKeys([GOT_IT, SECOND], () => press(call, '5#'), brain({}));
    const { call, conn } = await answered(s, 'CA1212'); // the brain above presses keys on it, once answering
    press(call, '4#');
    // before: the second keys asked for an answer of their own while the first one's was starting,
    // which the API refuses; that one never saw them, and the caller waited in silence
    await caughtUp(conn, '5', SECOND);
    await heard(call, 'the answer to the second keys heard');
    expect((await hungUp(s, call, 'CA1212')).slice(-1)).toEqual([SECOND.transcript]);
  });

  it('keys pressed again while the answer to the first keys is asked for, not yet begun, are answered too, with no refused answer', async () => {
    s = await bridgeStack(undefined, { keypadPauseMs: 300 });
    s.realtime.paceMs = 20; // the answer to the result streams: the first keys land in its middle
    const answers = [{ audio: assistantAudio(3000), transcript: 'You are booked for ten tomorrow, and here is more.' }, GOT_IT, SECOND];
    // The answer to the first keys is asked for: its start reaches the bridge late, and the caller
    // presses keys again meanwhile.
    s.realtime.brain = lateWithKeys(answers, () => press(call, '5#'), asksForBooking(s));
    const { call, conn } = await answered(s, 'CA1210'); // the brain above presses keys on it, once answering
    await resultAnswerPlaying(call, conn);
    press(call, '4#');
    // before: the second keys asked for an answer of their own while the first one's was starting,
    // which the API refuses; that one never saw them, and the caller waited in silence
    await caughtUp(conn, '5', SECOND);
    await heard(call, 'the answer to the second keys heard');
    expect((await hungUp(s, call, 'CA1210')).slice(-1)).toEqual([SECOND.transcript]);
  });

  it('keys pressed over an answer to a function’s result that then fails (rate limited) get one answer, not two asked at once', async () => {
    s = await bridgeStack(undefined, { keypadPauseMs: 300 });
    s.realtime.brain = answering([null, GOT_IT], asksForBooking(s)); // the answer to the result is the test's own, below
    const { call, conn } = await answered(s, 'CA1211');
    const plain = () => conn.events.filter((e: any) => e.type === 'response.create' && e.response === undefined).length;
    speak(call);
    await clientEvent(conn, 'response.create', (e: any) => e.response === undefined);
    const response = begun(conn, 'resp_R');
    press(call, '4#');
    await serverEvent(conn, 'conversation.item.added', (e) => e.item.role === 'user' && e.item.content?.[0]?.text === '(keys pressed: 4)');
    const asked = plain();
    failRateLimited(conn, response);
    await answerDone(conn, GOT_IT);
    await heard(call, 'the answer heard');
    // before: the failed answer was asked for again and the keys' answer too, the second refused
    expect(plain() - asked).toBe(1);
    expect((await hungUp(s, call, 'CA1211')).slice(-2)).toEqual(['(keys pressed: 4)', GOT_IT.transcript]);
  });

  it('keys pressed while a failed answer is asked for once more, before it has begun, are answered too, with no refused answer', async () => {
    s = await bridgeStack(undefined, { keypadPauseMs: 300 });
    const answers = [{ audio: assistantAudio(300), transcript: 'Sorry, how can I help?' }, GOT_IT];
    const script = brain({});
    s.realtime.brain = script;
    const { call, conn } = await answered(s, 'CA1213');
    // The answer to the turn is the test's own, below: it fails. The failed answer is asked for
    // again: its start reaches the bridge late, and the caller presses keys meanwhile.
    s.realtime.brain = lateWithKeys(
      answers,
      () => press(call, '4#'),
      (ctx) => (ctx.trigger === 'turn' ? null : script(ctx)),
    );
    speak(call);
    await serverEvent(conn, 'conversation.item.input_audio_transcription.completed');
    failRateLimited(conn, begun(conn, 'resp_F'));
    // before: the keys asked for an answer of their own while the one asked again was starting,
    // which the API refuses; that one never saw them, and they went unanswered
    await caughtUp(conn, '4', GOT_IT);
    await heard(call, 'the answer to the keys heard');
    expect((await hungUp(s, call, 'CA1213')).slice(-1)).toEqual([GOT_IT.transcript]);
  });

  it('keys pressed as a new session is asked to answer the caller, before that answer has begun, are answered too, with no refused answer', async () => {
    s = await bridgeStack(undefined, { keypadPauseMs: 300 });
    const again = { audio: assistantAudio(300), transcript: 'Sorry, could you say that again?' };
    const answers = [again, GOT_IT];
    const script = brain({});
    s.realtime.brain = answering(answers, script);
    const { call, conn } = await answered(s, 'CA1214');
    // The caller's turn is committed, then the session is lost before anything answers it.
    s.realtime.brain = answering(answers, (ctx) => (ctx.trigger === 'turn' ? null : script(ctx)));
    conn.on('server', function cut(e: any) {
      if (e.type !== 'input_audio_buffer.committed') return;
      conn.off('server', cut);
      conn.ws.close(1011);
    });
    speak(call);
    const next = await until<RtConn>(s.realtime, 'connection');
    // Ready, the new session is given the conversation and asked to answer; what the server says
    // reaches the bridge late, and the caller presses keys meanwhile.
    next.on('client', function typedNow(e: any) {
      if (e.type !== 'response.create') return;
      next.off('client', typedNow);
      next.lag();
      press(call, '4#');
    });
    // before: the keys asked for an answer of their own while the new session's was starting,
    // which the API refuses; that one never saw them, and they went unanswered
    await caughtUp(next, '4', GOT_IT);
    await heard(call, 'the answer to the keys heard');
    expect((await hungUp(s, call, 'CA1214')).slice(-1)).toEqual([GOT_IT.transcript]);
  });

  it('keys pressed while the opening line plays (all of it generated) are dropped: the line is heard whole, the model is given nothing', async () => {
    s = await bridgeStack(undefined, { keypadPauseMs: 300 });
    s.realtime.paceMs = 20;
    s.realtime.brain = brain({ greeting: { audio: assistantAudio(2000), transcript: 'Hello, this is an AI assistant.' } });
    const call = await s.twilio.call('CA1204');
    const conn = await until<RtConn>(s.realtime, 'connection');
    // All of it generated, most of it still to play: the model takes turns from now on, and the
    // line is still not to be cut.
    await serverEvent(conn, 'response.done');
    expect(call.playedBytes).toBeLessThan(assistantAudio(1000).length);
    press(call, '5#');
    await until(call, 'frame', () => call.playedBytes === assistantAudio(2000).length, 'the opening line heard');
    expect(call.clears).toEqual([]);
    expect(typed(conn)).toEqual([]);
    expect(s.logs.some((l) => l.includes('keys pressed before the opening line was heard'))).toBe(true);
    call.hangUp();
    await s.endOf('CA1204');
  });

  it('keys pressed while the session reconnects come after the line the lost session had begun, in the transcript and the history', async () => {
    s = await bridgeStack(undefined, { keypadPauseMs: 300 });
    s.realtime.paceMs = 5; // the answer streams: the session drops in its middle
    const hours = 'We are open from nine to five, Monday to Friday.';
    s.realtime.heardQueue = [{ text: 'yes, when are you open?', logprob: -0.05 }];
    s.realtime.brain = brain({ turns: [{ audio: assistantAudio(2000), transcript: hours }] });
    const { call, conn } = await answered(s, 'CA1205');
    let pieces = '';
    let release = () => undefined as void;
    conn.on('server', function cut(e: any) {
      if (e.type === 'response.output_audio_transcript.delta') pieces += e.delta;
      if (pieces.length < 10) return;
      conn.off('server', cut);
      s!.realtime.holdUpdates = new Promise<void>((r) => (release = r)); // the new session is slow to start
      conn.ws.close(1011);
    });
    speak(call);
    const again = await until<RtConn>(s.realtime, 'connection');
    await clientEvent(again, 'session.update');
    press(call, '427#');
    call.hangUp(); // after the keys on the same stream: the bridge has taken them while not ready
    const end = await s.endOf('CA1205');
    release();
    expect(pieces.length).toBeLessThan(hours.length);
    expect(end.transcript.map((l) => l.text).slice(-2)).toEqual([pieces.trim(), '(keys pressed: 427)']);
  });

  it('0 pressed while the opening line plays is still a request for a person: transferred at once, caller_request', async () => {
    s = await bridgeStack(undefined, { keypadPauseMs: 300 });
    s.realtime.paceMs = 20;
    s.realtime.brain = brain({ greeting: { audio: assistantAudio(2000), transcript: 'Hello, this is an AI assistant.' } });
    const call = await s.twilio.call('CA1206');
    const conn = await until<RtConn>(s.realtime, 'connection');
    await until(call, 'media', () => true, 'the opening line playing');
    press(call, '0#');
    const u = await until<(typeof s.twilio.updates)[number]>(s.twilio.events, 'update', (x) => x.callSid === 'CA1206', 'the transfer');
    expect(u.form.Twiml).toContain(`${HUMAN}</Dial>`);
    expect(call.playedBytes).toBeLessThan(assistantAudio(2000).length);
    const end = await s.endOf('CA1206');
    expect(end.record).toMatchObject({ ended_reason: 'caller_request', escalated: true });
    expect(typed(conn)).toEqual([]);
  });

  it('0 alone is a request for a person: the caller is transferred (<Dial> the human number), caller_request', async () => {
    s = await bridgeStack(undefined, { keypadPauseMs: 300 });
    s.realtime.brain = brain({});
    const { call, conn } = await answered(s, 'CA1202');
    call.press('0');
    const u = await until<(typeof s.twilio.updates)[number]>(s.twilio.events, 'update', (x) => x.callSid === 'CA1202', 'the transfer');
    expect(u.form.Twiml).toContain(`${HUMAN}</Dial>`);
    const end = await s.endOf('CA1202');
    expect(end.record).toMatchObject({ ended_reason: 'caller_request', escalated: true });
    expect(typed(conn)).toEqual([]);
  });
});

describe('phone bridge: function results once the caller is being transferred', () => {
  it('a booking that answers while the caller is being transferred asks the model for no answer: no extra response is billed or counted', async () => {
    s = await bridgeStack(undefined, { keypadPauseMs: 300 });
    s.realtime.chunkBytes = 160;
    s.realtime.paceMs = 20; // the answer to the second turn is still being said when the keys come
    s.realtime.heardQueue = [
      { text: 'I would like to book a cleaning tomorrow at ten', logprob: -0.1 },
      { text: 'and is there parking nearby', logprob: -0.1 },
    ];
    s.realtime.brain = brain({
      turns: [{ call: { name: 'book_slot', args: BOOKING } }, { audio: assistantAudio(6000), transcript: 'There is parking.' }],
      afterOutput: { audio: assistantAudio(300), transcript: 'You are booked.' },
    });
    // The back office answers the booking only when the test says so (a slow webhook).
    let book = () => undefined as void;
    s.hooks.handle = (_q, res) => (book = () => void res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}'));
    let twilioAnswers = () => undefined as void;
    const { call, conn } = await answered(s, 'CA1220');
    speak(call);
    await until(s.hooks.events, 'request', (h: { path: string }) => h.path === '/book_slot', 'the booking sent');
    const second = serverEvent(conn, 'response.created');
    speak(call);
    const answering = (await second).response.id as string;
    await until(call, 'media', () => true, 'the answer to the second turn playing');
    // The booking's result comes in while that answer runs: given at once, its answer asked for later.
    const held = until(conn, 'server', (e: any) => e.type === 'conversation.item.added' && e.item.type === 'function_call_output');
    book();
    await held;
    // The caller asks for a person; Twilio takes its time with the redirect, so the call stays in transfer.
    s.twilio.hold = new Promise<void>((r) => (twilioAnswers = r));
    const cut = serverEvent(conn, 'response.done', (e) => e.response.id === answering);
    press(call, '0#');
    await until(s.twilio.events, 'update', (u: { callSid: string }) => u.callSid === 'CA1220', 'the transfer');
    const from = conn.events.length;
    await cut;
    const metered = () => s!.meterEvents.filter((e) => e.model === s!.config.meta.model);
    await until(call, 'frame', () => metered().length === 3, 'the cut answer metered'); // greeting, booking call, cut answer
    // before: the cut answer's response.done asked for an answer to the booking (the transfer under way)
    expect(conn.events.slice(from).filter((e) => e.type === 'response.create')).toEqual([]);
    twilioAnswers();
    const { record } = await s.endOf('CA1220');
    expect(record).toMatchObject({ outcome: 'booking', ended_reason: 'caller_request', escalated: true, turns: 3 });
    expect(metered()).toHaveLength(3);
  });

  // The transfer cancelled only an answer the bridge had seen begin: one whose response.created was
  // still on its way ran to its end unheard, and was billed whole.
  it('an answer under way that the bridge has not seen begin is cancelled by the transfer too', async () => {
    s = await bridgeStack(undefined, { keypadPauseMs: 300 });
    s.realtime.chunkBytes = 160;
    s.realtime.paceMs = 20; // an answer of 6 s, still being made when the keys come
    s.realtime.brain = brain({ turns: [{ audio: assistantAudio(6000), transcript: 'Let me tell you about our services.' }] });
    let twilioAnswers = () => undefined as void;
    const { call, conn } = await answered(s, 'CA1221');
    s.realtime.lose = (e: any) => e.type === 'response.created' && e.response.metadata === null; // the answer's, late
    const answering = serverEvent(conn, 'response.output_audio.delta');
    speak(call);
    const answer = (await answering).response_id as string;
    await until(call, 'media', () => true, 'the answer playing');
    s.twilio.hold = new Promise<void>((r) => (twilioAnswers = r));
    const done = serverEvent(conn, 'response.done', (e) => e.response.id === answer);
    press(call, '0#');
    await until(s.twilio.events, 'update', (u: { callSid: string }) => u.callSid === 'CA1221', 'the transfer');
    // before: not cancelled, made to its end (completed), unheard
    expect((await done).response.status).toBe('cancelled');
    twilioAnswers();
    expect((await s.endOf('CA1221')).record).toMatchObject({ ended_reason: 'caller_request', escalated: true });
  });
});

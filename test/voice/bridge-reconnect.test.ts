// A function call's result across a realtime reconnect, on loopback peers: the booking runs once
// through the workflow, and whichever session is current when its result is in hears it, so the
// model can tell the caller the outcome. The local realtime server refuses, as the API does, a
// function_call_output whose function_call its conversation does not hold.
import type { ServerResponse } from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';
import { bridgeStack, type BridgeStack } from './peers/bridge-stack';
import type { Reply, RtConn } from './peers/realtime-peer';
import { BOOKING, assistantAudio, brain, clientEvent, serverEvent, speak } from './peers/script';
import type { MediaCall } from './peers/twilio-peer';
import { until } from './peers/wait';

let s: BridgeStack | null = null;
afterEach(async () => {
  await s?.close();
  s = null;
});

const CONFIRMED = { audio: assistantAudio(300), transcript: 'You are booked for ten tomorrow.' };
const HOLD_ON = { audio: assistantAudio(300), transcript: 'One moment, I am checking.' };
const BOOKED = { ok: true, result: { ok: true, booking_id: 'evt-1' } };

/** A call whose caller agrees and asks for a booking; the model calls book_slot on its first turn. */
async function bookingCall(
  stack: BridgeStack,
  callSid: string,
  afterOutput: Reply = CONFIRMED,
): Promise<{ call: MediaCall; conn: RtConn; callId: Promise<string> }> {
  stack.realtime.heardQueue = [{ text: 'I would like to book a cleaning tomorrow at ten', logprob: -0.1 }];
  stack.realtime.brain = brain({ turns: [{ call: { name: 'book_slot', args: BOOKING } }], afterOutput });
  const call = await stack.twilio.call(callSid);
  const conn = stack.realtime.conns[0] ?? (await until<RtConn>(stack.realtime, 'connection'));
  await until(call, 'frame', () => call.playedBytes > 0 && call.playedBytes === call.receivedBytes, 'the greeting heard');
  const callId = serverEvent(conn, 'response.function_call_arguments.done').then((e) => e.call_id as string);
  callId.catch(() => undefined); // a session cut before the call was announced never says it
  speak(call, 400);
  return { call, conn, callId };
}

/** The booking target holds its answers until released. */
function holdBookings(stack: BridgeStack): () => void {
  const waiting: ServerResponse[] = [];
  stack.hooks.handle = (_q, res) => void waiting.push(res);
  return () => {
    for (const res of waiting.splice(0)) res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true,"booking_id":"evt-1"}');
  };
}

const booked = (stack: BridgeStack) =>
  until(stack.hooks.events, 'request', (h: { path: string }) => h.path === '/book_slot', 'the booking sent');

/** The session is given the result, its conversation holds the call and the result, the model answers, the caller hears it. */
async function toldOutcome(stack: BridgeStack, call: MediaCall, conn: RtConn, callId: string): Promise<void> {
  const answer = serverEvent(conn, 'response.done', (e) => e.response.status === 'completed' && e.response.output[0]?.type === 'message');
  answer.catch(() => undefined); // reported by the waits below when the result never comes
  const output = await clientEvent(conn, 'conversation.item.create', (e: any) => e.item.type === 'function_call_output');
  const asked = () => conn.events.slice(conn.events.indexOf(output) + 1).some((e: any) => e.type === 'response.create' && !e.response);
  if (!asked()) await until(conn, 'client', asked, 'an answer asked for after the result');
  const mine = conn.items.filter((i) => i.call_id === callId);
  expect(mine.map((i) => i.type)).toEqual(['function_call', 'function_call_output']);
  expect(mine[0]).toMatchObject({ name: 'book_slot', arguments: JSON.stringify(BOOKING) });
  expect(JSON.parse(String(mine[1].output))).toEqual(BOOKED);
  await answer;
  await until(call, 'frame', () => call.playedBytes === call.receivedBytes, 'the answer heard');
  expect(stack.logs.filter((l) => l.includes('realtime error'))).toEqual([]);
  expect(stack.hooks.seen.filter((h) => h.path === '/book_slot')).toHaveLength(1);
}

/** Closes the session (a close frame after what was sent) right after it sends an event of this type. */
function cutAfter(conn: RtConn, type: string, when: () => boolean = () => true): void {
  const on = (e: { type: string }) => {
    if (e.type !== type || !when()) return;
    conn.off('server', on);
    conn.ws.close(1011);
  };
  conn.on('server', on);
}

/** A booking call whose realtime session drops while the booking runs (held); the new session is ready. */
async function droppedWhileBooking(stack: BridgeStack, callSid: string) {
  const release = holdBookings(stack);
  const { call, conn, callId } = await bookingCall(stack, callSid);
  await booked(stack); // its response.done came before: the workflow stores its claim first
  conn.drop();
  const again = await until<RtConn>(stack.realtime, 'connection');
  await serverEvent(again, 'session.updated');
  return { release, call, callId, again };
}

/**
 * Once the booking (held) is sent, the session drops; the new session is not yet ready (its
 * session.update not acknowledged) when the booking completes and the bridge has its answer.
 * The new session, and `ready`, which acknowledges its update.
 */
async function bookedBeforeReady(stack: BridgeStack, conn: RtConn, release: () => void): Promise<{ again: RtConn; ready: () => void }> {
  await booked(stack); // its response.done came before: the workflow stores its claim first
  let ack!: () => void;
  stack.realtime.holdUpdates = new Promise((r) => (ack = r));
  conn.drop();
  const again = await until<RtConn>(stack.realtime, 'connection');
  await clientEvent(again, 'session.update');
  release();
  await until(stack.events, 'answered', () => true, 'the workflow answered');
  await new Promise((r) => setImmediate(r)); // the bridge turns the answer into its output within this turn
  stack.realtime.holdUpdates = null;
  return { again, ready: ack };
}

describe('phone bridge: a function result across a realtime reconnect', () => {
  it('a booking still running when the session drops: its result goes to the new session, with its call, and the caller hears the answer', async () => {
    s = await bridgeStack();
    const { release, call, callId, again } = await droppedWhileBooking(s, 'CA0301');
    release();
    await toldOutcome(s, call, again, await callId);
    call.hangUp();
    expect((await s.endOf('CA0301')).record).toMatchObject({ outcome: 'booking', ended_reason: 'caller_hangup' });
  });

  it('a booking that completes while the new session is not yet ready (session.update not acknowledged) is given to it once ready', async () => {
    s = await bridgeStack();
    const release = holdBookings(s);
    const { call, conn, callId } = await bookingCall(s, 'CA0302');
    const { again, ready } = await bookedBeforeReady(s, conn, release);
    ready();
    await toldOutcome(s, call, again, await callId);
    call.hangUp();
    await s.endOf('CA0302');
  });

  it('keys pressed as a new session is given a result, before it has echoed the replayed lines, are answered once that result’s answer is done', async () => {
    s = await bridgeStack();
    const release = holdBookings(s);
    const got = { audio: assistantAudio(300), transcript: 'Thank you, I have your booking number.' };
    const { call, conn, callId } = await bookingCall(s, 'CA0307');
    const answers = [CONFIRMED, got];
    const script = s.realtime.brain;
    s.realtime.brain = (ctx) => (ctx.trigger === 'create' && !ctx.instructions ? (answers.shift() ?? null) : script(ctx));
    const { again, ready } = await bookedBeforeReady(s, conn, release);
    // Ready, the new session is given the conversation and the result and asked to answer; what
    // the server says of them reaches the bridge late, and the caller presses keys meanwhile.
    again.once('client', () => {
      again.lag();
      call.press('7');
      call.press('#');
    });
    ready();
    await clientEvent(again, 'conversation.item.create', (e: any) => e.item.content?.[0]?.text === '(keys pressed: 7)');
    // before: the replayed caller line was taken for the keys, and the result's answer for theirs
    const toKeys = serverEvent(again, 'response.done', (e) => e.response.output[0]?.content?.[0]?.transcript === got.transcript);
    again.catchUp();
    await toldOutcome(s, call, again, await callId);
    await toKeys;
    await until(call, 'frame', () => call.playedBytes === call.receivedBytes, 'the answer to the keys heard');
    call.hangUp();
    expect((await s.endOf('CA0307')).transcript.map((l) => l.text).slice(-1)).toEqual([got.transcript]);
  });

  it('a session cut after announcing the call but before its response was done: the booking runs once and the new session hears it', async () => {
    s = await bridgeStack();
    const { call, conn, callId } = await bookingCall(s, 'CA0303');
    cutAfter(conn, 'response.function_call_arguments.done');
    const again = await until<RtConn>(s.realtime, 'connection');
    await toldOutcome(s, call, again, await callId);
    expect(conn.events.filter((e) => e.type === 'conversation.item.create')).toEqual([]);
    call.hangUp();
    expect((await s.endOf('CA0303')).record).toMatchObject({ outcome: 'booking' });
  });

  it('a session cut while the arguments were still streaming: nothing is run, and the new session is asked to answer', async () => {
    s = await bridgeStack();
    const { call, conn } = await bookingCall(s, 'CA0304');
    cutAfter(conn, 'response.function_call_arguments.delta');
    const again = await until<RtConn>(s.realtime, 'connection');
    await clientEvent(again, 'response.create', (e: any) => !e.response);
    await serverEvent(again, 'response.done');
    expect(again.items.filter((i) => i.type !== 'message')).toEqual([]);
    expect(s.hooks.seen).toEqual([]);
    call.hangUp();
    expect((await s.endOf('CA0304')).record).toMatchObject({ outcome: 'abandoned' });
  });

  it('a result the old session had but never answered (cut while answering) is given again to the new session', async () => {
    s = await bridgeStack();
    const { call, conn, callId } = await bookingCall(s, 'CA0305', { ...CONFIRMED, delayMs: 200 });
    cutAfter(conn, 'response.created', () => conn.items.some((i) => i.type === 'function_call_output'));
    const again = await until<RtConn>(s.realtime, 'connection');
    s.realtime.brain = brain({ afterOutput: CONFIRMED });
    await toldOutcome(s, call, again, await callId);
    call.hangUp();
    await s.endOf('CA0305');
  });

  it('a result that comes in while the new session is answering the caller is asked about once that answer is done (never a second response at once)', async () => {
    s = await bridgeStack();
    const { release, call, callId, again } = await droppedWhileBooking(s, 'CA0306');
    // The caller, hearing nothing, speaks: the new session answers that turn, slowly.
    s.realtime.brain = brain({ turns: [{ ...HOLD_ON, delayMs: 1500 }], afterOutput: CONFIRMED });
    const answering = serverEvent(again, 'response.created');
    speak(call, 400);
    const busy = (await answering).response.id as string;
    let busyDone = false;
    void serverEvent(again, 'response.done', (e) => e.response.id === busy).then(() => (busyDone = true));
    release();
    await clientEvent(again, 'conversation.item.create', (e: any) => e.item.type === 'function_call_output');
    expect(busyDone).toBe(false); // the result came in while that answer was in progress
    await serverEvent(again, 'response.output_audio_transcript.done', (e) => e.transcript === CONFIRMED.transcript);
    const id = await callId;
    expect(again.items.filter((i) => i.call_id === id).map((i) => i.type)).toEqual(['function_call', 'function_call_output']);
    expect(s.logs.filter((l) => l.includes('realtime error'))).toEqual([]);
    call.hangUp();
    expect((await s.endOf('CA0306')).record).toMatchObject({ outcome: 'booking' });
  });
});

describe('phone bridge: the cost of an answer lost with its session', () => {
  it('an answer under way when the session drops is metered (unpriced: its usage went with the socket) and billed by the guard at the estimate of its audio', async () => {
    s = await bridgeStack();
    s.realtime.chunkBytes = 160;
    s.realtime.paceMs = 20; // the answer is still coming when the session drops
    s.realtime.brain = brain({ turns: [{ audio: assistantAudio(6000), transcript: 'A long answer' }] });
    const call = await s.twilio.call('CAR20');
    const conn = s.realtime.conns[0] ?? (await until<RtConn>(s.realtime, 'connection'));
    await until(call, 'frame', () => call.playedBytes > 0 && call.playedBytes === call.receivedBytes, 'the greeting heard');
    const heardBefore = call.receivedBytes;
    speak(call, 400);
    await until(call, 'frame', () => call.receivedBytes >= heardBefore + 8000, 'a second of the answer sent');
    conn.drop();
    const next = await until<RtConn>(s.realtime, 'connection');
    await serverEvent(next, 'response.done'); // the new session is asked for the answer again
    call.hangUp();
    const { record } = await s.endOf('CAR20');
    // The realtime model's responses (the caller's turn's transcription is metered apart: no turn).
    const events = s.meterEvents.filter((e) => e.job_id === 'CAR20' && e.model === s!.config.meta.model);
    const lost = events.filter((e) => e.cost_usd === null);
    expect(lost).toHaveLength(1);
    expect(lost[0].error_code).toBe('FAILED|UNPRICED');
    // The guard counts it as a turn, billed at the estimate of the second and more of its audio the caller was sent.
    const all = s.meterEvents.filter((e) => e.job_id === 'CAR20');
    const priced = all.filter((e) => e.cost_usd !== null).reduce((a, e) => a + e.cost_usd!, 0);
    const st = (await s.voice.get('CAR20'))!.state;
    expect(record!.turns).toBe(events.length);
    expect(record!.est_audio_cost_usd).toBeGreaterThan(priced + (1000 / 50) * (s.config.spend_guard.audio_out_per_million / 1e6) * 0.99);
    expect(st.turns).toBe(events.length);
  });
});

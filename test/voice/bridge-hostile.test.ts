// Odd and hostile input from either side of a live call, through the loopback peers: messages on
// Twilio's media stream that are not Twilio's objects, usage figures from the realtime model that
// are not token counts, a function call the model announces twice. None may crash the process,
// leave a call stuck, put a made-up cost in the meter, or blind the spend guard.
import { EventEmitter } from 'node:events';
import type { WebSocket } from 'ws';
import { afterEach, describe, expect, it } from 'vitest';
import { GuardFeed } from '../../gateway/src/voice/phone/guard-feed';
import { bridgeStack, type BridgeStack } from './peers/bridge-stack';
import type { RtConn } from './peers/realtime-peer';
import { BOOKING, assistantAudio, brain, clientEvent, serverEvent, speak } from './peers/script';
import type { MediaCall } from './peers/twilio-peer';
import { until } from './peers/wait';
import { logInto } from './peers/bridge-host';

let s: BridgeStack | null = null;
afterEach(async () => {
  await s?.close();
  s = null;
});

async function answered(stack: BridgeStack, callSid: string): Promise<{ call: MediaCall; conn: RtConn }> {
  const call = await stack.twilio.call(callSid);
  const conn = stack.realtime.conns.at(-1) ?? (await until<RtConn>(stack.realtime, 'connection'));
  await until(call, 'frame', () => call.playedBytes > 0 && call.playedBytes === call.receivedBytes, 'the greeting heard');
  return { call, conn };
}

const socketClosed = (ws: WebSocket) =>
  ws.readyState === ws.CLOSED ? Promise.resolve() : new Promise<void>((r) => ws.once('close', () => r()));

const update = (stack: BridgeStack, callSid: string) =>
  stack.twilio.updates.find((u) => u.callSid === callSid) ??
  until<(typeof stack.twilio.updates)[number]>(stack.twilio.events, 'update', (u) => u.callSid === callSid, `a call update for ${callSid}`);

/** Uncaught exceptions and unhandled rejections while a test runs (the process must never see one: either ends it); `stop` when done. */
function watchUncaught() {
  const seen: unknown[] = [];
  const onUncaught = (e: unknown) => void seen.push(e);
  process.on('uncaughtException', onUncaught);
  process.on('unhandledRejection', onUncaught);
  return {
    seen,
    stop: () => void (process.off('uncaughtException', onUncaught), process.off('unhandledRejection', onUncaught)),
  };
}

describe('phone bridge: hostile input', () => {
  it('a stream that falls silent without closing ends its call: the record is written once (stream_lost), the realtime session and the socket closed', async () => {
    s = await bridgeStack(() => undefined, { streamSilentForMs: 1500 });
    s.realtime.brain = brain({});
    const { call, conn } = await answered(s, 'CAH00');
    call.stall();
    const end = await s.endOf('CAH00');
    expect(end.record).toMatchObject({ call_id: 'CAH00', ended_reason: 'stream_lost' });
    await socketClosed(conn.ws);
    await socketClosed(call.ws);
    expect(s.bridge.liveCalls).toBe(0);
    expect(s.records.filter((r) => r.call_id === 'CAH00')).toHaveLength(1);
    expect(s.logs.some((l) => l.startsWith('warn twilio media: call CAH00: nothing from Twilio'))).toBe(true);
  });

  it('a stream that stops taking the audio (Twilio reads nothing more, its frames still come) ends its call as stream_lost: the audio is not buffered without bound', async () => {
    s = await bridgeStack();
    s.realtime.brain = brain({});
    const { call, conn } = await answered(s, 'CAH10');
    (call.ws as unknown as { _socket: { pause(): void } })._socket.pause(); // the frames go on (run), nothing is read
    conn.send({ type: 'response.created', response: { id: 'resp_L', status: 'in_progress', output: [], metadata: null } });
    const chunk = assistantAudio(10_000).toString('base64'); // 10 s a delta
    const delta = {
      type: 'response.output_audio.delta',
      response_id: 'resp_L',
      item_id: 'item_L',
      output_index: 0,
      content_index: 0,
      delta: chunk,
    };
    // 20 minutes of audio, each delta once the model's socket took the one before.
    for (let i = 0; i < 120; i++) await new Promise<void>((r) => conn.ws.send(JSON.stringify(delta), () => r()));
    expect((await s.endOf('CAH10')).record).toMatchObject({ ended_reason: 'stream_lost' });
    expect(s.logs.some((l) => l.startsWith('warn call CAH10: Twilio is not taking the audio'))).toBe(true);
    expect(s.bridge.liveCalls).toBe(0);
  });

  it('a stream whose socket breaks without `stop` (reset mid-call, closed with 1011, or a frame the gateway refuses with 1009) ends its call as stream_lost, not as the caller hanging up; the record is written once', async () => {
    s = await bridgeStack();
    s.realtime.brain = brain({});
    const reset = await answered(s, 'CAH17');
    reset.call.reset();
    expect((await s.endOf('CAH17')).record).toMatchObject({ call_id: 'CAH17', ended_reason: 'stream_lost' });
    await socketClosed(reset.conn.ws);
    expect(s.logs.some((l) => l.startsWith('warn twilio media: call CAH17: the stream closed without a stop (code 1006)'))).toBe(true);
    const failed = await answered(s, 'CAH18');
    failed.call.ws.close(1011);
    expect((await s.endOf('CAH18')).record).toMatchObject({ call_id: 'CAH18', ended_reason: 'stream_lost' });
    const refused = await answered(s, 'CAH16');
    refused.call.ws.send('x'.repeat(300 * 1024)); // over the stream's 256 KiB: the gateway refuses it (1009)
    expect((await s.endOf('CAH16')).record).toMatchObject({ call_id: 'CAH16', ended_reason: 'stream_lost' });
    expect(s.records.filter((r) => r.call_id === 'CAH17')).toHaveLength(1);
    expect(s.bridge.liveCalls).toBe(0);
  });

  it('a stream that closes without `stop` but with a normal close (1000, 1001) ends its call as the caller hanging up, as after a `stop`', async () => {
    s = await bridgeStack();
    s.realtime.brain = brain({});
    for (const [callSid, code] of [
      ['CAH13', 1000],
      ['CAH14', 1001],
    ] as const) {
      const { call } = await answered(s, callSid);
      call.ws.close(code);
      expect((await s.endOf(callSid)).record).toMatchObject({ call_id: callSid, ended_reason: 'caller_hangup' });
    }
  });

  it('a media frame whose payload is not whole base64 (a length that is not a multiple of 4) is dropped: the model never gets it, the guard never counts it', async () => {
    s = await bridgeStack();
    s.realtime.brain = brain({});
    const { call, conn } = await answered(s, 'CAH02');
    const bad = ['A=', 'AAAAA', 'QUJD=', 'AAAAAAA', '/w'];
    for (const payload of bad) call.send({ event: 'media', streamSid: call.streamSid, media: { track: 'inbound', payload } });
    speak(call); // a good turn after them still reaches the model
    await serverEvent(conn, 'response.done');
    const appended = conn.events.filter((e) => e.type === 'input_audio_buffer.append').map((e: any) => e.audio as string);
    expect(appended.filter((a) => bad.includes(a))).toEqual([]);
    call.hangUp();
    await s.endOf('CAH02');
    expect(Number.isInteger((await s.voice.get('CAH02'))!.state.inputMs * 8)).toBe(true);
  });

  it('a message that is not a JSON object on a live stream (not JSON, binary, null, array, number, string, no event) is ignored and logged once; the call goes on and ends cleanly', async () => {
    s = await bridgeStack();
    s.realtime.brain = brain({});
    const uncaught = watchUncaught();
    try {
      const { call, conn } = await answered(s, 'CAH01');
      for (const text of ['null', '[]', '[{"event":"stop"}]', '5', '"stop"', 'true', '{}', '{"event":null}', 'not json', '{"event":"me'])
        call.ws.send(text);
      call.ws.send(Buffer.from([0x7b, 0x7d]), { binary: true });
      // The stream is still read: the caller's next turn reaches the model and is answered.
      speak(call);
      await serverEvent(conn, 'response.done');
      expect(s.bridge.liveCalls).toBe(1);
      call.hangUp();
      const end = await s.endOf('CAH01');
      await socketClosed(conn.ws);
      expect(end.record).toMatchObject({ call_id: 'CAH01', ended_reason: 'caller_hangup' });
      expect(s.bridge.liveCalls).toBe(0);
      expect(uncaught.seen).toEqual([]);
      const warned = s.logs.filter((l) => l.includes('not a JSON object'));
      expect(warned).toHaveLength(1); // once per stream, not once per message
      expect(warned[0]).toContain('CAH01');
      await s.bridge.close(); // nothing left hanging
    } finally {
      uncaught.stop();
    }
  });

  it('a fault while handling a stream message ends that call cleanly (record, realtime closed), never the process', async () => {
    s = await bridgeStack();
    s.realtime.brain = brain({});
    const uncaught = watchUncaught();
    try {
      const { call, conn } = await answered(s, 'CAH05');
      // The fault: the log throws on the line the bridge writes for a malformed message.
      const push = s.logs.push.bind(s.logs);
      s.logs.push = (...lines: string[]) => {
        if (lines.some((l) => l.includes('not a JSON object'))) throw new Error('log sink broke');
        return push(...lines);
      };
      call.ws.send('null');
      const end = await s.endOf('CAH05');
      await socketClosed(conn.ws);
      if (!call.closed) await until(call, 'closed');
      expect(end.record).toMatchObject({ call_id: 'CAH05', ended_reason: 'bridge_error' });
      expect(s.logs.some((l) => l.startsWith('error') && l.includes('log sink broke'))).toBe(true);
      expect(s.bridge.liveCalls).toBe(0);
      expect(uncaught.seen).toEqual([]);
    } finally {
      uncaught.stop();
    }
  });

  it('an error event from the realtime model without details, or with details that are not text, is logged and the call goes on', async () => {
    s = await bridgeStack();
    s.realtime.brain = brain({});
    const uncaught = watchUncaught();
    try {
      const { call, conn } = await answered(s, 'CAH06');
      conn.send({ type: 'error' });
      conn.send({ type: 'error', error: null });
      conn.send({ type: 'error', error: { type: 'invalid_request_error', code: 7, message: { text: 'odd' } } });
      // The same session still answers the caller's next turn.
      speak(call);
      await serverEvent(conn, 'response.done', (e) => e.response?.id?.startsWith('resp_'));
      await until(call, 'frame', () => call.playedBytes === call.receivedBytes, 'the answer heard');
      expect(s.realtime.conns).toHaveLength(1);
      const errors = s.logs.filter((l) => l.includes('CAH06: realtime error'));
      expect(errors).toEqual([
        'warn call CAH06: realtime error (no details)',
        'warn call CAH06: realtime error (no details)',
        'warn call CAH06: realtime error (invalid_request_error)',
      ]);
      call.hangUp();
      expect((await s.endOf('CAH06')).record).toMatchObject({ ended_reason: 'caller_hangup' });
      expect(uncaught.seen).toEqual([]);
    } finally {
      uncaught.stop();
    }
  });

  it('a fault while handling a realtime event is that session failing (one more session, the call goes on), never the process', async () => {
    s = await bridgeStack();
    s.realtime.brain = brain({});
    const uncaught = watchUncaught();
    try {
      const { call, conn } = await answered(s, 'CAH07');
      // The fault: the log throws once, on the line the bridge writes for a realtime error.
      const push = s.logs.push.bind(s.logs);
      let broke = false;
      s.logs.push = (...lines: string[]) => {
        if (!broke && lines.some((l) => l.includes('realtime error'))) {
          broke = true;
          throw new Error('log sink broke');
        }
        return push(...lines);
      };
      const next = until<RtConn>(s.realtime, 'connection');
      conn.send({ type: 'error', error: { type: 'invalid_request_error', code: 'invalid_value', message: 'bad' } });
      const second = await next;
      await clientEvent(second, 'session.update');
      speak(call);
      await serverEvent(second, 'response.done', (e) => e.response?.id?.startsWith('resp_'));
      expect(s.logs.some((l) => l.includes('CAH07') && l.includes('log sink broke'))).toBe(true);
      expect(s.bridge.liveCalls).toBe(1);
      call.hangUp();
      expect((await s.endOf('CAH07')).record).toMatchObject({ ended_reason: 'caller_hangup' });
      expect(uncaught.seen).toEqual([]);
    } finally {
      uncaught.stop();
    }
  });

  it('a realtime event larger than any the API sends (over 16 MiB) is that session failing (one more session, the call goes on), never taken into memory whole', async () => {
    s = await bridgeStack();
    s.realtime.brain = brain({});
    const { call, conn } = await answered(s, 'CAH15');
    const next = until<RtConn>(s.realtime, 'connection');
    conn.ws.send(
      JSON.stringify({ type: 'rate_limits.updated', event_id: 'evt_big', rate_limits: [{ name: 'x'.repeat(17 * 1024 * 1024) }] }),
    );
    const second = await next;
    expect(
      s.logs.some((l) => l.startsWith('warn call CAH15: realtime session failed (the realtime socket failed (Max payload size exceeded')),
    ).toBe(true);
    await clientEvent(second, 'session.update');
    speak(call);
    await serverEvent(second, 'response.done');
    call.hangUp();
    expect((await s.endOf('CAH15')).record).toMatchObject({ ended_reason: 'caller_hangup' });
  });

  it('a response.done whose output is not a list of items is metered once and the call goes on: never an unhandled rejection, which ends the process', async () => {
    s = await bridgeStack();
    s.realtime.brain = brain({});
    const uncaught = watchUncaught();
    try {
      const { call, conn } = await answered(s, 'CAH08');
      const usage = { input_tokens: 10, output_tokens: 10, output_token_details: { audio_tokens: 10 } };
      const outputs: unknown[] = [5, 'text', { type: 'message' }, [null], [{ type: 'message', id: 'item_odd', content: 7 }]];
      outputs.forEach((output, i) =>
        conn.send({ type: 'response.done', response: { id: `resp_odd${i}`, status: 'completed', output, usage } }),
      );
      // The same session still answers the caller's next turn.
      speak(call);
      await serverEvent(conn, 'response.done', (e) => e.response?.id?.startsWith('resp_'));
      expect(s.realtime.conns).toHaveLength(1);
      call.hangUp();
      const end = await s.endOf('CAH08');
      expect(end.record).toMatchObject({ ended_reason: 'caller_hangup' });
      expect(uncaught.seen).toEqual([]);
      // Each odd response is metered once, at its usage.
      const odd = s.meterEvents.filter((e) => e.job_id === 'CAH08' && e.input_tokens === 10 && e.output_tokens === 10);
      expect(odd).toHaveLength(outputs.length);
    } finally {
      uncaught.stop();
    }
  });

  it('responses whose response.done never comes are each counted once the next one begins: the turn cap still fires, and every response is metered once', async () => {
    s = await bridgeStack((c) => {
      c.guardrails.max_turns = 3;
      for (const rule of c.escalation.rules) if (rule.trigger === 'turn_cap_reached') rule.threshold = 3;
    });
    s.realtime.brain = brain({});
    const { call, conn } = await answered(s, 'CAH12'); // the greeting: one turn, its response.done came
    s.realtime.lose = (e) => e.type === 'response.done';
    const transferred = update(s, 'CAH12');
    for (let i = 0; i < 3; i++) {
      speak(call);
      await serverEvent(conn, 'response.output_audio.done');
    }
    expect((await transferred).form.Twiml).toContain('<Dial');
    const end = await s.endOf('CAH12');
    expect(end.record).toMatchObject({ ended_reason: 'turn_cap', turns: 4 }); // the greeting, the three answers
    const responses = s.meterEvents.filter((e) => e.job_id === 'CAH12' && e.model === s!.config.meta.model);
    expect(responses).toHaveLength(4); // the greeting and the three answers, each once
    expect(responses.slice(1).every((e) => e.error_code.includes('UNPRICED'))).toBe(true);
  });

  it('a function result given while an answer runs, and held by the server only once that answer is done, is still answered', async () => {
    s = await bridgeStack();
    s.realtime.brain = brain({ afterOutput: { audio: assistantAudio(200), transcript: 'You are booked.' } });
    const { conn } = await answered(s, 'CAH21');
    let release!: () => void;
    const released = new Promise<void>((r) => (release = r));
    const book = s.hooks.handle;
    s.hooks.handle = (req, res, body) => void released.then(() => book(req, res, body));
    const args = JSON.stringify(BOOKING);
    conn.items.push({ type: 'function_call', call_id: 'call_B', name: 'book_slot', arguments: args });
    conn.send({ type: 'response.created', response: { id: 'resp_B', status: 'in_progress', output: [], metadata: null } });
    const fc = { response_id: 'resp_B', item_id: 'item_fB', output_index: 0, call_id: 'call_B', name: 'book_slot', arguments: args };
    conn.send({ type: 'response.function_call_arguments.done', ...fc });
    conn.send({ type: 'response.done', response: { id: 'resp_B', status: 'completed', output: [], usage: { input_tokens: 1 } } });
    await until(s.hooks.events, 'request', (r: any) => r.path === '/book_slot', 'the booking asked for');
    // The caller spoke meanwhile: an answer runs as the result comes in, and it is done before the
    // server's echo of the result (the server took the result after that answer ended).
    conn.send({ type: 'response.created', response: { id: 'resp_Y', status: 'in_progress', output: [], metadata: null } });
    conn.on('client', (e: any) => {
      if (e.type !== 'conversation.item.create' || e.item.type !== 'function_call_output') return;
      conn.send({ type: 'response.done', response: { id: 'resp_Y', status: 'completed', output: [], usage: { input_tokens: 1 } } });
    });
    release();
    await serverEvent(conn, 'response.output_audio_transcript.done', (e) => e.transcript === 'You are booked.');
    expect(conn.events.filter((e: any) => e.type === 'response.create' && !e.response)).toHaveLength(1);
  });

  it("a booking whose response's response.done never comes is still given to the model once the next response begins, run once, and answered", async () => {
    s = await bridgeStack();
    s.realtime.brain = brain({
      turns: [{ call: { name: 'book_slot', args: BOOKING } }, { audio: assistantAudio(200), transcript: 'Let me check.' }],
      afterOutput: { audio: assistantAudio(200), transcript: 'You are booked.' },
    });
    const { call, conn } = await answered(s, 'CAH20');
    s.realtime.lose = (e: any) => e.type === 'response.done' && e.response.output?.[0]?.type === 'function_call';
    speak(call); // the model books; that response's response.done is lost on the way
    const announced = await serverEvent(conn, 'response.function_call_arguments.done');
    await until(s.events, 'answered', () => true, 'the booking made');
    speak(call); // the next response begins: the booking's is over
    const output = await clientEvent(conn, 'conversation.item.create', (e) => e.item.type === 'function_call_output');
    expect(output.item.call_id).toBe(announced.call_id);
    expect(JSON.parse(output.item.output)).toEqual({ ok: true, result: { ok: true, booking_id: 'evt-1' } });
    // The model is asked to answer it, and the caller hears the outcome.
    await serverEvent(conn, 'response.output_audio_transcript.done', (e) => e.transcript === 'You are booked.');
    // Its response.done comes after all: nothing is given twice. The next answer's audio, after it
    // on the same socket, reaching the caller says the bridge has read it.
    const lost = { id: announced.response_id, status: 'completed', output: [], usage: { input_tokens: 1, output_tokens: 1 } };
    conn.send({ type: 'response.done', response: lost });
    const heard = call.receivedBytes;
    speak(call);
    await until(call, 'frame', () => call.receivedBytes > heard, 'the next answer');
    call.hangUp();
    const { record } = await s.endOf('CAH20');
    expect(record).toMatchObject({ outcome: 'booking', ended_reason: 'caller_hangup' });
    expect(s.hooks.seen.filter((h) => h.path === '/book_slot')).toHaveLength(1);
    const outputs = conn.events.filter((e: any) => e.type === 'conversation.item.create' && e.item.type === 'function_call_output');
    expect(outputs).toHaveLength(1);
  });

  // The answer to a booking's result whose response.done was lost left that result owed for good:
  // a new session after a reconnect was given it again, and the caller told of the booking twice.
  it("a booking's result answered by a response whose response.done never comes is not given again after a reconnect", async () => {
    s = await bridgeStack();
    const booked = { audio: assistantAudio(200), transcript: 'You are booked.' };
    s.realtime.brain = brain({
      turns: [{ call: { name: 'book_slot', args: BOOKING } }, { audio: assistantAudio(200), transcript: 'Anything else?' }],
      afterOutput: booked,
    });
    const { call, conn } = await answered(s, 'CAH22');
    s.realtime.lose = (e: any) => e.type === 'response.done' && e.response.output?.[0]?.content?.[0]?.transcript === booked.transcript;
    speak(call); // the model books, is given the result and tells the caller; that answer's response.done is lost
    await serverEvent(conn, 'response.output_audio_transcript.done', (e) => e.transcript === booked.transcript);
    speak(call); // the next response begins: the answer to the result is over
    await serverEvent(conn, 'response.done', (e) => e.response.output?.[0]?.content?.[0]?.transcript === 'Anything else?');
    conn.ws.close(1011);
    const again = await until<RtConn>(s.realtime, 'connection');
    await serverEvent(again, 'session.updated');
    speak(call);
    await serverEvent(again, 'response.done');
    const given = again.events.filter((e: any) => e.type === 'conversation.item.create' && e.item.type === 'function_call_output');
    expect(given).toEqual([]);
    call.hangUp();
    await s.endOf('CAH22');
  });

  it("a speech end the model places before the session's audio began (a negative audio_end_ms) is taken as now: no reply delay longer than the call in the record, the meter or the guard", async () => {
    s = await bridgeStack();
    s.realtime.brain = brain({});
    const { call, conn } = await answered(s, 'CAH22');
    const answer = (id: string, audioEndMs: number) => {
      const at = { response_id: id, item_id: `item_${id}`, output_index: 0, content_index: 0 };
      conn.send({ type: 'input_audio_buffer.speech_stopped', audio_end_ms: audioEndMs, item_id: `item_u_${id}` });
      conn.send({ type: 'response.created', response: { id, status: 'in_progress', output: [], metadata: null } });
      conn.send({ type: 'response.output_audio.delta', ...at, delta: assistantAudio(100).toString('base64') });
      conn.send({ type: 'response.output_audio.done', ...at });
      conn.send({ type: 'response.done', response: { id, status: 'completed', output: [], usage: { input_tokens: 1, output_tokens: 1 } } });
    };
    const heard = call.receivedBytes;
    answer('resp_E1', -3_000_000); // "50 minutes before the session began"
    answer('resp_E2', -1e300);
    await until(call, 'frame', () => call.receivedBytes >= heard + 1600, 'both answers');
    call.hangUp();
    const { record } = await s.endOf('CAH22');
    expect(record).toMatchObject({ ended_reason: 'caller_hangup', escalated: false });
    // A reply delay is part of the call: never longer than it.
    expect(record!.ttfb_s).toBeLessThanOrEqual(record!.duration_s);
    const answers = s.meterEvents.filter((e) => e.job_id === 'CAH22' && e.model === s!.config.meta.model).slice(1);
    expect(answers).toHaveLength(2);
    for (const e of answers) expect(e.latency_ms).toBeLessThanOrEqual(record!.duration_s * 1000);
    expect(s.logs.filter((l) => l.includes('the spend guard refused'))).toEqual([]);
  });

  it('usage figures that are not token counts are dropped and logged; the meter and the guard keep the good ones, and the cap still ends the call', async () => {
    s = await bridgeStack(); // cap 0.35 USD; audio in 10, out 20 USD per million tokens
    s.realtime.brain = brain({
      greeting: {
        audio: assistantAudio(300),
        usage: {
          input_tokens: -7,
          output_tokens: '20000',
          input_token_details: { audio_tokens: -500_000, cached_tokens_details: { audio_tokens: 1.5 } },
          output_token_details: { audio_tokens: 20_000 }, // 0.4 USD: over the cap
        },
      },
    });
    const call = await s.twilio.call('CAH02');
    const u = await update(s, 'CAH02');
    expect(u.form).toEqual({ Status: 'completed' });
    const end = await s.endOf('CAH02');
    expect(end.record).toMatchObject({ ended_reason: 'per_call_cap' });
    expect(end.estUsd_at_disconnect).toBeCloseTo(0.4, 6);
    const greeting = s.meterEvents.find((e) => e.job_id === 'CAH02' && e.output_tokens === 0 && (e.cost_usd ?? 0) > 0.3)!;
    expect(greeting).toMatchObject({ input_tokens: 0, output_tokens: 0, cost_usd: 0.4 });
    for (const e of s.meterEvents) {
      for (const n of [e.input_tokens, e.output_tokens, e.cost_usd]) expect(n === null || (Number.isFinite(n) && n >= 0)).toBe(true); // null: not priced
    }
    const dropped = s.logs.filter((l) => l.includes('usage field'));
    expect(dropped).toHaveLength(1); // one line per response
    for (const field of [
      'input_tokens=-7',
      'output_tokens="20000"',
      'input_token_details.audio_tokens=-500000',
      'input_token_details.cached_tokens_details.audio_tokens=1.5',
    ])
      expect(dropped[0]).toContain(field);
    expect(s.logs.filter((l) => l.includes('refused events'))).toEqual([]);
    expect(call.closed || (await until(call, 'closed'))).toBeTruthy();
  });

  it('a response that reports no usage (none, or not an object) is metered without a price and marked UNPRICED, never as a silent $0', async () => {
    s = await bridgeStack();
    s.realtime.brain = brain({ greeting: { audio: assistantAudio(300), usage: null } });
    const call = await s.twilio.call('CAH06');
    await until(call, 'frame', () => call.playedBytes > 0 && call.playedBytes === call.receivedBytes, 'the greeting heard');
    call.hangUp();
    await s.endOf('CAH06');
    const events = s.meterEvents.filter((e) => e.job_id === 'CAH06');
    expect(events).toHaveLength(1);
    expect(events[0]).toMatchObject({ cost_usd: null, error_code: 'UNPRICED' });
  });

  it('a usage without a usable audio count (absent, or each dropped) is UNPRICED as one without usage, not a silent $0 beside the guard’s estimate', async () => {
    s = await bridgeStack();
    const usage = { input_tokens: 900, output_tokens: 40, input_token_details: { audio_tokens: -5 }, output_token_details: {} };
    s.realtime.brain = brain({ greeting: { audio: assistantAudio(300), usage } });
    const call = await s.twilio.call('CAH07');
    await until(call, 'frame', () => call.playedBytes > 0 && call.playedBytes === call.receivedBytes, 'the greeting heard');
    call.hangUp();
    const end = await s.endOf('CAH07');
    expect(end.record?.est_audio_cost_usd).toBeGreaterThan(0); // the guard billed the greeting its estimate
    const events = s.meterEvents.filter((e) => e.job_id === 'CAH07');
    expect(events).toHaveLength(1);
    expect(events[0]).toMatchObject({ input_tokens: 900, output_tokens: 40, cost_usd: null, error_code: 'UNPRICED' });
  });

  it('an event the guard refuses does not take the audio durations sent with it down too', async () => {
    s = await bridgeStack();
    await s.voice.start({ call_id: 'CAH03', from: '+351910000001' });
    const logs: string[] = [];
    const feed = new GuardFeed(s.voice, 'CAH03', () => undefined, logInto(logs));
    feed.frame('user', 2400); // under a second in all: summed and sent with the next event
    feed.frame('assistant', 4000);
    feed.event({ type: 'assistant.response.done', usage: { output_token_details: { audio_tokens: -1 } } });
    await feed.flush();
    const st = (await s.voice.get('CAH03'))!.state;
    expect({ inputMs: st.inputMs, outputMs: st.outputMs, turns: st.turns }).toEqual({ inputMs: 300, outputMs: 500, turns: 0 });
    expect(logs.filter((l) => l.includes('refused'))).toHaveLength(1);
    expect(logs[0]).toContain('output_token_details.audio_tokens');
  });

  it('a batch the guard applied whose answer was lost is sent again and counted once (turns and audio, so the caps are not reached early)', async () => {
    s = await bridgeStack();
    await s.voice.start({ call_id: 'CAH05', from: '+351910000001' });
    let lost = false;
    const flaky: Pick<BridgeStack['voice'], 'events'> = {
      events: async (...args: Parameters<BridgeStack['voice']['events']>) => {
        const out = await s!.voice.events(...args);
        if (!lost) {
          lost = true; // applied, and then the answer never came (a Redis reply lost after its script ran)
          throw new Error('Command timed out');
        }
        return out;
      },
    };
    const feed = new GuardFeed(flaky, 'CAH05', () => undefined, logInto([]));
    feed.frame('assistant', 4000);
    feed.event({ type: 'assistant.response.done' });
    await feed.flush();
    expect(lost).toBe(true);
    const st = (await s.voice.get('CAH05'))!.state;
    expect({ outputMs: st.outputMs, turns: st.turns }).toEqual({ outputMs: 500, turns: 1 });
  });

  it('a function call the model announces twice (same call_id) runs once and is answered once', async () => {
    s = await bridgeStack();
    s.realtime.brain = brain({ afterOutput: { audio: assistantAudio(200), transcript: 'Booked.' } });
    const { conn } = await answered(s, 'CAH04');
    const args = JSON.stringify(BOOKING);
    const fc = {
      type: 'response.function_call_arguments.done',
      response_id: 'resp_X',
      item_id: 'item_fX',
      output_index: 0,
      call_id: 'call_X',
      name: 'book_slot',
      arguments: args,
    };
    conn.send({ type: 'response.created', response: { id: 'resp_X', status: 'in_progress', output: [], metadata: null } });
    conn.send(fc);
    conn.send(fc);
    conn.send({
      type: 'response.done',
      response: { id: 'resp_X', status: 'completed', output: [], usage: { input_tokens: 1, output_tokens: 1 } },
    });
    // The outputs go out before the one response.create that follows them.
    await clientEvent(conn, 'response.create', (e) => e.response?.instructions === undefined);
    const outputs = conn.events.filter((e: any) => e.type === 'conversation.item.create' && e.item.type === 'function_call_output');
    expect(outputs.map((e: any) => e.item.call_id)).toEqual(['call_X']);
    expect(s.hooks.seen.filter((h) => h.path === '/book_slot')).toHaveLength(1);
  });

  it('a function call named like a built-in of every object (constructor, toString) is refused to the model, and a reason that is not text transfers as `transfer`: never an unhandled rejection', async () => {
    s = await bridgeStack();
    s.realtime.brain = brain({ afterOutput: { audio: assistantAudio(200), transcript: 'Sorry.' } });
    const uncaught = watchUncaught();
    try {
      const { conn } = await answered(s, 'CAH09');
      const call = (id: string, name: string, args: string) => {
        conn.send({ type: 'response.created', response: { id, status: 'in_progress', output: [], metadata: null } });
        conn.send({
          type: 'response.function_call_arguments.done',
          response_id: id,
          item_id: `item_${id}`,
          output_index: 0,
          call_id: `call_${id}`,
          name,
          arguments: args,
        });
        conn.send({
          type: 'response.done',
          response: { id, status: 'completed', output: [], usage: { input_tokens: 1, output_tokens: 1 } },
        });
      };
      call('resp_C', 'constructor', '{"date":"2026-11-24","time":"10:00"}');
      call('resp_T', 'toString', '{}');
      await clientEvent(conn, 'response.create', (e) => e.response?.instructions === undefined);
      const outputs = conn.events.filter((e: any) => e.type === 'conversation.item.create' && e.item.type === 'function_call_output');
      expect(outputs.map((e: any) => [e.item.call_id, JSON.parse(e.item.output).ok])).toEqual([
        ['call_resp_C', false],
        ['call_resp_T', false],
      ]);
      // A text whose toString is not a function: String() of it throws.
      call('resp_D', 'escalate_to_human', '{"reason":{"toString":1}}');
      expect((await update(s, 'CAH09')).form.Twiml).toContain('<Dial');
      expect((await s.endOf('CAH09')).record).toMatchObject({ ended_reason: 'transfer', escalated: true });
      expect(uncaught.seen).toEqual([]);
    } finally {
      uncaught.stop();
    }
  });

  it("the model's names and ids reach the log cut short, however long they are (a function's name, a call id, a response id)", async () => {
    s = await bridgeStack();
    s.realtime.brain = brain({ afterOutput: { audio: assistantAudio(200), transcript: 'Sorry.' } });
    const { call, conn } = await answered(s, 'CAH11');
    const long = (c: string) => c.repeat(100_000);
    const fc = {
      type: 'response.function_call_arguments.done',
      response_id: 'resp_N',
      item_id: 'item_N',
      output_index: 0,
      call_id: long('c'),
      name: long('n'),
      arguments: '{}',
    };
    conn.send({ type: 'response.created', response: { id: 'resp_N', status: 'in_progress', output: [], metadata: null } });
    conn.send(fc);
    conn.send(fc);
    conn.send({ type: 'response.done', response: { id: 'resp_N', status: 'completed', output: [], usage: { input_tokens: 1 } } });
    await clientEvent(conn, 'response.create', (e) => e.response?.instructions === undefined);
    // Waited for before the hang-up: Twilio's stop, on the other socket, may otherwise end the call
    // (and close the model's socket) before this event is read.
    const logged = new EventEmitter();
    const push = s.logs.push.bind(s.logs);
    s.logs.push = (...lines: string[]) => {
      const n = push(...lines);
      for (const l of lines) logged.emit('line', l);
      return n;
    };
    const dropped = until<string>(logged, 'line', (l) => l.includes('usage field'), 'the dropped usage logged');
    conn.send({ type: 'response.done', response: { id: long('r'), status: 'completed', output: [], usage: { input_tokens: -1 } } });
    await dropped;
    call.hangUp();
    await s.endOf('CAH11');
    const lines = s.logs.filter((l) => l.includes('CAH11'));
    expect(lines.some((l) => l.includes('announced again'))).toBe(true);
    expect(lines.some((l) => l.includes('failed:'))).toBe(true);
    expect(lines.some((l) => l.includes('usage field'))).toBe(true);
    for (const l of lines) expect(l.length).toBeLessThan(1200);
  });

  it("arguments the function does not declare (an opt-out and a recording URL talked into a lead) never reach the workflow's target", async () => {
    s = await bridgeStack();
    s.realtime.brain = brain({ afterOutput: { audio: assistantAudio(200), transcript: 'Done.' } });
    const { conn } = await answered(s, 'CAH05');
    const declared = { name: 'Ana', phone: '+351910000001', service: 'cleaning' };
    const smuggled = { recording_url: 'https://api.twilio.com/2010-04-01/Accounts/AC1/Recordings/RE1', opted_out: true };
    conn.send({ type: 'response.created', response: { id: 'resp_Y', status: 'in_progress', output: [], metadata: null } });
    conn.send({
      type: 'response.function_call_arguments.done',
      response_id: 'resp_Y',
      item_id: 'item_fY',
      output_index: 0,
      call_id: 'call_Y',
      name: 'create_lead',
      arguments: JSON.stringify({ ...declared, ...smuggled }),
    });
    conn.send({
      type: 'response.done',
      response: { id: 'resp_Y', status: 'completed', output: [], usage: { input_tokens: 1, output_tokens: 1 } },
    });
    await clientEvent(conn, 'response.create', (e) => e.response?.instructions === undefined);
    expect(s.hooks.seen.filter((h) => h.path === '/create_lead').map((h) => (h.body as { args: unknown }).args)).toEqual([declared]);
  });
});

// The phone bridge end to end on loopback: a local Twilio (signed webhook, Media Stream playing
// real µ-law in real time, REST API), the gateway's bridge around the real VoiceService/Workflow
// (Redis), and a local realtime server following the GA event sequence.
import { afterEach, describe, expect, it } from 'vitest';
import { bridgeStack, type BridgeStack } from './peers/bridge-stack';
import { voiced } from './peers/mulaw';
import { until } from './peers/wait';
import { BOOKING, assistantAudio, brain, clientEvent, serverEvent, speak } from './peers/script';
import type { RtConn } from './peers/realtime-peer';

let s: BridgeStack | null = null;
afterEach(async () => {
  await s?.close();
  s = null;
});

const firstConn = (stack: BridgeStack) =>
  stack.realtime.conns[0] ? Promise.resolve(stack.realtime.conns[0]) : until<RtConn>(stack.realtime, 'connection');

describe('phone bridge: the call path', () => {
  it('configures the realtime session from concierge.json and greets with the consent line', async () => {
    s = await bridgeStack();
    s.realtime.brain = brain({});
    const c = s.config;
    const today = () => new Intl.DateTimeFormat('en-CA', { timeZone: c.meta.timezone }).format(new Date());
    const dayBefore = today();
    const call = await s.twilio.call('CA0001');
    const conn = await firstConn(s);
    const update = (await clientEvent(conn, 'session.update')).session;
    expect(update).toMatchObject({
      type: 'realtime',
      model: c.meta.model,
      output_modalities: ['audio'],
      include: ['item.input_audio_transcription.logprobs'],
      audio: {
        input: { format: { type: 'audio/pcmu' }, turn_detection: { type: 'server_vad' }, transcription: { model: expect.any(String) } },
        output: { format: { type: 'audio/pcmu' } },
      },
    });
    const text: string = update.instructions;
    expect(text.indexOf(c.consent.opening_line)).toBeGreaterThan(0);
    expect(text.indexOf(c.consent.opening_line)).toBeLessThan(text.indexOf('- book'));
    for (const id of ['book', 'reschedule', 'qualify', 'pricing_deflection', 'voicemail']) expect(text).toContain(`- ${id}:`);
    for (const q of c.intents[2].on_match.ask!) expect(text).toContain(q);
    expect(text).toContain(c.intents[3].on_match.say!);
    expect(text).toContain('recorded');
    expect(text).toContain('pt-PT');
    expect(text).toContain('en-GB');
    expect(text).toContain('+351910000001'); // the caller's number, to confirm rather than ask
    // Today's date where the business is, and the forms the back office takes: "tomorrow at 10" is not a guess.
    expect([dayBefore, today()]).toContain(text.match(/\d{4}-\d{2}-\d{2}/)?.[0]);
    expect(text).toContain(c.meta.timezone);
    expect(text).toContain('YYYY-MM-DD');
    expect(text).toContain('HH:MM');
    expect(update.tools.map((t: any) => [t.name, Object.keys(t.parameters.properties)])).toEqual(c.functions.map((f) => [f.name, f.args]));
    // The model speaks first: the consent line, and the caller hears it.
    const greet = await clientEvent(conn, 'response.create');
    expect(greet.response.instructions).toContain(c.consent.opening_line);
    await until(
      call,
      'frame',
      () => call.marksEchoed.length > 0 && call.playedBytes === call.receivedBytes && call.receivedBytes > 0,
      'the greeting heard',
    );
    call.hangUp();
    const end = await s.endOf('CA0001');
    expect(end.ended_reason).toBe('caller_hangup');
  });

  it('passes the audio through unchanged both ways (µ-law bytes, no transcoding)', async () => {
    s = await bridgeStack();
    const greeting = assistantAudio(700);
    s.realtime.brain = brain({ greeting: { audio: greeting, transcript: 'Hello' } });
    const call = await s.twilio.call('CA0002');
    const conn = await firstConn(s);
    await until(call, 'frame', () => call.playedBytes >= greeting.length, 'the greeting heard');
    const words = speak(call, 500);
    await serverEvent(conn, 'input_audio_buffer.speech_stopped');
    call.hangUp();
    await s.endOf('CA0002');
    const sent = Buffer.concat(call.sent);
    const got = Buffer.concat(conn.inbound);
    expect(got.length).toBeGreaterThan(sent.length - 160 * 5); // at most the frames in flight at hang-up
    expect(got.equals(sent.subarray(0, got.length))).toBe(true);
    expect(got.indexOf(words)).toBeGreaterThanOrEqual(0);
    expect(Buffer.concat(call.received).subarray(0, greeting.length).equals(greeting)).toBe(true);
  });

  it('barge-in: the caller speaks over the assistant → Twilio clear, and the item truncated at what was heard', async () => {
    s = await bridgeStack();
    const greeting = assistantAudio(300);
    const long = assistantAudio(3000);
    s.realtime.chunkBytes = 320; // 40 ms deltas: a mark every third one (each 100 ms of audio)
    // The consent line is heard whole (no barge-in on it); the caller agrees, and cuts the long answer.
    s.realtime.brain = brain({
      greeting: { audio: greeting, transcript: 'consent line' },
      turns: [{ audio: long, transcript: 'A long answer' }],
    });
    const call = await s.twilio.call('CA0003');
    const conn = await firstConn(s);
    await until(call, 'frame', () => call.playedBytes >= greeting.length, 'the consent line heard');
    speak(call, 400); // agrees (the peer transcribes "yes, hello")
    const answer = await serverEvent(conn, 'response.created', (e) => e.response?.metadata?.bridge === undefined);
    const item = (await serverEvent(conn, 'response.output_audio.delta', (e) => e.response_id === answer.response.id)).item_id;
    await until(call, 'frame', () => call.playedBytes >= greeting.length + 8000, 'one second of the answer heard');
    const told = call.echoedBytes - greeting.length;
    speak(call, 400);
    const cleared = await until<{ playedBytes: number }>(call, 'clear');
    const chunksBefore = call.received.length;
    const truncate = await clientEvent(conn, 'conversation.item.truncate');
    const heardMs = (cleared.playedBytes - greeting.length) / 8;
    expect(truncate).toMatchObject({ item_id: item, content_index: 0 });
    expect(told).toBeGreaterThan(0);
    // Where the caller was: at least what the marks Twilio echoed before the caller spoke said was heard
    // (the same socket as the caller's audio, so the gateway has them first), at most what the caller
    // had heard when Twilio got the clear. Where in between depends on how busy the machine is (echoes
    // come late then); the estimate between marks is checked in bridge-parts.test.ts on a test clock.
    expect(truncate.audio_end_ms).toBeGreaterThanOrEqual(told / 8);
    expect(truncate.audio_end_ms).toBeLessThanOrEqual(heardMs);
    expect(truncate.audio_end_ms).toBeLessThan(3000);
    // The answer to the caller comes; nothing more of the greeting is sent after the clear.
    await serverEvent(conn, 'response.done', (e) => e.response.status === 'completed');
    const later = Buffer.concat(call.received.slice(chunksBefore));
    expect(later.length).toBeGreaterThan(0);
    expect(later.indexOf(long.subarray(16_000, 16_800))).toBe(-1);
    call.hangUp();
    await s.endOf('CA0003');
  });

  it('barge-in over audio left from a lost realtime session: Twilio stops it, and the new session is asked to truncate nothing it never had', async () => {
    s = await bridgeStack();
    const greeting = assistantAudio(300);
    s.realtime.brain = brain({
      greeting: { audio: greeting, transcript: 'consent line' },
      turns: [{ audio: assistantAudio(8000), transcript: 'A long answer' }],
    });
    const call = await s.twilio.call('CA0013');
    const conn = await firstConn(s);
    await until(call, 'frame', () => call.playedBytes >= greeting.length, 'the consent line heard');
    speak(call, 400);
    // The whole long answer is generated and with Twilio, still playing, when the session drops.
    await serverEvent(conn, 'response.done', (e) => e.response.metadata === null);
    conn.drop();
    const again = await until<RtConn>(s.realtime, 'connection');
    await serverEvent(again, 'session.updated');
    speak(call, 400);
    await until(call, 'clear');
    await serverEvent(again, 'response.done', (e) => e.response.status === 'completed');
    expect(again.events.filter((e) => e.type === 'conversation.item.truncate')).toEqual([]);
    expect(s.logs.filter((l) => l.includes('realtime error'))).toEqual([]);
    call.hangUp();
    await s.endOf('CA0013');
  });

  it('barge-in while one answer still plays and the next is queued behind it: each is truncated at what was heard of it', async () => {
    s = await bridgeStack();
    const greeting = assistantAudio(300);
    const first = assistantAudio(3000);
    s.realtime.brain = brain({
      greeting: { audio: greeting, transcript: 'consent line' },
      turns: [{ audio: first, transcript: 'One moment.' }],
    });
    const call = await s.twilio.call('CA0009');
    const conn = await firstConn(s);
    await until(call, 'frame', () => call.playedBytes >= greeting.length, 'the consent line heard');
    speak(call, 400); // agrees; the model's answer (3 s of audio) comes at once, faster than it plays
    const answer = await serverEvent(conn, 'response.done', (e) => e.response.metadata === null && e.response.status === 'completed');
    const firstItem = answer.response.output[0].id as string;
    // A second answer (as after a function's result) while the first still plays: queued behind it.
    const base = { response_id: 'resp_next', item_id: 'item_next', output_index: 0, content_index: 0 };
    conn.send({ type: 'response.created', response: { id: 'resp_next', status: 'in_progress', output: [], metadata: null } });
    conn.send({ type: 'response.output_audio.delta', ...base, delta: assistantAudio(1000).toString('base64') });
    conn.send({ type: 'response.output_audio.done', ...base });
    conn.send({ type: 'response.done', response: { id: 'resp_next', status: 'completed', output: [], metadata: null } });
    await until(call, 'frame', () => call.playedBytes >= greeting.length + 8000, 'one second of the first answer heard');
    const told = call.echoedBytes - greeting.length;
    speak(call, 400);
    const cleared = await until<{ playedBytes: number }>(call, 'clear');
    const heardMs = (cleared.playedBytes - greeting.length) / 8;
    await clientEvent(conn, 'conversation.item.truncate', (e) => e.item_id === 'item_next');
    const truncates = conn.events.filter((e) => e.type === 'conversation.item.truncate') as any[];
    const byItem = Object.fromEntries(truncates.map((t) => [t.item_id, t.audio_end_ms]));
    // The first answer was cut where the caller was; nothing of the second was heard.
    expect(Object.keys(byItem).sort()).toEqual([firstItem, 'item_next'].sort());
    expect(told).toBeGreaterThan(0);
    expect(byItem[firstItem]).toBeGreaterThanOrEqual(told / 8); // what the echoes said was heard (see the first barge-in)
    expect(byItem[firstItem]).toBeLessThanOrEqual(heardMs);
    expect(byItem.item_next).toBe(0);
    call.hangUp();
    await s.endOf('CA0009');
  });

  it('barge-in: audio of an answer still on its way when the caller cut in (the model cancels it) is never played after the clear', async () => {
    s = await bridgeStack();
    const greeting = assistantAudio(300);
    s.realtime.brain = brain({
      greeting: { audio: greeting, transcript: 'consent line' },
      turns: [{ audio: assistantAudio(3000), transcript: 'One moment.' }],
    });
    const call = await s.twilio.call('CA0010');
    const conn = await firstConn(s);
    await until(call, 'frame', () => call.playedBytes >= greeting.length, 'the consent line heard');
    speak(call, 400); // agrees; a 3 s answer comes at once
    await serverEvent(conn, 'response.done', (e) => e.response.metadata === null && e.response.status === 'completed');
    // The next answer (as after a function's result) has begun: created, its audio not yet here.
    conn.send({ type: 'response.created', response: { id: 'resp_late', status: 'in_progress', output: [], metadata: null } });
    await until(call, 'frame', () => call.playedBytes >= greeting.length + 8000, 'one second of the answer heard');
    speak(call, 400);
    await until(call, 'clear');
    const late = voiced(200, 330, 6000); // told apart from every other voice on the line
    const base = { response_id: 'resp_late', item_id: 'item_late', output_index: 0, content_index: 0 };
    conn.send({ type: 'response.output_audio.delta', ...base, delta: late.toString('base64') });
    conn.send({ type: 'response.done', response: { id: 'resp_late', status: 'cancelled', output: [], metadata: null } });
    await serverEvent(
      conn,
      'response.done',
      (e) => e.response.id.startsWith('resp_') && e.response.id !== 'resp_late' && e.response.metadata === null,
    );
    await until(call, 'frame', () => call.playedBytes === call.receivedBytes, 'the answer to the caller heard');
    expect(Buffer.concat(call.received).indexOf(late.subarray(0, 400))).toBe(-1);
    call.hangUp();
    await s.endOf('CA0010');
  });

  it('barge-in: an answer cancelled before any of it played (its audio still on its way) is truncated at 0, so the model does not take it as said', async () => {
    s = await bridgeStack();
    const greeting = assistantAudio(300);
    s.realtime.brain = brain({
      greeting: { audio: greeting, transcript: 'consent line' },
      turns: [{ audio: assistantAudio(3000), transcript: 'One moment.' }],
    });
    const call = await s.twilio.call('CA0015');
    const conn = await firstConn(s);
    await until(call, 'frame', () => call.playedBytes >= greeting.length, 'the consent line heard');
    speak(call, 400); // agrees; a 3 s answer comes at once
    await serverEvent(conn, 'response.done', (e) => e.response.metadata === null && e.response.status === 'completed');
    // The next answer (as after a booking's result) has begun: created, its audio not yet here.
    conn.send({ type: 'response.created', response: { id: 'resp_unsaid', status: 'in_progress', output: [], metadata: null } });
    await until(call, 'frame', () => call.playedBytes >= greeting.length + 8000, 'one second of the answer heard');
    speak(call, 400);
    await until(call, 'clear');
    const base = { response_id: 'resp_unsaid', item_id: 'item_unsaid', output_index: 0, content_index: 0 };
    conn.send({ type: 'response.output_audio.delta', ...base, delta: assistantAudio(200).toString('base64') });
    conn.send({ type: 'response.output_audio.delta', ...base, delta: assistantAudio(200).toString('base64') });
    conn.send({ type: 'response.output_audio_transcript.done', ...base, transcript: 'Your booking is confirmed.' });
    conn.send({ type: 'response.done', response: { id: 'resp_unsaid', status: 'cancelled', output: [], metadata: null } });
    const truncate = await clientEvent(conn, 'conversation.item.truncate', (e) => e.item_id === 'item_unsaid');
    expect(truncate).toMatchObject({ content_index: 0, audio_end_ms: 0 });
    await serverEvent(conn, 'input_audio_buffer.committed'); // the caller's turn
    call.hangUp();
    const end = await s.endOf('CA0015');
    expect(conn.events.filter((e: any) => e.type === 'conversation.item.truncate' && e.item_id === 'item_unsaid')).toHaveLength(1);
    expect(end.transcript.map((l) => l.text)).not.toContain('Your booking is confirmed.');
  });

  it('barge-in while the model pauses mid-answer (all of it sent so far heard): the answer is truncated where it stopped, and the transcript keeps only what was said', async () => {
    s = await bridgeStack();
    const greeting = assistantAudio(300);
    const talk = brain({ greeting: { audio: greeting, transcript: 'consent line' } });
    s.realtime.brain = (ctx) => (ctx.trigger === 'turn' ? null : talk(ctx)); // the answers below are the test's
    const call = await s.twilio.call('CA0014');
    const conn = await firstConn(s);
    await until(call, 'frame', () => call.playedBytes >= greeting.length, 'the consent line heard');
    speak(call, 400); // agrees
    await serverEvent(conn, 'input_audio_buffer.committed');
    // The answer begins: 300 ms of it, its first words, then the model pauses.
    const base = { response_id: 'resp_pause', item_id: 'item_pause', output_index: 0, content_index: 0 };
    conn.send({ type: 'response.created', response: { id: 'resp_pause', status: 'in_progress', output: [], metadata: null } });
    conn.send({ type: 'response.output_audio.delta', ...base, delta: assistantAudio(300).toString('base64') });
    conn.send({ type: 'response.output_audio_transcript.delta', ...base, delta: 'Our prices' });
    const sent = greeting.length + 2400;
    await until(call, 'frame', () => call.receivedBytes >= sent && call.echoedBytes === call.receivedBytes, 'all of it heard');
    speak(call, 400); // the caller speaks in the pause: the model cancels the answer
    await serverEvent(conn, 'input_audio_buffer.speech_started');
    const truncated = clientEvent(conn, 'conversation.item.truncate');
    // What the model had generated meanwhile never plays: the answer ends cancelled.
    conn.send({ type: 'response.output_audio.delta', ...base, delta: assistantAudio(2000).toString('base64') });
    conn.send({ type: 'response.output_audio_transcript.delta', ...base, delta: ' start at fifty euros a month.' });
    conn.send({ type: 'response.output_audio.done', ...base });
    conn.send({ type: 'response.output_audio_transcript.done', ...base, transcript: 'Our prices start at fifty euros a month.' });
    conn.send({ type: 'response.done', response: { id: 'resp_pause', status: 'cancelled', output: [], metadata: null } });
    expect(await truncated).toMatchObject({ item_id: 'item_pause', content_index: 0, audio_end_ms: 300 });
    await serverEvent(conn, 'input_audio_buffer.committed'); // the caller's turn
    call.hangUp();
    const end = await s.endOf('CA0014');
    expect(call.receivedBytes).toBe(sent);
    expect(end.transcript.filter((l) => l.speaker === 'assistant').map((l) => l.text)).toEqual(['consent line', 'Our prices…']);
  });

  it('a booking by function call reaches the workflow target once although the model repeats the call; the record follows', async () => {
    s = await bridgeStack();
    const args = BOOKING;
    s.realtime.heardQueue = [
      { text: 'I would like to book a cleaning tomorrow at ten', logprob: -0.1 },
      { text: 'yes please book it', logprob: -0.2 },
    ];
    s.realtime.brain = brain({
      turns: [{ call: { name: 'book_slot', args } }, { call: { name: 'book_slot', args: { ...args } } }],
      afterOutput: { audio: assistantAudio(300), transcript: 'You are booked.' },
    });
    const call = await s.twilio.call('CA0004');
    const conn = await firstConn(s);
    await until(call, 'frame', () => call.playedBytes > 0 && call.playedBytes === call.receivedBytes, 'the greeting heard');
    const outputs: any[] = [];
    conn.on('client', (e) => e.type === 'conversation.item.create' && e.item.type === 'function_call_output' && outputs.push(e.item));
    for (let turn = 1; turn <= 2; turn++) {
      speak(call, 400);
      await until(conn, 'client', () => outputs.length === turn, `function output ${turn}`);
      await serverEvent(conn, 'response.done', (e) => e.response.output?.[0]?.type === 'message');
      await until(call, 'frame', () => call.playedBytes === call.receivedBytes, 'the answer heard');
    }
    expect(s.hooks.seen.filter((h) => h.path === '/book_slot')).toHaveLength(1);
    expect(s.hooks.seen[0].body).toMatchObject({ call_id: 'CA0004', function: 'book_slot', args });
    expect(outputs.map((o) => JSON.parse(o.output))).toEqual([
      { ok: true, result: { ok: true, booking_id: 'evt-1' } },
      { ok: true, result: { ok: true, booking_id: 'evt-1' } },
    ]);
    // Each output answers its own function call, then the model is asked to go on.
    const calls = conn.events.filter((e: any) => e.type === 'response.create' && !e.response);
    expect(calls).toHaveLength(2);
    call.hangUp();
    const { record } = await s.endOf('CA0004');
    expect(record).toMatchObject({
      call_id: 'CA0004',
      model: s.config.meta.model,
      intent_primary: 'book',
      outcome: 'booking',
      escalated: false,
      ended_reason: 'caller_hangup',
      country: 'PT',
      turns: 5, // greeting, call, answer, call, answer
    });
    expect(record!.confidence_avg).toBeCloseTo((Math.exp(-0.1) + Math.exp(-0.2)) / 2, 3);
    expect(record!.ttfb_s).toBeGreaterThan(0);
    expect(record!.duration_s).toBeGreaterThan(1);
    // The end-of-call path: the record to the meter's calls, the summary to log_to.
    expect(s.records).toEqual([record]);
    if (!s.observe.seen.length) await until(s.observe.events, 'request', () => true, 'the observability summary');
    expect(s.observe.seen[0].body).toMatchObject({ call_id: 'CA0004', status: 'booking', turns: 5, escalated: false });
    // One meter event per realtime response, through the chat calls' sink; no second audio total.
    const done = s.meterEvents.filter((e) => e.model === s!.config.meta.model);
    expect(done.map((e) => [e.provider, e.model, e.job_id, e.customer_id])).toEqual(
      Array(5).fill(['openai', s.config.meta.model, 'CA0004', 'acme-dental']),
    );
    expect(done.every((e) => e.input_tokens > 0 && e.output_tokens > 0 && e.cost_usd! > 0)).toBe(true);
    // And one per transcription of the caller's two turns, billed apart by the API (its own model).
    const transcribed = s.meterEvents.filter((e) => e.model !== s!.config.meta.model);
    expect(transcribed.map((e) => [e.provider, e.model, e.job_id])).toEqual(Array(2).fill(['openai', 'gpt-4o-mini-transcribe', 'CA0004']));
    expect(transcribed.every((e) => e.input_tokens > 0 && e.cost_usd! > 0)).toBe(true);
    const billed = s.meterEvents.reduce((a, e) => a + e.cost_usd!, 0);
    expect(record!.est_audio_cost_usd).toBeCloseTo(billed, 6);
  });

  it("a function's long answer is cut for the model between characters, never inside one: no half an emoji the Realtime API would refuse", async () => {
    s = await bridgeStack();
    // The output is `{"ok":true,"result":{"ok":true,"note":"` (39 characters) then the note: the
    // emoji's two UTF-16 halves sit either side of the 4,000th character.
    s.hooks.handle = (_q, res) =>
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ ok: true, note: '😀'.repeat(3000) }));
    s.realtime.brain = brain({
      turns: [{ call: { name: 'book_slot', args: BOOKING } }],
      afterOutput: { audio: assistantAudio(300), transcript: 'Booked.' },
    });
    const call = await s.twilio.call('CA0044');
    const conn = await firstConn(s);
    await until(call, 'frame', () => call.playedBytes > 0 && call.playedBytes === call.receivedBytes, 'the greeting heard');
    const outputs: any[] = [];
    conn.on('client', (e) => e.type === 'conversation.item.create' && e.item.type === 'function_call_output' && outputs.push(e.item));
    speak(call, 400);
    await until(conn, 'client', () => outputs.length === 1, 'the function output');
    const output: string = outputs[0].output;
    expect(output.startsWith('{"ok":true,"result":{"ok":true,"note":"😀')).toBe(true);
    expect(output.endsWith('😀…')).toBe(true);
    expect(output).not.toMatch(/[\uD800-\uDBFF](?![\uDC00-\uDFFF])/);
    call.hangUp();
    await s.endOf('CA0044');
  });

  it('an answer still being said when the caller hangs up is metered and counted: its usage is asked for before the session closes', async () => {
    s = await bridgeStack();
    s.realtime.chunkBytes = 160;
    s.realtime.paceMs = 20; // the model speaks in real time: the answer is still coming at the hang-up
    s.realtime.brain = brain({ turns: [{ audio: assistantAudio(6000), transcript: 'A long answer' }] });
    const call = await s.twilio.call('CA0006');
    await firstConn(s);
    await until(call, 'frame', () => call.playedBytes > 0 && call.playedBytes === call.receivedBytes, 'the greeting heard');
    const heardBefore = call.receivedBytes;
    speak(call, 400);
    await until(call, 'frame', () => call.receivedBytes >= heardBefore + 4000, 'half a second of the answer sent');
    call.hangUp();
    const { record } = await s.endOf('CA0006');
    // Two responses the API bills (the greeting, the answer cut by the hang-up): two meter events, two
    // turns; and the transcription of the caller's turn, billed apart (a meter event, no turn).
    const all = s.meterEvents.filter((e) => e.job_id === 'CA0006');
    const events = all.filter((e) => e.model === s!.config.meta.model);
    expect(events).toHaveLength(2);
    expect(events[1]).toMatchObject({ error_code: 'CANCELLED' });
    expect(events[1].cost_usd!).toBeGreaterThan(0);
    expect(all).toHaveLength(3);
    expect(record).toMatchObject({ turns: 2, ended_reason: 'caller_hangup' });
    expect(record!.est_audio_cost_usd).toBeCloseTo(
      all.reduce((a, e) => a + e.cost_usd!, 0),
      6,
    );
    expect(s.realtime.conns).toHaveLength(1); // no new session for a call that is over
  });

  it('a booking the model calls as the caller hangs up (its call reaches the bridge after the stop) is still made, once, and recorded', async () => {
    s = await bridgeStack();
    s.realtime.heardQueue = [{ text: 'yes, book it, thank you, bye', logprob: -0.1 }];
    s.realtime.brain = brain({ turns: [{ call: { name: 'book_slot', args: BOOKING } }] });
    const call = await s.twilio.call('CA0011');
    const conn = await firstConn(s);
    await until(call, 'frame', () => call.playedBytes > 0 && call.playedBytes === call.receivedBytes, 'the greeting heard');
    // The model's answer has begun; what it says next (the call) is still on its way as the caller hangs up.
    conn.on('server', (e: any) => {
      if (e.type !== 'response.created' || e.response.metadata !== null) return;
      conn.lag();
      // A word of it reaches the caller: the bridge has seen the answer begin.
      const delta = { response_id: e.response.id, item_id: 'item_ok', output_index: 0, content_index: 0 };
      conn.ws.send(JSON.stringify({ type: 'response.output_audio.delta', ...delta, delta: assistantAudio(100).toString('base64') }));
    });
    speak(call, 400);
    await until(call, 'media', () => true, 'the answer begun');
    call.hangUp();
    await clientEvent(conn, 'response.cancel'); // the bridge asks what the answer under way cost
    conn.catchUp();
    const { record } = await s.endOf('CA0011');
    // before: the call was ignored (the call was over), nothing booked, the record said abandoned
    expect(s.hooks.seen.filter((h) => h.path === '/book_slot').map((h) => h.body.args)).toEqual([BOOKING]);
    expect(record).toMatchObject({ outcome: 'booking', intent_primary: 'book', ended_reason: 'caller_hangup' });
    expect(s.records).toHaveLength(1);
  });

  it('a call whose record waits for a booking after the caller hung up lasts until the hang-up: the wait is not billed as telephony', async () => {
    s = await bridgeStack();
    let release: () => void = () => undefined;
    s.hooks.handle = (_q, res) =>
      (release = () => res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true,"booking_id":"evt-10"}'));
    s.realtime.heardQueue = [{ text: 'book me a cleaning tomorrow at ten', logprob: -0.1 }];
    s.realtime.brain = brain({ turns: [{ call: { name: 'book_slot', args: BOOKING } }] });
    const ends: Array<{ ended_at?: string }> = [];
    const end = s.voice.end.bind(s.voice);
    s.voice.end = (id, body, tenant) => (ends.push(body), end(id, body, tenant));
    const call = await s.twilio.call('CA0015');
    const conn = await firstConn(s);
    await until(call, 'frame', () => call.playedBytes > 0 && call.playedBytes === call.receivedBytes, 'the greeting heard');
    speak(call, 400);
    await until(s.hooks.events, 'request', (h: { path: string }) => h.path === '/book_slot', 'the booking sent');
    const hungUpAt = Date.now();
    call.hangUp();
    // The session has let the call go (its realtime socket closed); its record waits for the booking.
    if (conn.ws.readyState !== conn.ws.CLOSED) await until(conn.ws, 'close');
    const releasedAt = Date.now();
    release();
    const { record } = await s.endOf('CA0015');
    expect(record).toMatchObject({ outcome: 'booking', ended_reason: 'caller_hangup' });
    // Before: the call ended when its record was written, after the booking's answer came.
    expect(ends).toHaveLength(1);
    expect(Date.parse(ends[0].ended_at!)).toBeGreaterThanOrEqual(hungUpAt);
    expect(Date.parse(ends[0].ended_at!)).toBeLessThanOrEqual(releasedAt);
    expect(record!.duration_s).toBe(Math.round((Date.parse(ends[0].ended_at!) - Date.parse(record!.started_at)) / 100) / 10);
  });

  it('a booking still under way when the caller hangs up is recorded as a booking once the target answers, past 5 s too', async () => {
    s = await bridgeStack();
    const args = BOOKING;
    s.hooks.handle = (_q, res) =>
      setTimeout(() => res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true,"booking_id":"evt-9"}'), 6000);
    s.realtime.heardQueue = [{ text: 'book me a cleaning tomorrow at ten', logprob: -0.1 }];
    s.realtime.brain = brain({ turns: [{ call: { name: 'book_slot', args } }] });
    const call = await s.twilio.call('CA0005');
    await firstConn(s);
    await until(call, 'frame', () => call.playedBytes > 0 && call.playedBytes === call.receivedBytes, 'the greeting heard');
    speak(call, 400);
    await until(s.hooks.events, 'request', (h: { path: string }) => h.path === '/book_slot', 'the booking sent');
    call.hangUp();
    const { record } = await s.endOf('CA0005');
    expect(record).toMatchObject({ call_id: 'CA0005', outcome: 'booking', intent_primary: 'book', ended_reason: 'caller_hangup' });
  }, 20_000);
});

// Consent over the phone, through the bridge with the local Twilio and realtime peers: the opening
// line comes first, whatever the caller does; silence or an unclear answer has it said again
// (retry_if_no_ack, max_retries); a caller who declines is told, the call ends and the contact is
// tagged opted out through the back office's create_lead; one who never answers is let go politely.
import { afterEach, describe, expect, it } from 'vitest';
import { classifyAck, ConsentGate } from '../../gateway/src/voice/phone/consent';
import { filled } from './filled';
import { bridgeStack, type BridgeStack } from './peers/bridge-stack';
import { voiced } from './peers/mulaw';
import type { RtConn } from './peers/realtime-peer';
import { assistantAudio, brain, clientEvent, serverEvent, speak } from './peers/script';
import { until } from './peers/wait';

let s: BridgeStack | null = null;
afterEach(async () => {
  await s?.close();
  s = null;
});

const triggers = filled().intents.flatMap((i) => i.triggers);
const creates = (conn: RtConn) =>
  conn.events.filter((e) => e.type === 'response.create').map((e: any) => (e.response?.instructions ?? '') as string);
const update = (st: BridgeStack, callSid: string) =>
  st.twilio.updates.find((u) => u.callSid === callSid) ??
  until<(typeof st.twilio.updates)[number]>(st.twilio.events, 'update', (u) => u.callSid === callSid, `an update of ${callSid}`);

describe('consent: how an answer is classified', () => {
  it.each([
    ['Yes, that is fine', 'yes'],
    ['ok', 'yes'],
    ['Sim, claro.', 'yes'],
    ['no problem', 'yes'],
    // "No problem" in the other languages starts with a plain no too: before, a refusal (the caller
    // told the call would not go on, hung up on and tagged opted out).
    ['No hay problema.', 'yes'],
    ['No, no me importa', 'yes'],
    ['Não tem problema', 'yes'],
    ['Não faz mal.', 'yes'],
    ["No, I don't mind", 'yes'],
    ['Pas de problème', 'yes'],
    ['Kein Problem', 'yes'],
    ['No, gracias', 'declined'],
    ['I would like to book a cleaning', 'yes'], // going on with a request after hearing the line
    ['No.', 'declined'],
    ["No, I don't want to be recorded", 'declined'],
    ['yes but do not record this', 'declined'],
    ['please opt out', 'declined'],
    ['Não quero.', 'declined'],
    ['hello?', 'unclear'],
    ['what was that', 'unclear'],
  ])('%j → %s', (text, ack) => {
    expect(classifyAck(text, triggers)).toBe(ack);
  });
});

describe('consent: the gate', () => {
  const gate = () => {
    const did: string[] = [];
    const g = new ConsentGate({
      retryIfNoAck: true,
      maxRetries: 1,
      triggers,
      waitMs: 60_000,
      actions: { repeat: () => did.push('repeat'), declined: () => did.push('declined'), noAck: () => did.push('noAck') },
    });
    return { g, did };
  };

  it('a yes said before the line was heard is not an answer to it; a refusal counts at any time', () => {
    const early = gate();
    expect(early.g.heard('yes, hello')).toBeNull();
    early.g.lineHeard();
    expect(early.g.heard('yes')).toBe('yes');
    expect(early.g.settled).toBe(true);
    const no = gate();
    expect(no.g.heard('no')).toBe('declined');
    expect(no.did).toEqual(['declined']);
  });

  it('unclear answers: one repeat (max_retries 1), then the polite end; nothing after it is decided', () => {
    const { g, did } = gate();
    g.lineHeard();
    g.heard('hello?');
    g.lineHeard();
    g.heard('what?');
    expect(did).toEqual(['repeat', 'noAck']);
    expect(g.heard('yes')).toBeNull();
  });
});

describe('consent over the phone', () => {
  it('the opening line is the first thing the caller hears, even when the caller talks first; then the model takes turns', async () => {
    s = await bridgeStack();
    const greeting = assistantAudio(400);
    s.realtime.brain = brain({ greeting: { audio: greeting, transcript: 'consent line' } });
    const call = await s.twilio.call('CA0801');
    call.say(voiced(300, 120)); // "Hello?" before anything was said
    const conn = await until<RtConn>(s.realtime, 'connection');
    const first = await serverEvent(conn, 'response.created');
    expect(first.response.metadata).toEqual({ bridge: 'consent' });
    await until(call, 'frame', () => call.receivedBytes >= greeting.length, 'the greeting');
    expect(Buffer.concat(call.received).subarray(0, greeting.length).equals(greeting)).toBe(true);
    const updates = conn.events.filter((e) => e.type === 'session.update') as any[];
    expect(updates[0].session.audio.input.turn_detection.create_response).toBe(false);
    await clientEvent(conn, 'session.update', (e: any) => e.session.audio.input.turn_detection.create_response === true);
    call.hangUp();
    await s.endOf('CA0801');
  });

  it('a caller who speaks over the consent line still hears it whole: neither the model nor the bridge cuts it', async () => {
    s = await bridgeStack();
    const greeting = assistantAudio(1500);
    s.realtime.paceMs = 20; // the model speaks in real time, so the caller talks over what it is still saying
    s.realtime.brain = brain({ greeting: { audio: greeting, transcript: 'consent line' } });
    const call = await s.twilio.call('CA0808');
    await until(call, 'frame', () => call.receivedBytes >= 1600, 'the first 200 ms of the line');
    speak(call, 400); // over the line
    await until(call, 'frame', () => call.receivedBytes >= greeting.length, 'the whole line', 8000);
    expect(Buffer.concat(call.received).subarray(0, greeting.length).equals(greeting)).toBe(true);
    call.hangUp();
    await s.endOf('CA0808');
  });

  it('a caller who speaks over a line the model generated faster than it plays is neither answered nor cuts it: the line is heard whole first', async () => {
    s = await bridgeStack();
    const greeting = assistantAudio(5000); // generated at once, as the API does: it plays for 5 s
    s.realtime.heardQueue = [
      { text: 'hello?', logprob: -0.05 },
      { text: 'sorry?', logprob: -0.05 },
    ];
    s.realtime.brain = brain({ greeting: { audio: greeting, transcript: 'consent line' } });
    const call = await s.twilio.call('CA0822');
    const conn = await until<RtConn>(s.realtime, 'connection');
    await until(
      call,
      'frame',
      () => call.receivedBytes >= greeting.length && call.playedBytes >= 8 * 300,
      'the line sent, 300 ms of it heard',
    );
    speak(call); // over the line
    await until(call, 'frame', () => call.playedBytes >= 8 * 2500, '2.5 s of the line heard');
    speak(call); // over it again
    await until(call, 'frame', () => call.playedBytes >= greeting.length, 'the whole line played', 10_000);
    // Before: turns were switched on once the line was generated, so the model answered the first
    // words (its answer queued behind the line) and the second ones cut the line where the caller was.
    expect(call.clears).toEqual([]);
    expect(Buffer.concat(call.received).subarray(0, greeting.length).equals(greeting)).toBe(true);
    const answers = conn.served.filter((e: any) => e.type === 'response.created' && e.response.metadata?.bridge !== 'consent');
    expect(answers).toEqual([]);
    // Heard to its end: from now on the model takes turns.
    await clientEvent(conn, 'session.update', (e: any) => e.session.audio?.input?.turn_detection?.create_response === true);
    call.hangUp();
    await s.endOf('CA0822');
  });

  it('a stream that never echoes marks: the line is taken as heard once it has had time to play, so the yes counts and the model answers', async () => {
    s = await bridgeStack();
    const greeting = assistantAudio(600);
    s.realtime.brain = brain({ greeting: { audio: greeting, transcript: 'consent line' } });
    const call = await s.twilio.call('CA0823');
    call.dropMarks = true;
    const conn = await until<RtConn>(s.realtime, 'connection');
    // Before: the line waited for its last mark, so the model never took a turn: the caller's yes
    // was no answer, and the call stayed silent.
    await clientEvent(conn, 'session.update', (e: any) => e.session.audio?.input?.turn_detection?.create_response === true);
    expect(call.playedBytes).toBeGreaterThanOrEqual(greeting.length); // not before it had time to play
    speak(call); // "yes, hello"
    await serverEvent(conn, 'response.done', (e) => e.response.metadata === null && e.response.status === 'completed');
    expect(s.logs.some((l) => l.includes('no mark came back'))).toBe(true);
    call.hangUp();
    await s.endOf('CA0823');
  });

  it('a yes said over the line said again is answered once the line has been heard: the caller is not left in silence', async () => {
    s = await bridgeStack();
    const greeting = assistantAudio(300);
    const repeat = assistantAudio(3000); // generated at once: it plays for 3 s
    s.realtime.heardQueue = [
      { text: 'hello?', logprob: -0.05 },
      { text: 'yes, sure', logprob: -0.05 }, // over the repeat
    ];
    s.realtime.brain = brain({
      greeting: { audio: greeting, transcript: 'consent line' },
      repeat: { audio: repeat, transcript: 'consent line' },
      turns: [{ audio: assistantAudio(400), transcript: 'Sorry?' }],
      afterOutput: { audio: assistantAudio(400), transcript: 'Thank you. How can I help?' },
    });
    const call = await s.twilio.call('CA0824');
    const conn = await until<RtConn>(s.realtime, 'connection');
    await until(call, 'frame', () => call.playedBytes > 0 && call.playedBytes === call.receivedBytes, 'the greeting heard');
    speak(call); // "hello?": the line is said again
    await clientEvent(conn, 'response.create', (e: any) => e.response?.instructions?.startsWith('Repeat'));
    const before = call.receivedBytes;
    await until(
      call,
      'frame',
      () => call.receivedBytes >= before + repeat.length && call.playedBytes >= before + 8 * 500,
      'the repeat sent, playing',
    );
    speak(call); // "yes, sure" over it
    // Before: turns were off while the repeat was said, so the yes was taken and never answered.
    await clientEvent(conn, 'response.create', (e: any) => e.response === undefined);
    const answer = await serverEvent(conn, 'response.done', (e) => e.response.metadata === null);
    expect(answer.response.status).toBe('completed');
    expect(call.clears).toEqual([]);
    expect(
      Buffer.concat(call.received)
        .subarray(before, before + repeat.length)
        .equals(repeat),
    ).toBe(true);
    call.hangUp();
    expect((await s.endOf('CA0824')).ended_reason).toBe('caller_hangup');
  });

  it('a caller who speaks first and then waits is not timed out while the line is still being said: it is heard whole, once', async () => {
    s = await bridgeStack(() => undefined, { consentWaitMs: 600 });
    const greeting = assistantAudio(2500);
    s.realtime.chunkBytes = 160;
    s.realtime.paceMs = 20; // the line comes in real time: it lasts longer than the wait for an answer
    s.realtime.heardQueue = [{ text: 'hello?', logprob: -0.05 }];
    s.realtime.brain = brain({ greeting: { audio: greeting, transcript: 'consent line' } });
    const call = await s.twilio.call('CA0809');
    call.say(voiced(300, 120)); // "Hello?" as the line begins, then silence
    const conn = await until<RtConn>(s.realtime, 'connection');
    await until(call, 'frame', () => call.playedBytes >= greeting.length, 'the whole line played', 8000);
    expect(call.clears).toEqual([]);
    expect(creates(conn).map((i) => i.split(' ')[0])).toEqual(['Greet']);
    expect(Buffer.concat(call.received).subarray(0, greeting.length).equals(greeting)).toBe(true);
    call.hangUp();
    expect((await s.endOf('CA0809')).ended_reason).toBe('caller_hangup');
  });

  it('the realtime server drops before the line was said: the new session says it first, and only then takes turns', async () => {
    s = await bridgeStack();
    s.realtime.paceMs = 20;
    s.realtime.brain = brain({ greeting: { audio: assistantAudio(1000), transcript: 'consent line' } });
    await s.twilio.call('CA0807');
    const conn = await until<RtConn>(s.realtime, 'connection');
    await serverEvent(conn, 'response.created');
    conn.drop();
    const again = await until<RtConn>(s.realtime, 'connection');
    const greet = await clientEvent(again, 'response.create');
    expect(greet.response.instructions).toMatch(/^Greet/);
    expect((again.events[0] as any).session.audio.input.turn_detection.create_response).toBe(false);
    await clientEvent(again, 'session.update', (e: any) => e.session.audio.input.turn_detection?.create_response === true);
  });

  it('silence: the line is said once more (max_retries 1); silence again: a polite end, no_consent, nobody tagged', async () => {
    s = await bridgeStack(() => undefined, { consentWaitMs: 400 });
    s.realtime.brain = brain({});
    const call = await s.twilio.call('CA0802');
    const conn = await until<RtConn>(s.realtime, 'connection');
    await clientEvent(conn, 'response.create', (e: any) => e.response?.instructions?.startsWith('Repeat'));
    const u = await update(s, 'CA0802');
    expect(u.form).toEqual({ Status: 'completed' });
    expect(creates(conn).map((i) => i.split(' ')[0])).toEqual(['Greet', 'Repeat', 'Say']);
    expect(creates(conn)[2]).toContain('I did not hear an answer');
    expect(call.marksEchoed.length).toBeGreaterThan(0); // the closing line was heard before the hang-up
    expect((await s.endOf('CA0802')).record).toMatchObject({ ended_reason: 'no_consent', outcome: 'abandoned' });
    expect(s.hooks.seen).toEqual([]);
  });

  it('without retry_if_no_ack the line is not repeated', async () => {
    s = await bridgeStack((c) => (c.consent.retry_if_no_ack = false), { consentWaitMs: 300 });
    s.realtime.brain = brain({});
    await s.twilio.call('CA0803');
    const conn = await until<RtConn>(s.realtime, 'connection');
    await update(s, 'CA0803');
    expect(creates(conn).map((i) => i.split(' ')[0])).toEqual(['Greet', 'Say']);
    expect((await s.endOf('CA0803')).ended_reason).toBe('no_consent');
  });

  it('an unclear answer: the model’s own answer is cut and the line repeated; a yes then lets the call go on', async () => {
    s = await bridgeStack();
    s.realtime.heardQueue = [
      { text: 'hello?', logprob: -0.05 },
      { text: 'yes, that is fine', logprob: -0.05 },
    ];
    s.realtime.brain = brain({
      turns: [
        { audio: assistantAudio(2000), transcript: 'Sorry?' },
        { audio: assistantAudio(300), transcript: 'How can I help?' },
      ],
    });
    const call = await s.twilio.call('CA0804');
    const conn = await until<RtConn>(s.realtime, 'connection');
    await until(call, 'frame', () => call.playedBytes > 0 && call.playedBytes === call.receivedBytes, 'the greeting heard');
    // The line said again, as the model made it: asking again after the API refused (busy) is no second line.
    const repeats: unknown[] = [];
    conn.on('server', (e: any) => e.type === 'response.created' && e.response?.metadata?.bridge === 'consent' && repeats.push(e));
    speak(call);
    const repeat = await clientEvent(conn, 'response.create', (e: any) => e.response?.instructions?.startsWith('Repeat'));
    expect(conn.events.indexOf(repeat)).toBeGreaterThan(conn.events.findIndex((e) => e.type === 'response.cancel'));
    await serverEvent(conn, 'response.done', (e) => e.response.metadata?.bridge === 'consent');
    await until(call, 'frame', () => call.playedBytes === call.receivedBytes, 'the repeat heard');
    speak(call);
    await serverEvent(conn, 'response.done', (e) => e.response.status === 'completed' && e.response.metadata === null);
    expect(repeats).toHaveLength(1);
    expect(s.twilio.updates).toEqual([]); // the call goes on
    call.hangUp();
    expect((await s.endOf('CA0804')).ended_reason).toBe('caller_hangup');
  });

  it('words that are no answer, said over the line said again, do not end the call: the repeat is heard whole, and a yes after it goes on', async () => {
    s = await bridgeStack();
    const greeting = assistantAudio(300);
    const repeat = assistantAudio(2000);
    s.realtime.heardQueue = [
      { text: 'hello?', logprob: -0.05 },
      { text: 'sorry, what?', logprob: -0.05 }, // over the repeat
      { text: 'yes, that is fine', logprob: -0.05 },
    ];
    const script = brain({
      greeting: { audio: greeting, transcript: 'consent line' },
      repeat: { audio: repeat, transcript: 'consent line' },
    });
    s.realtime.brain = (ctx) => (ctx.trigger === 'turn' ? null : script(ctx)); // the model leaves the turns to the bridge
    const call = await s.twilio.call('CA0817');
    const conn = await until<RtConn>(s.realtime, 'connection');
    await until(call, 'frame', () => call.playedBytes > 0 && call.playedBytes === call.receivedBytes, 'the greeting heard');
    speak(call);
    await serverEvent(conn, 'response.done', (e) => e.response.metadata?.bridge === 'consent' && e.response.status === 'completed');
    await until(call, 'frame', () => call.playedBytes >= greeting.length + 1600, 'the first 200 ms of the repeat heard');
    speak(call); // over the repeat
    await until(call, 'frame', () => call.playedBytes === greeting.length + repeat.length, 'the whole repeat heard', 8000);
    expect(call.clears).toEqual([]);
    const yes = serverEvent(conn, 'conversation.item.input_audio_transcription.completed', (e) => e.transcript === 'yes, that is fine');
    speak(call);
    await yes;
    expect(creates(conn).map((i) => i.split(' ')[0])).toEqual(['Greet', 'Repeat']); // no closing line
    call.hangUp();
    expect((await s.endOf('CA0817')).ended_reason).toBe('caller_hangup');
  });

  it('a caller who speaks over the line said again, while the model is still saying it, hears it whole: the model does not cut it', async () => {
    s = await bridgeStack();
    const greeting = assistantAudio(300);
    const repeat = assistantAudio(2000);
    s.realtime.heardQueue = [
      { text: 'hello?', logprob: -0.05 },
      { text: 'sorry, what?', logprob: -0.05 }, // over the repeat
    ];
    const script = brain({
      greeting: { audio: greeting, transcript: 'consent line' },
      repeat: { audio: repeat, transcript: 'consent line' },
    });
    s.realtime.brain = (ctx) => (ctx.trigger === 'turn' ? null : script(ctx)); // the model leaves the turns to the bridge
    const call = await s.twilio.call('CA0818');
    const conn = await until<RtConn>(s.realtime, 'connection');
    await until(call, 'frame', () => call.playedBytes > 0 && call.playedBytes === call.receivedBytes, 'the greeting heard');
    s.realtime.chunkBytes = 160;
    s.realtime.paceMs = 20; // the repeat comes in real time: the caller talks over what the model is still saying
    speak(call);
    await clientEvent(conn, 'response.create', (e: any) => e.response?.instructions?.startsWith('Repeat'));
    await until(call, 'frame', () => call.receivedBytes >= greeting.length + 1600, 'the first 200 ms of the repeat');
    speak(call); // over the repeat
    const done = await serverEvent(conn, 'response.done', (e) => e.response.metadata?.bridge === 'consent');
    expect(done.response.status).toBe('completed'); // before: cancelled by the model's VAD as the caller spoke
    await until(call, 'frame', () => call.playedBytes === greeting.length + repeat.length, 'the whole repeat heard', 8000);
    expect(Buffer.concat(call.received).subarray(greeting.length).equals(repeat)).toBe(true);
    // Once it was said, the model takes turns again.
    const turns = () =>
      conn.events
        .filter((e: any) => e.type === 'session.update' && e.session.audio?.input?.turn_detection)
        .map((e: any) => e.session.audio.input.turn_detection.create_response as boolean);
    if (turns().length < 4) await until(conn, 'client', () => turns().length === 4, 'turn-taking on again');
    expect(turns()).toEqual([false, true, false, true]);
    call.hangUp();
    await s.endOf('CA0818');
  });

  it('the model’s own answer to an unclear word, cancelled for the line said again, takes only itself down: the repeat is heard whole', async () => {
    s = await bridgeStack();
    const greeting = assistantAudio(300);
    const repeat = assistantAudio(2000);
    s.realtime.heardQueue = [{ text: 'hello?', logprob: -0.05 }];
    s.realtime.brain = brain({
      greeting: { audio: greeting, transcript: 'consent line' },
      repeat: { audio: repeat, transcript: 'consent line' },
      turns: [{ audio: assistantAudio(2000), transcript: 'Sorry?' }],
    });
    const call = await s.twilio.call('CA0819');
    const conn = await until<RtConn>(s.realtime, 'connection');
    await until(call, 'frame', () => call.playedBytes > 0 && call.playedBytes === call.receivedBytes, 'the greeting heard');
    s.realtime.chunkBytes = 160;
    s.realtime.paceMs = 20; // the model speaks in real time: its answer is still under way as the repeat is asked for
    speak(call);
    const done = await serverEvent(conn, 'response.done', (e) => e.response.metadata?.bridge === 'consent');
    expect(done.response.status).toBe('completed'); // before: cancelled with the model's answer
    await until(
      call,
      'frame',
      () => call.playedBytes === call.receivedBytes && call.receivedBytes >= greeting.length + repeat.length,
      'the repeat heard',
    );
    expect(Buffer.concat(call.received).subarray(greeting.length).equals(repeat)).toBe(true);
    call.hangUp();
    await s.endOf('CA0819');
  });

  it('the line said again while the model is answering a turn: asked for once that answer is cancelled and done, so the caller hears it', async () => {
    s = await bridgeStack(() => undefined, { consentWaitMs: 300 });
    const repeat = assistantAudio(600);
    s.realtime.heardQueue = [{ text: '', logprob: 0, failed: { type: 'server_error', code: 'transcription_failed', message: 'x' } }];
    s.realtime.brain = brain({
      repeat: { audio: repeat, transcript: 'consent line' },
      turns: [{ audio: assistantAudio(3000), transcript: 'Hm?' }],
    });
    const call = await s.twilio.call('CA0820');
    const conn = await until<RtConn>(s.realtime, 'connection');
    await until(call, 'frame', () => call.playedBytes > 0 && call.playedBytes === call.receivedBytes, 'the greeting heard');
    s.realtime.paceMs = 20; // the model's answer to the untranscribed turn is still under way when the wait for an answer ends
    speak(call);
    // before: asked at once beside the cancel, refused (the cancelled answer still held the conversation), never said
    const done = await serverEvent(
      conn,
      'response.done',
      (e) => e.response.metadata?.bridge === 'consent' && e.response.status === 'completed',
    );
    expect(done.response.output[0].content[0].transcript).toBe('consent line');
    call.hangUp();
    await s.endOf('CA0820');
  });

  it('a caller who declines is told, the call ends politely, and the contact is tagged opted out in the back office', async () => {
    s = await bridgeStack();
    s.realtime.heardQueue = [{ text: "No, I don't want to be recorded", logprob: -0.05 }];
    s.realtime.brain = brain({
      turns: [{ audio: assistantAudio(2000), transcript: 'Why not?' }],
      closing: { audio: assistantAudio(600), transcript: 'Understood.' },
    });
    const call = await s.twilio.call('CA0805', '+351910000077');
    const conn = await until<RtConn>(s.realtime, 'connection');
    await until(call, 'frame', () => call.playedBytes > 0 && call.playedBytes === call.receivedBytes, 'the greeting heard');
    speak(call);
    const closing = await clientEvent(conn, 'response.create', (e: any) => e.response?.metadata?.bridge === 'closing');
    expect(closing.response.instructions).toContain('we will not contact you again');
    const u = await update(s, 'CA0805');
    expect(u.form).toEqual({ Status: 'completed' });
    const end = await s.endOf('CA0805');
    expect(end.record).toMatchObject({ ended_reason: 'opted_out', outcome: 'abandoned', escalated: false });
    const tag = s.hooks.seen.filter((h) => h.path === '/create_lead');
    expect(tag).toHaveLength(1);
    expect(tag[0].body).toMatchObject({
      call_id: 'CA0805',
      function: 'create_lead',
      args: { phone: '+351910000077', opted_out: true, consent: 'opted_out', transcript: "No, I don't want to be recorded" },
    });
    // "Why not?" (the model's own answer to the no) was cut: the caller heard the greeting and the closing line,
    // and the transcript holds what was said, not the answer nobody heard.
    expect(call.receivedBytes).toBeLessThan(assistantAudio(300).length + assistantAudio(600).length + 8 * 300);
    expect(end.transcript.filter((l) => l.speaker === 'assistant').map((l) => l.text)).not.toContain('Why not?');
  });
});

describe('the closing line', () => {
  it('a closing line the model fails to say (rate limited, none of it sent) is asked for once more: the caller hears it before the hang-up', async () => {
    s = await bridgeStack((c) => (c.consent.retry_if_no_ack = false), { consentWaitMs: 300 });
    const closing = assistantAudio(600);
    const base = brain({ closing: { audio: closing, transcript: 'Goodbye.' } });
    let says = 0;
    s.realtime.brain = (ctx) => (ctx.instructions?.startsWith('Say') && says++ === 0 ? null : base(ctx));
    const call = await s.twilio.call('CA0812');
    const conn = await until<RtConn>(s.realtime, 'connection');
    await clientEvent(conn, 'response.create', (e: any) => e.response?.metadata?.bridge === 'closing');
    const heard = call.receivedBytes;
    const details = { type: 'failed', error: { type: 'invalid_request_error', code: 'inference_rate_limit_exceeded' } };
    const response = { id: 'resp_f1', object: 'realtime.response', output: [], metadata: { bridge: 'closing' } };
    conn.send({ type: 'response.created', response: { ...response, status: 'in_progress' } });
    conn.send({ type: 'response.done', response: { ...response, status: 'failed', status_details: details } });
    const u = await update(s, 'CA0812');
    expect(creates(conn).filter((i) => i.startsWith('Say'))).toHaveLength(2);
    expect(call.receivedBytes - heard).toBe(closing.length);
    expect(u.form).toEqual({ Status: 'completed' });
    expect((await s.endOf('CA0812')).ended_reason).toBe('no_consent');
  });
});

describe('the closing line’s time limit', () => {
  it('counts from the line’s first audio, not from when it was asked for: a model slow to begin is still heard to the end before the hang-up', async () => {
    // The limit (shortened here from 10 s) is longer than the line, shorter than the model's delay and the line together.
    s = await bridgeStack((c) => (c.consent.retry_if_no_ack = false), { consentWaitMs: 300, closingLimitMs: 2500 });
    const closing = assistantAudio(1000);
    s.realtime.brain = brain({ closing: { audio: closing, transcript: 'Goodbye.', delayMs: 2000 } });
    const call = await s.twilio.call('CA0813');
    const conn = await until<RtConn>(s.realtime, 'connection');
    await clientEvent(conn, 'response.create', (e: any) => e.response?.metadata?.bridge === 'closing');
    const heard = call.receivedBytes;
    const u = await update(s, 'CA0813');
    // Heard when Twilio was told to end the call. Before: the hang-up came with half of it still to play.
    expect(call.playedBytes - heard).toBe(closing.length);
    expect(u.form).toEqual({ Status: 'completed' });
    expect((await s.endOf('CA0813')).ended_reason).toBe('no_consent');
  });
});

describe('the bridge’s own lines across a realtime reconnect', () => {
  /** Closes the session right after it creates a response the bridge asked for with these instructions. */
  const cutWhenCreated = (conn: RtConn, instructions: string) => {
    const on = (e: { type: string }) => {
      const asked = conn.events.some((c: any) => c.type === 'response.create' && c.response?.instructions?.startsWith(instructions));
      if (e.type !== 'response.created' || !asked) return;
      conn.off('server', on);
      conn.ws.close(1011);
    };
    conn.on('server', on);
  };

  it('the session drops while the consent line is being said again: the new session says it, and the consent is still decided', async () => {
    s = await bridgeStack(() => undefined, { consentWaitMs: 400 });
    s.realtime.brain = brain({ repeat: { audio: assistantAudio(300), transcript: 'consent line', delayMs: 300 } });
    const call = await s.twilio.call('CA0810');
    const conn = await until<RtConn>(s.realtime, 'connection');
    cutWhenCreated(conn, 'Repeat');
    const again = await until<RtConn>(s.realtime, 'connection');
    await clientEvent(again, 'response.create', (e: any) => e.response?.instructions?.startsWith('Repeat'));
    await update(s, 'CA0810'); // silence after the repeat too: the polite end
    expect(creates(again).map((i) => i.split(' ')[0])).toEqual(['Repeat', 'Say']);
    expect(call.marksEchoed.length).toBeGreaterThan(0);
    expect((await s.endOf('CA0810')).ended_reason).toBe('no_consent');
  });

  it('the session drops while the closing line is being generated: the new session says it, and the hang-up comes once it was heard', async () => {
    s = await bridgeStack((c) => (c.consent.retry_if_no_ack = false), { consentWaitMs: 300 });
    const closing = assistantAudio(600);
    s.realtime.brain = brain({ closing: { audio: closing, transcript: 'Goodbye.', delayMs: 300 } });
    const call = await s.twilio.call('CA0811');
    const conn = await until<RtConn>(s.realtime, 'connection');
    cutWhenCreated(conn, 'Say');
    const again = await until<RtConn>(s.realtime, 'connection');
    const heard = call.receivedBytes;
    const u = await update(s, 'CA0811');
    expect(creates(again).map((i) => i.split(' ')[0])).toEqual(['Say']);
    expect(call.receivedBytes - heard).toBe(closing.length); // the goodbye, whole, before the hang-up
    expect(call.playedBytes).toBe(call.receivedBytes);
    expect(u.form).toEqual({ Status: 'completed' });
    expect((await s.endOf('CA0811')).ended_reason).toBe('no_consent');
  });

  it('a closing line asked once more after a failure, all of it sent when the session drops: the reconnect does not cut it, it is heard once, whole', async () => {
    s = await bridgeStack((c) => (c.consent.retry_if_no_ack = false), { consentWaitMs: 300 });
    const closing = assistantAudio(600);
    const base = brain({ closing: { audio: closing, transcript: 'Goodbye.' } });
    let says = 0;
    s.realtime.brain = (ctx) => (ctx.instructions?.startsWith('Say') && says++ === 0 ? null : base(ctx));
    const call = await s.twilio.call('CA0813');
    const conn = await until<RtConn>(s.realtime, 'connection');
    await clientEvent(conn, 'response.create', (e: any) => e.response?.metadata?.bridge === 'closing');
    const heard = call.receivedBytes;
    // The line's audio is all sent, then the session drops before its response.done.
    conn.on('server', (e: any) => e.type === 'response.output_audio.done' && conn.ws.close(1011));
    const details = { type: 'failed', error: { type: 'invalid_request_error', code: 'inference_rate_limit_exceeded' } };
    const response = { id: 'resp_f1', object: 'realtime.response', output: [], metadata: { bridge: 'closing' } };
    conn.send({ type: 'response.created', response: { ...response, status: 'in_progress' } });
    conn.send({ type: 'response.done', response: { ...response, status: 'failed', status_details: details } });
    const again = await until<RtConn>(s.realtime, 'connection');
    const u = await update(s, 'CA0813');
    expect(call.clears).toEqual([]); // nothing of it cut
    expect(call.receivedBytes - heard).toBe(closing.length); // once, whole
    expect(call.playedBytes).toBe(call.receivedBytes); // heard to its end before the hang-up
    expect(creates(again)).toEqual([]); // not asked a third time
    expect(u.form).toEqual({ Status: 'completed' });
    expect((await s.endOf('CA0813')).ended_reason).toBe('no_consent');
  });

  it('the opening line all sent when the session drops, before its response.done: the reconnect does not say it again, it is heard once', async () => {
    s = await bridgeStack((c) => (c.consent.retry_if_no_ack = false), { consentWaitMs: 300 });
    const greeting = assistantAudio(1000);
    const closing = assistantAudio(600);
    s.realtime.brain = brain({
      greeting: { audio: greeting, transcript: 'consent line' },
      closing: { audio: closing, transcript: 'Goodbye.' },
    });
    const call = await s.twilio.call('CA0815');
    const conn = await until<RtConn>(s.realtime, 'connection');
    // The line's audio is all sent, then the session drops before its response.done.
    conn.on('server', (e: any) => e.type === 'response.output_audio.done' && conn.ws.close(1011));
    const again = await until<RtConn>(s.realtime, 'connection');
    const u = await update(s, 'CA0815'); // silence after the line: the polite end
    expect(creates(again).map((i) => i.split(' ')[0])).toEqual(['Say']); // not greeted a second time
    // The line was said: the new session takes turns once the caller has heard it to its end.
    const turns = again.events
      .filter((e: any) => e.type === 'session.update' && e.session.audio?.input?.turn_detection)
      .map((e: any) => e.session.audio.input.turn_detection.create_response as boolean);
    expect(turns.at(-1)).toBe(true);
    expect(call.clears).toEqual([]);
    expect(call.receivedBytes).toBe(greeting.length + closing.length); // the line once, then the goodbye
    expect(u.form).toEqual({ Status: 'completed' });
    expect((await s.endOf('CA0815')).ended_reason).toBe('no_consent');
  });

  it('the line’s repeat all sent when the session drops, before its response.done: the reconnect does not cut it and say it again', async () => {
    s = await bridgeStack(() => undefined, { consentWaitMs: 300 });
    const greeting = assistantAudio(300);
    const repeat = assistantAudio(1500);
    const closing = assistantAudio(600);
    s.realtime.brain = brain({
      greeting: { audio: greeting, transcript: 'consent line' },
      repeat: { audio: repeat, transcript: 'consent line' },
      closing: { audio: closing, transcript: 'Goodbye.' },
    });
    const call = await s.twilio.call('CA0816');
    const conn = await until<RtConn>(s.realtime, 'connection');
    await clientEvent(conn, 'response.create', (e: any) => e.response?.instructions?.startsWith('Repeat'));
    conn.on('server', (e: any) => e.type === 'response.output_audio.done' && conn.ws.close(1011));
    const again = await until<RtConn>(s.realtime, 'connection');
    const u = await update(s, 'CA0816'); // silence after the repeat too: the polite end
    expect(call.clears).toEqual([]); // nothing of it cut
    expect(creates(again).map((i) => i.split(' ')[0])).toEqual(['Say']); // not asked again
    expect(call.receivedBytes).toBe(greeting.length + repeat.length + closing.length); // each once, whole
    expect(call.playedBytes).toBe(call.receivedBytes);
    expect(u.form).toEqual({ Status: 'completed' });
    expect((await s.endOf('CA0816')).ended_reason).toBe('no_consent');
  });

  // The new session was asked to answer the caller's last words, though the line they were said
  // over had not been heard: the answer queued behind the line, and their next words, a barge-in on
  // it, would clear the rest of the line at Twilio (as turn-taking did before it waited for the line).
  it('the session drops after the caller spoke over a line still playing: the new session does not answer them, the line is heard whole', async () => {
    s = await bridgeStack((c) => (c.consent.retry_if_no_ack = false), { consentWaitMs: 300 });
    const greeting = assistantAudio(4000); // generated at once: it plays for 4 s
    const closing = assistantAudio(600);
    s.realtime.heardQueue = [{ text: 'hello?', logprob: -0.05 }];
    s.realtime.brain = brain({
      greeting: { audio: greeting, transcript: 'consent line' },
      closing: { audio: closing, transcript: 'Goodbye.' },
      turns: [{ audio: assistantAudio(400), transcript: 'Hello! How can I help?' }],
    });
    const call = await s.twilio.call('CA0830');
    const conn = await until<RtConn>(s.realtime, 'connection');
    await until(call, 'frame', () => call.receivedBytes >= greeting.length && call.playedBytes >= 8 * 300, 'the line sent, playing');
    speak(call); // "hello?" over the line
    await serverEvent(conn, 'conversation.item.input_audio_transcription.completed');
    conn.drop();
    const again = await until<RtConn>(s.realtime, 'connection');
    const u = await update(s, 'CA0830'); // no answer after the line: the polite end
    expect(creates(again).map((i) => i.split(' ')[0])).toEqual(['Say']); // the closing line only
    expect(call.clears).toEqual([]);
    expect(call.receivedBytes).toBe(greeting.length + closing.length);
    expect(u.form).toEqual({ Status: 'completed' });
    expect((await s.endOf('CA0830')).ended_reason).toBe('no_consent');
  });

  // The new session was not asked for the repeat (the caller had agreed), nor for an answer: the
  // repeat, never generated, was never heard, so the model took no turns for the rest of the call
  // and the caller's yes was never answered.
  it('a yes said over the repeat before it was generated, then the session drops: the new session answers it and takes turns', async () => {
    s = await bridgeStack();
    s.realtime.heardQueue = [
      { text: 'hello?', logprob: -0.05 },
      { text: 'yes, sure', logprob: -0.05 },
    ];
    s.realtime.brain = brain({
      greeting: { audio: assistantAudio(300), transcript: 'consent line' },
      repeat: { audio: assistantAudio(300), transcript: 'consent line', delayMs: 10_000 }, // not generated before the drop
      afterOutput: { audio: assistantAudio(400), transcript: 'Thank you. How can I help?' },
    });
    const call = await s.twilio.call('CA0831');
    const conn = await until<RtConn>(s.realtime, 'connection');
    await until(call, 'frame', () => call.playedBytes > 0 && call.playedBytes === call.receivedBytes, 'the greeting heard');
    speak(call); // "hello?": the line is said again
    const repeatCreated = (e: any) => e.type === 'response.created' && e.response.metadata?.bridge === 'consent';
    if (conn.served.filter(repeatCreated).length < 2) await until(conn, 'server', repeatCreated, 'the repeat created');
    speak(call); // "yes, sure", as the repeat is being generated
    await serverEvent(conn, 'conversation.item.input_audio_transcription.completed');
    conn.drop();
    const again = await until<RtConn>(s.realtime, 'connection');
    await clientEvent(again, 'response.create', (e: any) => e.response === undefined);
    await clientEvent(again, 'session.update', (e: any) => e.session.audio?.input?.turn_detection?.create_response === true);
    expect(creates(again).filter((i) => i.startsWith('Repeat'))).toEqual([]);
    call.hangUp();
    expect((await s.endOf('CA0831')).ended_reason).toBe('caller_hangup');
  });

  it('the session drops for good while a generated closing line still plays: the caller hears it to its end before the hang-up', async () => {
    s = await bridgeStack((c) => (c.consent.retry_if_no_ack = false), { consentWaitMs: 300 });
    const closing = assistantAudio(1500);
    s.realtime.brain = brain({ closing: { audio: closing, transcript: 'Goodbye.' } });
    const call = await s.twilio.call('CA0814');
    const conn = await until<RtConn>(s.realtime, 'connection');
    await clientEvent(conn, 'response.create', (e: any) => e.response?.metadata?.bridge === 'closing');
    const heard = call.receivedBytes;
    await serverEvent(conn, 'response.done', (e: any) => e.response?.metadata?.bridge === 'closing');
    s.realtime.refuse = true; // the reconnect fails: the model is gone
    conn.drop();
    const u = await update(s, 'CA0814');
    expect(call.receivedBytes - heard).toBe(closing.length);
    expect(call.playedBytes).toBe(call.receivedBytes); // heard to its end before the hang-up
    expect(u.form).toEqual({ Status: 'completed' });
    expect((await s.endOf('CA0814')).ended_reason).toBe('no_consent');
  });
});

// The configuration's policy acting on a real call through the bridge: the spend guard fed with
// the call's own events (confidence from the transcription's log-probabilities, TTFB from the end
// of the caller's speech, usage from response.done), and its decisions carried out through the
// local Twilio's REST API; a realtime server that drops mid-call.
import { afterEach, describe, expect, it } from 'vitest';
import { bridgeStack, type BridgeStack } from './peers/bridge-stack';
import type { RtConn } from './peers/realtime-peer';
import { BOOKING, assistantAudio, brain, clientEvent, serverEvent, speak } from './peers/script';
import type { MediaCall } from './peers/twilio-peer';
import { until } from './peers/wait';

let s: BridgeStack | null = null;
afterEach(async () => {
  await s?.close();
  s = null;
});

const HUMAN = '+351211234567';

async function answered(stack: BridgeStack, callSid: string): Promise<{ call: MediaCall; conn: RtConn }> {
  const call = await stack.twilio.call(callSid);
  const conn = stack.realtime.conns.at(-1) ?? (await until<RtConn>(stack.realtime, 'connection'));
  await until(call, 'frame', () => call.playedBytes > 0 && call.playedBytes === call.receivedBytes, 'the greeting heard');
  return { call, conn };
}

const hungUp = (call: MediaCall) => (call.closed ? Promise.resolve() : until(call, 'closed', () => true, 'the stream closed'));

const update = (stack: BridgeStack, callSid: string) =>
  stack.twilio.updates.find((u) => u.callSid === callSid) ??
  until<(typeof stack.twilio.updates)[number]>(stack.twilio.events, 'update', (u) => u.callSid === callSid, `a call update for ${callSid}`);

describe('phone bridge: the policy on real events', () => {
  it('low confidence twice → the caller is transferred to the human number (<Dial> through the REST API)', async () => {
    s = await bridgeStack();
    s.realtime.heardQueue = [
      { text: 'mm yes', logprob: Math.log(0.3) },
      { text: 'uh what was it', logprob: Math.log(0.35) },
    ];
    s.realtime.brain = brain({});
    const { call, conn } = await answered(s, 'CA0101');
    speak(call);
    await serverEvent(conn, 'conversation.item.input_audio_transcription.completed');
    await serverEvent(conn, 'response.done');
    expect(s.twilio.updates).toEqual([]); // once is not enough
    speak(call);
    const second = await serverEvent(conn, 'conversation.item.input_audio_transcription.completed');
    const secondAt = performance.now();
    const u = await update(s, 'CA0101');
    expect(u.at).toBeGreaterThan(secondAt); // the transfer followed the second low-confidence transcript
    expect(second.transcript).toBe('uh what was it');
    expect(u.form.Twiml).toMatch(new RegExp(`<Say>[^<]+</Say><Dial action="[^"]+/twilio/dial[^"]*"[^>]*>\\${HUMAN}</Dial>`));
    const end = await s.endOf('CA0101');
    await hungUp(call);
    expect(end.record).toMatchObject({ ended_reason: 'low_confidence', escalated: true });
    expect(end.record!.confidence_avg).toBeCloseTo(0.325, 3);
    expect(s.twilio.updates).toHaveLength(1);
  });

  it('the per-call cap → a closing line the caller hears, then Status=completed; ended_reason per_call_cap', async () => {
    s = await bridgeStack(); // cap 0.35 USD; audio out 20 USD per million tokens
    const closing = assistantAudio(820);
    s.realtime.chunkBytes = 480; // 60 ms deltas: the last 40 ms are marked only at the end of the answer
    s.realtime.brain = brain({
      greeting: {
        audio: assistantAudio(300),
        usage: { input_tokens: 10, output_tokens: 20_000, output_token_details: { audio_tokens: 20_000 } },
      },
      closing: { audio: closing, transcript: 'Goodbye.' },
    });
    const call = await s.twilio.call('CA0102');
    const conn = s.realtime.conns.at(-1) ?? (await until<RtConn>(s.realtime, 'connection'));
    const req = await clientEvent(conn, 'response.create', (e) => e.response?.instructions?.startsWith('Say this'));
    expect(req.response).toMatchObject({ conversation: 'none', tool_choice: 'none' });
    expect(req.response.instructions).toContain('pt-PT');
    const u = await update(s, 'CA0102');
    expect(u.form).toEqual({ Status: 'completed' });
    // The whole closing line had played before the call was completed.
    expect(Buffer.concat(call.received).subarray(-closing.length).equals(closing)).toBe(true);
    expect(call.playedBytes).toBe(call.receivedBytes);
    const end = await s.endOf('CA0102');
    expect(end.record).toMatchObject({ ended_reason: 'per_call_cap', escalated: false });
    expect(end.estUsd_at_disconnect).toBeCloseTo(0.4, 6);
    expect(end.record!.est_audio_cost_usd).toBeGreaterThanOrEqual(0.35);
  });

  it('a caller who hangs up during the closing line: that line is cancelled and metered with the usage it reports', async () => {
    s = await bridgeStack();
    s.realtime.chunkBytes = 160;
    s.realtime.paceMs = 20; // said in real time: the closing line is still coming at the hang-up
    s.realtime.brain = brain({
      greeting: { audio: assistantAudio(300), usage: { output_tokens: 20_000, output_token_details: { audio_tokens: 20_000 } } },
      closing: { audio: assistantAudio(6000), transcript: 'We have to end the call here. Goodbye.' },
    });
    const call = await s.twilio.call('CA0108');
    const conn = s.realtime.conns.at(-1) ?? (await until<RtConn>(s.realtime, 'connection'));
    const created = await serverEvent(conn, 'response.created', (e) => e.response.metadata?.bridge === 'closing');
    await serverEvent(conn, 'response.output_audio.delta', (e) => e.response_id === created.response.id);
    call.hangUp();
    const end = await s.endOf('CA0108');
    const line = s.meterEvents.filter((e) => e.model === s!.config.meta.model)[1];
    expect(line).toMatchObject({ job_id: 'CA0108', error_code: 'CANCELLED' });
    expect(line.cost_usd!).toBeGreaterThan(0);
    expect(end.record).toMatchObject({ ended_reason: 'per_call_cap' });
  });

  it('one long answer cannot run far past the per-call cap: its output stops at what is left of the budget, then the closing line', async () => {
    const cap = 0.002; // audio in 10, out 20 USD per million tokens: 100 output tokens, 5 s of audio
    s = await bridgeStack((c) => {
      c.spend_guard.per_call_usd_cap = cap;
    });
    // A caller who asks for something long: 20 s of audio (400 tokens, 0.008 USD), four times the cap.
    s.realtime.brain = brain({ turns: [{ audio: assistantAudio(20_000), transcript: 'Here is the whole price list, '.repeat(20) }] });
    const { call, conn } = await answered(s, 'CA0106');
    const done: any[] = [];
    conn.on('server', (e: any) => void (e.type === 'response.done' && done.push(e.response)));
    while ((await s.voice.get('CA0106'))!.state.turns < 1) await new Promise((r) => setTimeout(r, 20));
    const before = (await s.voice.get('CA0106'))!.state.estUsd; // the greeting's cost: what is left is cap - before
    speak(call);
    const u = await update(s, 'CA0106');
    expect(u.form).toEqual({ Status: 'completed' });
    const end = await s.endOf('CA0106');
    expect(end.record).toMatchObject({ ended_reason: 'per_call_cap' });
    const answer = done[0];
    // The answer's output is bounded by the budget left when it began, to one token.
    const outUsd = (answer.usage.output_token_details.audio_tokens * 20) / 1e6;
    expect(outUsd).toBeLessThanOrEqual(cap - before + 20 / 1e6 + 1e-9);
    expect(answer).toMatchObject({ status: 'incomplete', status_details: { reason: 'max_output_tokens' } });
    // The call's cost at the disconnect: the cap, passed by no more than that answer's input and a token.
    const inUsd = (answer.usage.input_token_details.audio_tokens * 10) / 1e6;
    expect(end.estUsd_at_disconnect).toBeLessThanOrEqual(cap + inUsd + 20 / 1e6 + 0.0002);
    // The caller then hears the whole closing line: it is not held to the spent budget.
    const closing = done.find((r) => r.metadata?.bridge === 'closing');
    expect(closing).toMatchObject({ status: 'completed' });
  });

  it('a session opened after a reconnect is held to what is left of the budget too, not to the whole cap', async () => {
    const cap = 0.002; // out 20 USD per million tokens: 100 output tokens
    s = await bridgeStack((c) => {
      c.spend_guard.per_call_usd_cap = cap;
    });
    s.realtime.brain = brain({
      greeting: { audio: assistantAudio(300), usage: { output_token_details: { audio_tokens: 60 } } }, // 0.0012 USD
      turns: [{ audio: assistantAudio(20_000), transcript: 'A very long answer.' }],
    });
    const { call, conn } = await answered(s, 'CA0107');
    while ((await s.voice.get('CA0107'))!.state.turns < 1) await new Promise((r) => setTimeout(r, 20));
    const before = (await s.voice.get('CA0107'))!.state.estUsd;
    conn.drop();
    const again = await until<RtConn>(s.realtime, 'connection');
    await clientEvent(again, 'session.update');
    speak(call);
    const answer = (await serverEvent(again, 'response.done')).response;
    expect(answer.usage.output_token_details.audio_tokens).toBeLessThanOrEqual(Math.ceil(((cap - before) * 1e6) / 20));
    const end = await s.endOf('CA0107');
    expect(end.record).toMatchObject({ ended_reason: 'per_call_cap' });
  });

  it("the budget left is the guard's: the greeting's audio, estimated while it played, is not counted again beside the usage it reported", async () => {
    const cap = 0.002; // audio in 10, out 20 USD per million tokens: 100 output tokens
    s = await bridgeStack((c) => {
      c.spend_guard.per_call_usd_cap = cap;
    });
    // 3 s of greeting, its audio estimated at 60 output tokens (0.0012 USD) while it plays; its
    // response reports 10 (0.0002 USD), which is what the call is billed for it.
    s.realtime.paceMs = 10; // the guard answers for the greeting's audio before its response.done
    s.realtime.brain = brain({
      greeting: { audio: assistantAudio(3000), usage: { output_token_details: { audio_tokens: 10 } } },
      turns: [{ audio: assistantAudio(20_000), transcript: 'A very long answer.' }],
    });
    const call = await s.twilio.call('CA0109');
    const conn = s.realtime.conns.at(-1) ?? (await until<RtConn>(s.realtime, 'connection'));
    await until(call, 'frame', () => call.playedBytes >= 24_000 && call.playedBytes === call.receivedBytes, 'the greeting heard');
    while ((await s.voice.get('CA0109'))!.state.turns < 1) await new Promise((r) => setTimeout(r, 20));
    const before = (await s.voice.get('CA0109'))!.state.estUsd;
    expect(before).toBeCloseTo(0.0002, 9);
    speak(call);
    const answer = (await serverEvent(conn, 'response.done', (e) => !e.response.metadata?.bridge)).response;
    // Held to what is left of the budget (90 tokens), not to what is left once the greeting's
    // audio, at the estimate, is counted on top of its usage.
    expect(answer.usage.output_token_details.audio_tokens).toBe(Math.ceil(((cap - before) * 1e6) / 20));
    await s.endOf('CA0109');
  });

  it('answers that report no usage still count toward the per-call cap (their audio, as measured), after one that did', async () => {
    s = await bridgeStack((c) => {
      c.spend_guard.per_call_usd_cap = 0.0004; // audio in 10, out 20 USD per million tokens
    });
    s.realtime.brain = brain({
      greeting: { audio: assistantAudio(300), usage: { output_token_details: { audio_tokens: 1 } } }, // 0.00002 USD
      turns: Array.from({ length: 6 }, () => ({ audio: assistantAudio(300), usage: null })), // none reported
    });
    const { call, conn } = await answered(s, 'CA0104');
    // Each answer waited for until the guard counted it (polled): its verdict decides the next turn.
    const guard = async (turns: number) => {
      for (;;) {
        const st = (await s!.voice.get('CA0104'))!.state;
        if (st.turns >= turns) return st;
        await new Promise((r) => setTimeout(r, 20));
      }
    };
    for (let turn = 1; turn <= 4; turn++) {
      speak(call);
      await serverEvent(conn, 'response.done');
      if ((await guard(1 + turn)).action === 'disconnect') break;
    }
    const u = await update(s, 'CA0104');
    expect(u.form).toEqual({ Status: 'completed' });
    const end = await s.endOf('CA0104');
    expect(end.record).toMatchObject({ ended_reason: 'per_call_cap' });
    expect(end.estUsd_at_disconnect).toBeGreaterThanOrEqual(0.0004);
    // The meter still says those answers' cost is unknown: the estimate is the guard's alone.
    expect(s.meterEvents.filter((e) => e.job_id === 'CA0104' && e.error_code.includes('UNPRICED')).length).toBeGreaterThan(0);
  }, 40_000);

  it('cached input audio is priced at audio_in_cached_per_million: the meter and the guard agree; without it, at the full rate', async () => {
    const usage = {
      input_tokens: 10_000,
      output_tokens: 0,
      input_token_details: { audio_tokens: 10_000, cached_tokens: 8000, cached_tokens_details: { audio_tokens: 8000 } },
      output_token_details: { audio_tokens: 0 },
    };
    for (const [cached, usd] of [
      [0.3, (2000 * 10 + 8000 * 0.3) / 1e6], // 2,000 fresh at 10, 8,000 cached at 0.3 USD per million
      [undefined, (10_000 * 10) / 1e6], // no cached price: all at the full rate, as before
    ] as const) {
      s = await bridgeStack((c) => {
        if (cached !== undefined) Object.assign(c.spend_guard, { audio_in_cached_per_million: cached });
      });
      s.realtime.brain = brain({ greeting: { audio: assistantAudio(300), usage } });
      const call = await s.twilio.call('CA0105');
      await until(call, 'frame', () => call.playedBytes > 0 && call.playedBytes === call.receivedBytes, 'the greeting heard');
      call.hangUp();
      const end = await s.endOf('CA0105');
      const greeting = s.meterEvents.find((e) => e.job_id === 'CA0105' && e.input_tokens === 10_000)!;
      expect(greeting.cost_usd).toBeCloseTo(usd, 9);
      expect(end.record!.est_audio_cost_usd).toBeCloseTo(usd, 6);
      await s.close();
      s = null;
    }
  });

  it('text tokens are priced at the text prices: the meter and the guard agree and the cap is reached; without them the meter marks the response UNPRICED', async () => {
    // The greeting's audio is 0.0001 USD, far under the cap; its text (the instructions and the
    // conversation re-read as input, 4,000 of them cached, and the words said) brings it to the cap.
    const usage = {
      input_tokens: 10_000,
      output_tokens: 105,
      input_token_details: { audio_tokens: 0, text_tokens: 10_000, cached_tokens: 4000, cached_tokens_details: { text_tokens: 4000 } },
      output_token_details: { audio_tokens: 5, text_tokens: 100 },
    };
    for (const [priced, usd] of [
      [true, (5 * 20 + 6000 * 0.6 + 4000 * 0.06 + 100 * 2.4) / 1e6], // text in 0.6, cached 0.06, out 2.4 USD per million
      [false, (5 * 20) / 1e6], // no text prices: the audio alone, and the meter says the cost is not whole
    ] as const) {
      s = await bridgeStack((c) => {
        c.spend_guard.per_call_usd_cap = 0.004;
        if (priced) c.spend_guard.text_in_cached_per_million = 0.06;
        else for (const k of ['text_in_per_million', 'text_out_per_million'] as const) delete c.spend_guard[k];
      });
      s.realtime.brain = brain({ greeting: { audio: assistantAudio(300), usage } });
      const call = await s.twilio.call('CA0109');
      while (((await s.voice.get('CA0109'))?.state.turns ?? 0) < 1) await new Promise((r) => setTimeout(r, 20));
      // The greeting's cost (at the disconnect: the closing line asked for then may be billed by now too).
      const state = (await s.voice.get('CA0109'))!.state;
      expect(priced ? state.estUsd_at_disconnect : state.estUsd).toBeCloseTo(usd, 9);
      expect(state.action).toBe(priced ? 'disconnect' : 'continue');
      if (priced) expect((await update(s, 'CA0109')).form).toEqual({ Status: 'completed' });
      else call.hangUp();
      const end = await s.endOf('CA0109');
      const greeting = s.meterEvents.find((e) => e.job_id === 'CA0109' && e.input_tokens === 10_000)!;
      expect(greeting.cost_usd).toBeCloseTo(usd, 9);
      expect(greeting.error_code).toBe(priced ? '' : 'UNPRICED');
      expect(end.record).toMatchObject({ ended_reason: priced ? 'per_call_cap' : 'caller_hangup' });
      await s.close();
      s = null;
    }
  });

  it('with disconnect_when_exceeded false the call goes on past the cap, and that is logged once, not per guard batch', async () => {
    s = await bridgeStack((c) => {
      c.spend_guard.disconnect_when_exceeded = false;
    });
    const over = { input_tokens: 10, output_tokens: 20_000, output_token_details: { audio_tokens: 20_000 } };
    s.realtime.brain = brain({
      greeting: { audio: assistantAudio(300), usage: over },
      afterOutput: { audio: assistantAudio(200), usage: over },
    });
    const call = await s.twilio.call('CA0103');
    const conn = s.realtime.conns.at(-1) ?? (await until<RtConn>(s.realtime, 'connection'));
    await until(call, 'frame', () => call.playedBytes > 0 && call.playedBytes === call.receivedBytes, 'the greeting heard');
    for (let turn = 0; turn < 2; turn++) {
      speak(call, 400);
      // Past the cap the answers are not cut short: they are said whole.
      expect((await serverEvent(conn, 'response.done')).response.status).toBe('completed');
    }
    call.hangUp();
    const end = await s.endOf('CA0103');
    expect(s.twilio.updates).toEqual([]); // never completed by the bridge
    expect(end.record).toMatchObject({ ended_reason: 'caller_hangup' });
    expect(s.logs.filter((l) => l.includes('disconnect_when_exceeded is false'))).toHaveLength(1);
  });

  it('with disconnect_when_exceeded false the call past the cap still reaches a person at the turn cap (turn_cap)', async () => {
    s = await bridgeStack((c) => {
      c.spend_guard.disconnect_when_exceeded = false;
      c.guardrails.max_turns = 3;
      for (const rule of c.escalation.rules) if (rule.trigger === 'turn_cap_reached') rule.threshold = 3;
    });
    const over = { input_tokens: 10, output_tokens: 20_000, output_token_details: { audio_tokens: 20_000 } };
    s.realtime.brain = brain({ greeting: { audio: assistantAudio(300), usage: over } }); // past the cap at once
    const { call, conn } = await answered(s, 'CA0108');
    const transferred = update(s, 'CA0108');
    speak(call, 400);
    await serverEvent(conn, 'response.done');
    await until(call, 'frame', () => call.playedBytes === call.receivedBytes, 'the answer heard');
    speak(call, 400);
    // The greeting and two answers: the third turn. Before: the cap's verdict hid it, and the call went on.
    expect((await transferred).form.Twiml).toMatch(new RegExp(`<Dial action="[^"]+"[^>]*>\\${HUMAN}</Dial>`));
    await hungUp(call);
    const end = await s.endOf('CA0108');
    expect(end.record).toMatchObject({ ended_reason: 'turn_cap', escalated: true });
  });

  it('two slow answers (TTFB over the budget) → escalation with reason latency', async () => {
    s = await bridgeStack((c) => {
      c.guardrails.latency_budget_s = 0.4;
      c.escalation.rules.find((r) => r.trigger === 'latency_over_budget')!.threshold = 0.4;
    });
    const slow = { audio: assistantAudio(200), delayMs: 700 };
    s.realtime.brain = brain({ turns: [slow, slow] });
    const { call, conn } = await answered(s, 'CA0103');
    speak(call);
    await serverEvent(conn, 'response.done');
    expect(s.twilio.updates).toEqual([]); // one breach is not two
    speak(call);
    await serverEvent(conn, 'response.output_audio.delta'); // the second answer begins
    const secondAt = performance.now();
    const u = await update(s, 'CA0103');
    expect(u.at).toBeGreaterThan(secondAt); // escalated after the second slow answer, not the first
    expect(u.form.Twiml).toMatch(new RegExp(`<Dial action="[^"]+"[^>]*>\\${HUMAN}</Dial>`));
    const end = await s.endOf('CA0103');
    expect(end.record).toMatchObject({ ended_reason: 'latency', escalated: true });
    expect(end.record!.ttfb_s).toBeGreaterThan(0.6);
  });

  it('the realtime server drops mid-call and refuses the reconnect → the caller is transferred, reason recorded', async () => {
    s = await bridgeStack();
    s.realtime.brain = brain({});
    const { call, conn } = await answered(s, 'CA0104');
    s.realtime.refuse = true;
    conn.drop();
    const u = await update(s, 'CA0104');
    expect(u.form.Twiml).toMatch(new RegExp(`<Dial action="[^"]+"[^>]*>\\${HUMAN}</Dial>`));
    expect(s.realtime.attempts).toBe(2); // the call's session, then one reconnect attempt
    const end = await s.endOf('CA0104');
    await hungUp(call);
    expect(end.record).toMatchObject({ ended_reason: 'realtime_failure', escalated: true });
    expect(end.realtime_failure).toMatch(/HTTP 503/);
  });

  it('the realtime server stalls mid-call (its socket open, nothing read, nothing answered) → given up as a drop is: one reconnect, refused → the caller is transferred', async () => {
    s = await bridgeStack(() => undefined, { realtimeSilentForMs: 400 });
    s.realtime.brain = brain({});
    const { call, conn } = await answered(s, 'CA0111');
    s.realtime.refuse = true;
    (conn.ws as unknown as { _socket: { pause(): void } })._socket.pause(); // a network that holds everything
    const u = await update(s, 'CA0111');
    expect(u.form.Twiml).toMatch(new RegExp(`<Dial action="[^"]+"[^>]*>\\${HUMAN}</Dial>`));
    expect(s.realtime.attempts).toBe(2);
    const end = await s.endOf('CA0111');
    await hungUp(call);
    expect(end.record).toMatchObject({ ended_reason: 'realtime_failure', escalated: true });
    expect(s.logs.some((l) => /CA0111: realtime session failed \(the realtime server stopped answering/.test(l))).toBe(true);
  });

  it('an answer that stalls once begun (its socket alive and answering pings, nothing more of the response) → the session is replaced and the new one answers the caller', async () => {
    s = await bridgeStack(() => undefined, { realtimeSilentForMs: 400 });
    s.realtime.brain = brain({});
    const { call, conn } = await answered(s, 'CA0112');
    s.realtime.brain = () => null; // the model begins its answer, then sends nothing more
    speak(call);
    await serverEvent(conn, 'conversation.item.input_audio_transcription.completed');
    conn.send({ type: 'response.created', response: { id: 'resp_S', status: 'in_progress', output: [], metadata: null } });
    const next = await until<RtConn>(s.realtime, 'connection', () => true, 'a new realtime session');
    s.realtime.brain = brain({});
    await clientEvent(next, 'response.create');
    expect(
      s.logs.some((l) =>
        /CA0112: realtime session failed \(the realtime server sent nothing for \d+ ms of the response in progress/.test(l),
      ),
    ).toBe(true);
    call.hangUp();
    const end = await s.endOf('CA0112');
    expect(end.record).toMatchObject({ ended_reason: 'caller_hangup' });
    expect(s.meterEvents.some((e) => e.job_id === 'CA0112' && e.error_code === 'FAILED|UNPRICED')).toBe(true);
  });

  it('an answer asked for that never begins (no response.created, the socket alive) → the session is replaced and the new one is asked again', async () => {
    s = await bridgeStack(() => undefined, { realtimeSilentForMs: 400 });
    s.realtime.brain = brain({});
    const { call, conn } = await answered(s, 'CA0113');
    s.realtime.brain = () => null; // the server takes the request and never begins the answer
    for (const key of '42#') call.press(key);
    await clientEvent(conn, 'conversation.item.create', (e) => e.item?.content?.[0]?.text === '(keys pressed: 42)');
    await clientEvent(conn, 'response.create');
    const next = await until<RtConn>(s.realtime, 'connection', () => true, 'a new realtime session');
    s.realtime.brain = brain({});
    await clientEvent(next, 'response.create');
    expect(
      s.logs.some((l) => /CA0113: realtime session failed \(the realtime server sent nothing for \d+ ms of the answer asked for/.test(l)),
    ).toBe(true);
  });

  it('a caller turn the server VAD committed and never answered (no response.created, the socket alive) → the session is replaced and the new one answers it', async () => {
    s = await bridgeStack(() => undefined, { realtimeSilentForMs: 400 });
    s.realtime.brain = brain({});
    const { call, conn } = await answered(s, 'CA0114');
    s.realtime.brain = () => null; // the server commits the caller's turn and never begins the answer
    speak(call);
    await serverEvent(conn, 'conversation.item.input_audio_transcription.completed');
    const next = await until<RtConn>(s.realtime, 'connection', () => true, 'a new realtime session');
    s.realtime.brain = brain({});
    await clientEvent(next, 'response.create');
    expect(
      s.logs.some((l) =>
        /CA0114: realtime session failed \(the realtime server sent nothing for \d+ ms of the answer to the caller's turn/.test(l),
      ),
    ).toBe(true);
  });

  it('caller audio held while reconnecting and then dropped (the reconnect failed) is not counted by the spend guard: it counts what the model was sent', async () => {
    s = await bridgeStack();
    s.realtime.brain = brain({});
    const { call, conn } = await answered(s, 'CA0110');
    s.realtime.holdUpdates = new Promise(() => undefined); // the new session never becomes ready
    conn.drop();
    await update(s, 'CA0110');
    expect(s.realtime.attempts).toBe(2);
    call.hangUp();
    await s.endOf('CA0110');
    const sentMs = s.realtime.conns.reduce((n, c) => n + c.inbound.reduce((m, b) => m + b.length, 0), 0) / 8;
    expect(sentMs).toBeGreaterThan(0);
    // A frame or two the bridge wrote as the old socket died never reached the peer (in flight, counted).
    const counted = (await s.voice.get('CA0110'))!.state.inputMs;
    expect(counted - sentMs).toBeGreaterThanOrEqual(0);
    expect(counted - sentMs).toBeLessThanOrEqual(60);
  });

  it('an answer that fails (rate limited) is asked for once more; failing again, the caller is transferred rather than left in silence', async () => {
    s = await bridgeStack();
    s.realtime.brain = brain({});
    const { call, conn } = await answered(s, 'CA0108');
    s.realtime.brain = () => null; // the model's answers are the test's own, below
    speak(call); // agrees to the line and asks something
    await serverEvent(conn, 'conversation.item.input_audio_transcription.completed');
    const failed = (id: string) => {
      conn.send({ type: 'response.created', response: { id, status: 'in_progress', output: [], metadata: null } });
      const details = { type: 'failed', error: { type: 'invalid_request_error', code: 'inference_rate_limit_exceeded' } };
      conn.send({ type: 'response.done', response: { id, status: 'failed', status_details: details, output: [], metadata: null } });
    };
    failed('resp_F1');
    await clientEvent(conn, 'response.create', (e: any) => e.response === undefined);
    expect(s.twilio.updates).toEqual([]);
    failed('resp_F2');
    const u = await update(s, 'CA0108');
    expect(u.form.Twiml).toContain(`<Dial`);
    const end = await s.endOf('CA0108');
    expect(end.record).toMatchObject({ ended_reason: 'realtime_failure', escalated: true });
    expect(end.realtime_failure).toContain('inference_rate_limit_exceeded');
    expect(conn.events.filter((e: any) => e.type === 'response.create' && e.response === undefined)).toHaveLength(1);
  });

  it('the realtime server drops and the reconnect succeeds → same call, the conversation replayed, audio flows again', async () => {
    s = await bridgeStack();
    s.realtime.brain = brain({ greeting: { audio: assistantAudio(300), transcript: 'Hello, I am the assistant.' } });
    const { call, conn } = await answered(s, 'CA0105');
    conn.drop();
    const again = await until<RtConn>(s.realtime, 'connection');
    await clientEvent(again, 'session.update');
    const replayed = await clientEvent(again, 'conversation.item.create');
    expect(replayed.item).toMatchObject({
      type: 'message',
      role: 'assistant',
      content: [{ type: 'output_text', text: 'Hello, I am the assistant.' }],
    });
    const words = speak(call, 400);
    await serverEvent(again, 'input_audio_buffer.speech_stopped');
    expect(Buffer.concat(again.inbound).indexOf(words)).toBeGreaterThanOrEqual(0);
    await serverEvent(again, 'response.done');
    expect(s.twilio.updates).toEqual([]);
    call.hangUp();
    expect((await s.endOf('CA0105')).record).toMatchObject({ ended_reason: 'caller_hangup', escalated: false });
  });

  it('a function result the server adds once the closing line was asked for asks for no answer: the closing line is the last thing asked', async () => {
    s = await bridgeStack(); // cap 0.35 USD; audio out 20 USD per million tokens
    s.realtime.heardQueue = [{ text: 'I would like to book a cleaning tomorrow at ten', logprob: -0.1 }];
    s.realtime.brain = brain({
      turns: [{ call: { name: 'book_slot', args: BOOKING } }],
      // The answer to the booking reaches the cap: the guard disconnects, the closing line is asked for.
      afterOutput: {
        audio: assistantAudio(300),
        transcript: 'You are booked.',
        usage: { output_tokens: 20_000, output_token_details: { audio_tokens: 20_000 } },
      },
    });
    // The server's echo of the booking's result comes late, after the answer to it is done.
    const echoes: Array<Record<string, unknown>> = [];
    s.realtime.lose = (e: any) => e.type === 'conversation.item.added' && e.item.type === 'function_call_output' && !!echoes.push(e);
    const { call, conn } = await answered(s, 'CA0109');
    speak(call);
    const closing = await clientEvent(conn, 'response.create', (e) => e.response?.metadata?.bridge === 'closing');
    expect(echoes).toHaveLength(1);
    s.realtime.lose = () => false;
    conn.send(echoes[0]);
    const u = await update(s, 'CA0109');
    expect(u.form).toEqual({ Status: 'completed' });
    const end = await s.endOf('CA0109');
    // Greeting, booking call, its answer, closing line: no fifth response billed past the cap.
    expect(end.record).toMatchObject({ outcome: 'booking', ended_reason: 'per_call_cap', turns: 4 });
    expect(s.meterEvents.filter((e) => e.model === s!.config.meta.model)).toHaveLength(4);
    // before: the late echo asked for an answer to the booking, after (or over) the closing line
    expect(conn.events.slice(conn.events.indexOf(closing) + 1).filter((e) => e.type === 'response.create')).toEqual([]);
  });
});

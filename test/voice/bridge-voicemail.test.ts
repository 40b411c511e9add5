// The call's edges that end in voicemail, through the bridge with the local Twilio and realtime
// peers: after hours, the monthly pause (no realtime connection), a realtime failure before the
// agent spoke (network issue), a transfer nobody answered; then Twilio's callbacks, each signed
// over the absolute URL the TwiML named, and the status callback that closes what is left, once.
import { EventEmitter } from 'node:events';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { BackOfficePeer } from '../concierge/back-office-peer';
import { ACCOUNT_SID, bridgeStack, PUBLIC_URL, type BridgeStack } from './peers/bridge-stack';
import type { RtConn } from './peers/realtime-peer';
import { assistantAudio, brain, clientEvent, speak } from './peers/script';
import { twimlAttr } from './peers/twilio-peer';
import { until } from './peers/wait';

let s: BridgeStack | null = null;
afterEach(async () => {
  await s?.close();
  s = null;
});

const CALLER = '+351910000001';
const form = (callSid: string) => ({ CallSid: callSid, AccountSid: ACCOUNT_SID, From: CALLER, To: '+351210000000', CallStatus: 'ringing' });
const RECORDING = (sid: string) => `https://api.twilio.com/2010-04-01/Accounts/${ACCOUNT_SID}/Recordings/${sid}`;

/** A day and hour when the business is closed (three days from today, Lisbon time). */
function closedHours(): string {
  const today = new Intl.DateTimeFormat('en', { weekday: 'short', timeZone: 'Europe/Lisbon' }).format(new Date());
  const days = ['Sun', 'Mon', 'Tue', 'Wed', 'Thu', 'Fri', 'Sat'];
  return `${days[(days.indexOf(today) + 3) % 7]} 10:00-11:00`;
}

/** Twilio's side of a recorded message: the <Record> action, then the recording status callback. */
async function leaveMessage(st: BridgeStack, callSid: string, twiml: string, recordingSid = 'RE0001') {
  const action = twimlAttr(twiml, 'Record', 'action')!;
  const callback = twimlAttr(twiml, 'Record', 'recordingStatusCallback')!;
  const recorded = await st.twilio.callback(action, {
    CallSid: callSid,
    AccountSid: ACCOUNT_SID,
    RecordingUrl: RECORDING(recordingSid),
    RecordingDuration: '7',
  });
  const ready = {
    CallSid: callSid,
    AccountSid: ACCOUNT_SID,
    RecordingSid: recordingSid,
    RecordingUrl: RECORDING(recordingSid),
    RecordingStatus: 'completed',
    RecordingDuration: '7',
    RecordingStartTime: 'Mon, 23 Nov 2026 22:01:02 +0000',
  };
  const stored = await st.twilio.callback(callback, ready);
  return { recorded, stored, ready, callback };
}

const voicemailPosts = (st: BridgeStack) => st.hooks.seen.filter((r) => r.path === '/route_to_voicemail');

describe('phone bridge edges: voicemail', () => {
  it('after hours: the privacy notice and <Record> with both callbacks under PUBLIC_URL; the recording reaches route_to_voicemail once; one record', async () => {
    s = await bridgeStack((c) => (c.meta.business_hours_local = closedHours()));
    const answer = await s.twilio.placeCall(form('CA0701'));
    expect(answer.stream).toBeNull();
    expect(answer.twiml).toContain('stored only so that we can call you back'); // the privacy notice
    const callback = twimlAttr(answer.twiml, 'Record', 'recordingStatusCallback')!;
    expect(callback).toBe(`${PUBLIC_URL}/twilio/voicemail/recording?reason=after_hours&from=%2B351910000001`);
    expect(twimlAttr(answer.twiml, 'Record', 'action')).toBe(
      `${PUBLIC_URL}/twilio/voicemail/recorded?reason=after_hours&from=%2B351910000001`,
    );
    expect(answer.twiml).toMatch(/<Record [^>]+\/><Say>[^<]+<\/Say><Hangup\/><\/Response>$/); // nothing recorded: thanks, never silence

    const { recorded, stored, ready } = await leaveMessage(s, 'CA0701', answer.twiml);
    expect(recorded.status).toBe(200);
    expect(recorded.body).toMatch(/<Say>Thank you. We will call you back. Goodbye.<\/Say><Hangup\/>/);
    expect(stored.status).toBe(204);
    expect(voicemailPosts(s).map((r) => r.body)).toEqual([
      expect.objectContaining({
        call_id: 'CA0701',
        function: 'route_to_voicemail',
        args: { transcript: '', phone: CALLER, utc: '2026-11-23T22:01:02.000Z', recording_url: `${RECORDING('RE0001')}.mp3` },
      }),
    ]);
    expect(s.records).toEqual([
      expect.objectContaining({ call_id: 'CA0701', outcome: 'voicemail_left', intent_primary: 'voicemail', ended_reason: 'after_hours' }),
    ]);
    // Twilio sends the callback again, then the call's completed status: nothing happens twice.
    expect((await s.twilio.callback(callback, ready)).status).toBe(204);
    expect((await s.twilio.callback(`${PUBLIC_URL}/twilio/status`, { CallSid: 'CA0701', CallStatus: 'completed' })).status).toBe(204);
    expect(voicemailPosts(s)).toHaveLength(1);
    expect(s.records).toHaveLength(1);
    expect(s.ended.map((e) => e.call_id)).toEqual(['CA0701']);
  });

  it('every callback is signature-checked over its full URL: forged, or with its query changed → 403 and nothing routed', async () => {
    s = await bridgeStack((c) => (c.meta.business_hours_local = closedHours()));
    const answer = await s.twilio.placeCall(form('CA0702'));
    const callback = twimlAttr(answer.twiml, 'Record', 'recordingStatusCallback')!;
    const ready = { CallSid: 'CA0702', RecordingUrl: RECORDING('RE2'), RecordingStatus: 'completed' };
    expect((await s.twilio.callback(callback, ready, 'forged')).status).toBe(403);
    // Signed for one URL, sent to another (another caller's number in the query).
    const { getExpectedTwilioSignature } = await import('twilio/lib/webhooks/webhooks.js');
    const signature = getExpectedTwilioSignature('twilio-test-auth-token', callback, ready);
    expect((await s.twilio.callback(callback.replace('910000001', '910000009'), ready, signature)).status).toBe(403);
    for (const path of ['/twilio/voicemail/recorded', '/twilio/dial', '/twilio/status'])
      expect(
        (await s.twilio.callback(`${PUBLIC_URL}${path}`, { CallSid: 'CA0702', DialCallStatus: 'busy', CallStatus: 'completed' }, 'x'))
          .status,
      ).toBe(403);
    expect(voicemailPosts(s)).toEqual([]);
    expect(s.records).toEqual([]);
  });

  it('the monthly cap: no realtime connection; a short line offers voicemail; the record says monthly_cap, message or not', async () => {
    s = await bridgeStack(() => undefined, { statusGraceMs: 300 });
    await s.voice.rollup(1_000_000);
    const answer = await s.twilio.placeCall(form('CA0703'));
    expect(answer.stream).toBeNull();
    expect(answer.twiml).toContain('If you like, leave a message after the tone');
    expect(twimlAttr(answer.twiml, 'Record', 'recordingStatusCallback')).toContain('reason=monthly_cap');
    await leaveMessage(s, 'CA0703', answer.twiml);
    // A second caller hangs up without a message: the status callback writes the record.
    const quiet = await s.twilio.placeCall(form('CA0704'));
    expect((await s.twilio.callback(`${PUBLIC_URL}/twilio/status`, { CallSid: 'CA0704', CallStatus: 'completed' })).status).toBe(204);
    expect(quiet.stream).toBeNull();
    await s.endOf('CA0704');
    expect(s.realtime.attempts).toBe(0);
    expect(s.records.map((r) => [r.call_id, r.outcome, r.ended_reason])).toEqual([
      ['CA0703', 'voicemail_left', 'monthly_cap'],
      ['CA0704', 'abandoned', 'monthly_cap'],
    ]);
  });

  it('a realtime failure before the agent spoke: the live call is redirected to voicemail (network_issue); its record comes from the voicemail', async () => {
    s = await bridgeStack();
    s.realtime.refuse = true;
    const call = await s.twilio.call('CA0705');
    const update = await until<{ form: Record<string, string> }>(s.twilio.events, 'update');
    expect(s.realtime.attempts).toBe(2); // one more attempt, then voicemail
    expect(update.form.Twiml).toContain('having trouble on our side');
    expect(twimlAttr(update.form.Twiml, 'Record', 'recordingStatusCallback')).toContain('reason=network_issue');
    await until(call, 'closed');
    await leaveMessage(s, 'CA0705', update.form.Twiml);
    await s.endOf('CA0705');
    expect(s.records).toEqual([
      expect.objectContaining({ call_id: 'CA0705', outcome: 'voicemail_left', ended_reason: 'realtime_failure' }),
    ]);
    expect(voicemailPosts(s)).toHaveLength(1);
  });

  it('a realtime failure sent to voicemail whose stream Twilio ends before it answers the redirect: the record is still the voicemail', async () => {
    s = await bridgeStack();
    s.realtime.refuse = true;
    // Twilio ends the stream as it takes the redirect, and answers the request only after that.
    let answer!: () => void;
    s.twilio.hold = new Promise<void>((r) => (answer = r));
    s.twilio.events.once('update', (u: { callSid: string }) => s!.twilio.calls.get(u.callSid)?.hangUp());
    const call = await s.twilio.call('CA0718');
    const update = await until<{ form: Record<string, string> }>(s.twilio.events, 'update');
    expect(twimlAttr(update.form.Twiml, 'Record', 'recordingStatusCallback')).toContain('reason=network_issue');
    if (!call.closed) await until(call, 'closed');
    answer();
    await leaveMessage(s, 'CA0718', update.form.Twiml);
    await s.endOf('CA0718');
    expect(s.records).toEqual([
      expect.objectContaining({ call_id: 'CA0718', outcome: 'voicemail_left', ended_reason: 'realtime_failure' }),
    ]);
  });

  it('an opening line the model fails to say (response failed, no audio: out of quota) is a realtime failure: voicemail, not silence and a consent wait', async () => {
    s = await bridgeStack(undefined, { consentWaitMs: 300 });
    s.realtime.brain = () => null; // the responses are the test's own, below
    const call = await s.twilio.call('CA0716');
    const conn = await until<RtConn>(s.realtime, 'connection');
    const greet = await clientEvent(conn, 'response.create');
    const failed = { type: 'failed', error: { type: 'insufficient_quota', code: 'insufficient_quota' } };
    // The model's answer to the bridge's own line: failed before any audio, as the API reports it.
    conn.send({
      type: 'response.created',
      response: { id: 'resp_Q', status: 'in_progress', output: [], metadata: greet.response.metadata },
    });
    conn.send({
      type: 'response.done',
      response: { id: 'resp_Q', status: 'failed', status_details: failed, output: [], metadata: greet.response.metadata },
    });
    const update = await until<{ form: Record<string, string> }>(s.twilio.events, 'update');
    expect(update.form.Twiml).toContain('having trouble on our side');
    expect(twimlAttr(update.form.Twiml, 'Record', 'recordingStatusCallback')).toContain('reason=network_issue');
    expect(conn.events.filter((e: any) => e.type === 'response.create').map((e: any) => e.response.instructions.split(' ')[0])).toEqual([
      'Greet',
    ]);
    await until(call, 'closed');
    await leaveMessage(s, 'CA0716', update.form.Twiml);
    await s.endOf('CA0716');
    expect(s.logs.some((l) => l.includes('CA0716') && l.includes('not said (response failed: insufficient_quota)'))).toBe(true);
    expect(s.records).toEqual([
      expect.objectContaining({ call_id: 'CA0716', outcome: 'voicemail_left', ended_reason: 'realtime_failure' }),
    ]);
  });

  it('an opening line cancelled without audio because the caller declined first is no failure: the goodbye is said in full, then the hang-up', async () => {
    s = await bridgeStack();
    const goodbye = assistantAudio(3000);
    s.realtime.paceMs = 20; // the goodbye comes in real time (0.1 s of audio every 20 ms)
    s.realtime.heardQueue = [{ text: "No, I don't want to be recorded", logprob: -0.05 }];
    // The opening line is the test's own (below); the goodbye is the model's.
    s.realtime.brain = (ctx) => (ctx.instructions?.startsWith('Say this') ? { audio: goodbye, transcript: 'Understood.' } : null);
    const call = await s.twilio.call('CA0717');
    const conn = await until<RtConn>(s.realtime, 'connection');
    const greet = await clientEvent(conn, 'response.create');
    const metadata = greet.response.metadata;
    conn.send({ type: 'response.created', response: { id: 'resp_L', status: 'in_progress', output: [], metadata } });
    speak(call); // "No" before a word of the line came: a refusal counts at any time
    // The bridge cancels the line to say goodbye: the line's response ends cancelled, with no audio,
    // and only then is the goodbye asked for (the API refuses a response while another is active).
    await clientEvent(conn, 'response.cancel');
    conn.send({ type: 'response.done', response: { id: 'resp_L', status: 'cancelled', output: [], metadata } });
    await clientEvent(conn, 'response.create', (e: any) => e.response?.metadata?.bridge === 'closing');
    const update = await until<{ form: Record<string, string> }>(s.twilio.events, 'update');
    expect(update.form).toEqual({ Status: 'completed' });
    expect(call.receivedBytes).toBeGreaterThanOrEqual(goodbye.length);
    expect((await s.endOf('CA0717')).record).toMatchObject({ ended_reason: 'opted_out' });
    expect(s.logs.filter((l) => l.includes('not said'))).toEqual([]);
  });

  it('a realtime failure sent to voicemail, the caller gone without a message as the session ends: the status callback writes the record', async () => {
    s = await bridgeStack(undefined, { statusGraceMs: 300 });
    s.realtime.refuse = true;
    await s.twilio.call('CA0715');
    await until(s.twilio.events, 'update');
    // Twilio's completed comes while the session is still ending (waiting for its stop).
    expect((await s.twilio.callback(`${PUBLIC_URL}/twilio/status`, { CallSid: 'CA0715', CallStatus: 'completed' })).status).toBe(204);
    await s.endOf('CA0715');
    await new Promise<void>((r) => {
      const check = () => (s!.records.length ? r() : setTimeout(check, 20));
      check();
    });
    expect(s.records).toEqual([expect.objectContaining({ call_id: 'CA0715', outcome: 'abandoned', ended_reason: 'realtime_failure' })]);
  });

  it('a status callback with no live stream: its record is written once the grace has passed, though the wall clock was set back an hour meanwhile (an NTP step)', async () => {
    s = await bridgeStack(undefined, { statusGraceMs: 300 });
    s.realtime.refuse = true;
    const call = await s.twilio.call('CA0720');
    await until(s.twilio.events, 'update');
    if (!call.closed) await until(call, 'closed');
    await new Promise<void>((r) => {
      const check = () => (s!.bridge.liveCalls === 0 ? r() : setTimeout(check, 20));
      check();
    });
    expect((await s.twilio.callback(`${PUBLIC_URL}/twilio/status`, { CallSid: 'CA0720', CallStatus: 'completed' })).status).toBe(204);
    const wall = Date.now.bind(Date);
    vi.spyOn(Date, 'now').mockImplementation(() => wall() - 3_600_000);
    try {
      await until(s.events, 'record', () => true, 'the record');
    } finally {
      vi.restoreAllMocks();
    }
    expect(s.records).toEqual([expect.objectContaining({ call_id: 'CA0720', outcome: 'abandoned' })]);
  });

  it('a realtime failure sent to voicemail whose session has already ended when the status callback comes: the record still says realtime_failure', async () => {
    s = await bridgeStack(undefined, { statusGraceMs: 300 });
    s.realtime.refuse = true;
    const call = await s.twilio.call('CA0719');
    await until(s.twilio.events, 'update');
    if (!call.closed) await until(call, 'closed');
    await new Promise<void>((r) => {
      const check = () => (s!.bridge.liveCalls === 0 ? r() : setTimeout(check, 20));
      check();
    });
    expect((await s.twilio.callback(`${PUBLIC_URL}/twilio/status`, { CallSid: 'CA0719', CallStatus: 'completed' })).status).toBe(204);
    await until(s.events, 'record', () => true, 'the record');
    expect(s.records).toEqual([expect.objectContaining({ call_id: 'CA0719', outcome: 'abandoned', ended_reason: 'realtime_failure' })]);
  });

  it('after the agent spoke, a realtime failure still goes to a person, whose <Dial> names its action', async () => {
    s = await bridgeStack();
    s.realtime.brain = brain({});
    await s.twilio.call('CA0706');
    const conn = await until<any>(s.realtime, 'connection');
    await until(s.twilio.calls.get('CA0706')!, 'media');
    s.realtime.refuse = true;
    conn.drop();
    const update = await until<{ form: Record<string, string> }>(s.twilio.events, 'update');
    expect(update.form.Twiml).toContain('<Dial');
    expect(twimlAttr(update.form.Twiml, 'Dial', 'action')).toBe(`${PUBLIC_URL}/twilio/dial?from=%2B351910000001`);
    expect((await s.endOf('CA0706')).record).toMatchObject({ ended_reason: 'realtime_failure', escalated: true });
  });

  it('a transfer nobody takes (busy, no-answer, failed) ends in voicemail, never silence; one that connected hangs up after', async () => {
    s = await bridgeStack();
    s.realtime.brain = brain({
      turns: [{ call: { name: 'escalate_to_human', args: { reason: 'caller_request', transcript: '', phone: CALLER } } }],
    });
    const call = await s.twilio.call('CA0707');
    await until(call, 'media'); // the greeting
    speak(call);
    const update = await until<{ form: Record<string, string> }>(s.twilio.events, 'update');
    const action = twimlAttr(update.form.Twiml, 'Dial', 'action')!;
    // The answer's own fallback <Dial> names it too.
    const answer = await s.twilio.placeCall(form('CA0708'));
    expect(twimlAttr(answer.twiml, 'Dial', 'action')).toBe(action);
    for (const status of ['busy', 'no-answer', 'failed']) {
      const after = await s.twilio.callback(action, { CallSid: 'CA0707', DialCallStatus: status });
      expect(after.status).toBe(200);
      expect(after.body).toContain('nobody from our team is free');
      expect(twimlAttr(after.body, 'Record', 'recordingStatusCallback')).toBe(
        `${PUBLIC_URL}/twilio/voicemail/recording?reason=no_answer&from=%2B351910000001`,
      );
    }
    expect((await s.twilio.callback(action, { CallSid: 'CA0707', DialCallStatus: 'completed' })).body).toMatch(
      /<Response><Hangup\/><\/Response>$/,
    );
    // The record was written when the stream ended (the transfer); the voicemail still reaches the back office.
    expect((await s.endOf('CA0707')).record).toMatchObject({ escalated: true, ended_reason: 'caller_request' });
    const { stored } = await leaveMessage(
      s,
      'CA0707',
      (await s.twilio.callback(action, { CallSid: 'CA0707', DialCallStatus: 'busy' })).body,
    );
    expect(stored.status).toBe(204);
    expect(voicemailPosts(s)).toHaveLength(1);
    expect(s.records.filter((r) => r.call_id === 'CA0707')).toHaveLength(1);
  });

  it('a caller who asks, during the conversation, to leave a message is put through to <Record>; the back office keeps the recording', async () => {
    const office = await new BackOfficePeer(() => Date.now()).start();
    try {
      s = await bridgeStack(
        (c) => (c.functions.find((f) => f.name === 'route_to_voicemail')!.webhook = office.webhook('route_to_voicemail')),
      );
      // The model does as its instructions say: it calls the voicemail function with the arguments it declares.
      s.realtime.brain = brain({
        turns: [
          {
            call: {
              name: 'route_to_voicemail',
              args: { transcript: 'please pass on a message', phone: CALLER, utc: '2026-11-23T22:00:00Z' },
            },
          },
        ],
      });
      const call = await s.twilio.call('CA0720');
      await until(call, 'media'); // the greeting
      speak(call);
      const update = await until<{ form: Record<string, string> }>(s.twilio.events, 'update', (u: any) => u.callSid === 'CA0720');
      expect(update.form.Twiml).toContain('stored only so that we can call you back'); // the privacy notice
      expect(twimlAttr(update.form.Twiml, 'Record', 'recordingStatusCallback')).toBe(
        `${PUBLIC_URL}/twilio/voicemail/recording?reason=caller_request&from=%2B351910000001`,
      );
      if (!call.closed) await until(call, 'closed');
      office.recordings.set(RECORDING('RE0720'), Buffer.from('the caller speaking').toString('base64'));
      const { stored } = await leaveMessage(s, 'CA0720', update.form.Twiml, 'RE0720');
      expect(stored.status).toBe(204);
      await s.endOf('CA0720');
      const filed = office.deliveries.filter((d) => d.action === 'route_to_voicemail');
      expect(filed.map((d) => d.reply.ok)).toEqual([true]);
      // Filed by the recording callback with Twilio's recording, never with what the model said.
      expect(filed.map((d) => (d.body as { args: Record<string, unknown> }).args.recording_url)).toEqual([`${RECORDING('RE0720')}.mp3`]);
      expect(office.voicemails().map((f) => f.name)).toEqual(['CA0720.mp3']);
      expect(office.rows('tasks')).toEqual([expect.objectContaining({ type: 'Callback: Voicemail', phone: CALLER, call_id: 'CA0720' })]);
      expect(s.records).toEqual([
        expect.objectContaining({
          call_id: 'CA0720',
          outcome: 'voicemail_left',
          intent_primary: 'voicemail',
          ended_reason: 'caller_request',
        }),
      ]);
    } finally {
      await office.stop();
    }
  });
});

describe('phone bridge edges: the status callback', () => {
  it('a call answered whose stream never came: completed writes the record once (after a grace for a stream elsewhere); a late status or stream writes nothing more', async () => {
    s = await bridgeStack(() => undefined, { statusGraceMs: 300 });
    s.realtime.brain = brain({});
    const answer = await s.twilio.placeCall(form('CA0709'));
    const status = (CallStatus: string) => s!.twilio.callback(`${PUBLIC_URL}/twilio/status`, { CallSid: 'CA0709', CallStatus });
    expect((await status('completed')).status).toBe(204);
    await s.endOf('CA0709');
    expect(s.records).toEqual([expect.objectContaining({ call_id: 'CA0709', outcome: 'abandoned', ended_reason: 'caller_hangup' })]);
    expect((await status('completed')).status).toBe(204);
    // A stream that turns up late, for a call already over: nothing starts.
    const late = await s.twilio.openStream('CA0709', answer);
    expect(await until<{ code: number; reason: string }>(late, 'closed')).toEqual({ code: 1008, reason: 'this call already ended' });
    expect(s.realtime.attempts).toBe(0);
    expect(s.logs.filter((l) => l.includes('call CA0709: ended'))).toHaveLength(1); // the status callback's
    expect(s.records).toHaveLength(1);
    expect(s.ended.map((e) => e.call_id)).toEqual(['CA0709']);
  });

  it("a record written after the status callback's grace lasts as long as the call, not the wait", async () => {
    s = await bridgeStack(() => undefined, { statusGraceMs: 2000 });
    await s.twilio.placeCall(form('CA0717'));
    expect((await s.twilio.callback(`${PUBLIC_URL}/twilio/status`, { CallSid: 'CA0717', CallStatus: 'busy' })).status).toBe(204);
    await s.endOf('CA0717');
    const [record] = s.records;
    expect([record.ended_reason, record.telephony_minutes]).toEqual(['busy', 1]);
    expect(record.duration_s).toBeLessThan(1); // answered, then busy at once: not the 2 s waited for a stream elsewhere
  });

  it('a gateway shut down while a status callback waits out its grace still writes that record (within 5 s), once', async () => {
    s = await bridgeStack(); // the real 60 s grace
    await s.twilio.placeCall(form('CA0716'));
    expect((await s.twilio.callback(`${PUBLIC_URL}/twilio/status`, { CallSid: 'CA0716', CallStatus: 'no-answer' })).status).toBe(204);
    expect(s.records).toEqual([]); // waiting for a stream elsewhere, or a voicemail, to say more
    const t0 = performance.now();
    await s.bridge.close(); // Twilio sends the callback once: no instance would write the record later
    expect(performance.now() - t0).toBeLessThan(6000);
    expect(s.records.map((r) => [r.call_id, r.outcome, r.ended_reason])).toEqual([['CA0716', 'abandoned', 'no_answer']]);
  });

  it('a gateway shut down while its status callback waits for a call whose stream runs on another gateway leaves the record to that stream', async () => {
    s = await bridgeStack(); // the real 60 s grace
    await s.twilio.placeCall(form('CA0717'));
    // Another gateway's stream: its guard feed's batches are in the store.
    expect((await s.voice.events('CA0717', [{ type: 'user.audio_frame', ms: 20 }], { feed: 'elsewhere', n: 1 })).status).toBe(200);
    expect((await s.twilio.callback(`${PUBLIC_URL}/twilio/status`, { CallSid: 'CA0717', CallStatus: 'completed' })).status).toBe(204);
    const t0 = performance.now();
    await s.bridge.close();
    expect(performance.now() - t0).toBeLessThan(6000);
    // before: "abandoned" written after 5 s, and the other gateway's record (its booking) then lost
    expect(s.records).toEqual([]);
    // That session ends the call with what it achieved (it was waiting for a booking).
    await s.voice.end('CA0717', { outcome: 'booking', intent_primary: 'book', ended_reason: 'caller_hangup', responses_metered: true });
    expect(s.records.map((r) => [r.call_id, r.outcome])).toEqual([['CA0717', 'booking']]);
  });

  it('an answered call whose stream ends elsewhere during the grace keeps that record (its booking), not an abandoned one', async () => {
    s = await bridgeStack(() => undefined, { statusGraceMs: 5000 });
    // Seen from the store: the status callback's check that finds the record and stops.
    const get = s.voice.get.bind(s.voice);
    const checks = new EventEmitter();
    s.voice.get = async (id) => {
      const call = await get(id);
      checks.emit('checked', call);
      return call;
    };
    await s.twilio.placeCall(form('CA0714'));
    expect((await s.twilio.callback(`${PUBLIC_URL}/twilio/status`, { CallSid: 'CA0714', CallStatus: 'completed' })).status).toBe(204);
    expect(s.records).toEqual([]); // not yet: the stream may be ending on another instance
    // Another instance's session ends the call with what it achieved.
    await s.voice.end('CA0714', { outcome: 'booking', intent_primary: 'book', ended_reason: 'caller_hangup', responses_metered: true });
    await until(checks, 'checked', (c: any) => c?.call_id === 'CA0714' && !!c.record, 'the status callback to see the record');
    expect(s.records.map((r) => [r.call_id, r.outcome])).toEqual([['CA0714', 'booking']]);
  });

  it('busy, failed, no-answer and canceled close a live session with that reason', async () => {
    s = await bridgeStack();
    s.realtime.brain = brain({ greeting: { audio: assistantAudio(200), transcript: 'Hi.' } });
    for (const [sid, st, reason] of [
      ['CA0710', 'failed', 'failed'],
      ['CA0711', 'no-answer', 'no_answer'],
      ['CA0712', 'canceled', 'canceled'],
      ['CA0713', 'busy', 'busy'],
    ]) {
      await s.twilio.call(sid);
      await until(s.realtime, 'connection');
      expect((await s.twilio.callback(`${PUBLIC_URL}/twilio/status`, { CallSid: sid, CallStatus: st })).status).toBe(204);
      expect((await s.endOf(sid)).record).toMatchObject({ call_id: sid, ended_reason: reason });
    }
  });
});

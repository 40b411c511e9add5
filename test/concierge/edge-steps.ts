// The launch checklist's steps on the call's edges, driven as Twilio drives them, through the
// gateway's public surface only: 5 the consent flow with an opt-out, 8 an after-hours call that
// leaves a recording. The drill reads the TwiML the gateway answers and follows it: it posts the
// recording callback the TwiML names (signed, as Twilio signs it) and checks what reached the
// back office.
import { getExpectedTwilioSignature } from 'twilio/lib/webhooks/webhooks.js';
import { voiced } from '../voice/peers/mulaw';
import { pass, type Row } from './config-steps';
import { DrillCall, drillBrain, eventually, nextInstant, openHours } from './drill-calls';
import { twimlAttr } from '../voice/peers/twilio-peer';
import { until } from '../voice/peers/wait';
import { ACCOUNT_SID, AUTH_TOKEN, type DrillStack } from './drill-stack';

const DAY_MS = 86_400_000;

/** POSTs a form to a URL the gateway named in its TwiML, signed over that URL as Twilio signs it. */
async function twilioPost(s: DrillStack, url: string, form: Record<string, string>): Promise<{ status: number; twiml: string }> {
  const u = new URL(url);
  const res = await fetch(`${s.gateway}${u.pathname}${u.search}`, {
    method: 'POST',
    headers: {
      'content-type': 'application/x-www-form-urlencoded',
      'x-twilio-signature': getExpectedTwilioSignature(AUTH_TOKEN, url, form),
    },
    body: new URLSearchParams(form).toString(),
  });
  return { status: res.status, twiml: await res.text() };
}

const shortTwiml = (twiml: string) => twiml.replace(/^<\?xml[^>]*>/, '').slice(0, 160);

export async function afterHoursStep(s: DrillStack): Promise<Row> {
  const step = '8. An after-hours call leaves a recording and a next-day task';
  const target = `TwiML with the privacy notice and <Record>; its signed recordingStatusCallback → route_to_voicemail → voicemail/<call_id>.mp3 and a 'Callback: Voicemail' task due 24 h later`;
  const fail = (measured: string): Row => ({ step, measured, target, status: 'FAIL' });
  if (!s.config.guardrails.after_hours_to_voicemail)
    return fail('guardrails.after_hours_to_voicemail is false: after-hours calls are answered');
  const closed = nextInstant(s.config, false);
  if (closed === null)
    return fail(`meta.business_hours_local "${s.config.meta.business_hours_local}" is never closed: no call is after hours`);
  s.clock.moveTo(closed);
  const callSid = 'CAdrill08night';
  const from = '+351910000008';
  const answer = await s.twilio.placeCall({
    CallSid: callSid,
    AccountSid: ACCOUNT_SID,
    From: from,
    To: '+351210000000',
    CallStatus: 'ringing',
    FromCountry: 'PT',
  });
  const callback = twimlAttr(answer.twiml, 'Record', 'recordingStatusCallback');
  const said = /<Say\b[^>]*>[^<]+<\/Say>[\s\S]*<Record\b/.test(answer.twiml);
  if (answer.status !== 200 || !callback)
    return fail(`answer ${answer.status}: no <Record> with a recordingStatusCallback in the TwiML (${shortTwiml(answer.twiml)}…)`);

  // Twilio has recorded the caller's message: it posts the recording's status to the callback.
  const recordingSid = 'REdrill0000000000000000000000008';
  const recordingUrl = `https://api.twilio.com/2010-04-01/Accounts/${ACCOUNT_SID}/Recordings/${recordingSid}`;
  const message = voiced(3000, 120).toString('base64');
  s.backOffice.recordings.set(recordingUrl, message);
  // The caller finishes: Twilio asks the <Record action> (if any) what comes next, then posts the
  // recording's status to the recordingStatusCallback once the file is ready.
  const action = twimlAttr(answer.twiml, 'Record', 'action');
  const recorded = {
    AccountSid: ACCOUNT_SID,
    CallSid: callSid,
    RecordingSid: recordingSid,
    RecordingUrl: recordingUrl,
    RecordingDuration: '3',
  };
  const then = action
    ? await twilioPost(s, action, { ...recorded, From: from, To: '+351210000000', CallStatus: 'in-progress', Digits: 'hangup' })
    : null;
  const status = await twilioPost(s, callback, {
    ...recorded,
    RecordingStatus: 'completed',
    RecordingChannels: '1',
    RecordingSource: 'RecordVerb',
    RecordingStartTime: new Date(s.clock.now()).toUTCString(),
  });
  const mine = () =>
    s.backOffice.deliveries.find((d) => d.action === 'route_to_voicemail' && (d.body as { call_id?: string })?.call_id === callSid);
  await eventually(() => mine() !== undefined && mine()!.reply.ok === true, 15_000);
  const delivery = mine();
  const args = (delivery?.body as { args?: Record<string, unknown> } | undefined)?.args ?? {};
  const file = s.backOffice.voicemails().find((f) => f.name === `${callSid}.mp3`);
  const task = s.backOffice.rows('tasks').find((t) => t.call_id === callSid);
  const dueIn = task ? Date.parse(String(task.due_at)) - Date.parse(String(task.created_at)) : NaN;
  const ok =
    said &&
    (then === null || then.status === 200) &&
    status.status < 300 &&
    delivery?.reply.ok === true &&
    args.phone === from &&
    file?.content === message &&
    task?.type === 'Callback: Voicemail' &&
    dueIn === DAY_MS;
  return {
    step,
    measured: [
      `${new Date(closed).toISOString()} (closed): ${said ? 'privacy notice, ' : 'NO privacy notice, '}<Record>`,
      then ? `its action answered ${then.status} (${shortTwiml(then.twiml)})` : 'no action',
      `recordingStatusCallback ${new URL(callback).pathname} answered ${status.status}`,
      delivery
        ? `route_to_voicemail sent (phone ${String(args.phone)}, utc ${String(args.utc ?? '?')}) → ${delivery.reply.ok ? 'ok' : `refused: ${String(delivery.reply.error)}`}`
        : 'route_to_voicemail NEVER sent',
      file ? `voicemail/${file.name} (${file.content === message ? 'the recording' : 'NOT the recording'})` : 'no recording saved',
      task ? `task '${String(task.type)}' due ${String(task.due_at)} (${(dueIn / 3_600_000).toFixed(1)} h later)` : 'no task',
    ].join('; '),
    target,
    status: pass(ok),
  };
}

/** The `response.create` instructions the gateway sent the model, in order. */
const asked = (call: DrillCall) =>
  call.conn.events
    .filter((e) => e.type === 'response.create')
    .map((e: any) => ({ text: String(e.response?.instructions ?? ''), bridge: e.response?.metadata?.bridge }));

/** Resolves once `n` of the bridge's own responses of this purpose are done, and heard. */
async function bridgeSaid(call: DrillCall, purpose: string, n: number): Promise<void> {
  let done = 0;
  await until(
    call.conn,
    'server',
    (e: any) => e.type === 'response.done' && e.response?.metadata?.bridge === purpose && ++done >= n,
    `${purpose} line ${n}`,
  );
  await call.heard();
}

export async function consentStep(s: DrillStack): Promise<Row> {
  openHours(s);
  const { opening_line: line, retry_if_no_ack: retry, max_retries: retries } = s.config.consent;
  const repeats = retry && retries > 0;
  s.realtime.heardQueue = [
    ...(repeats ? [{ text: 'sorry, who is this?', logprob: -0.05 }] : []),
    { text: 'no, I do not want this call recorded', logprob: -0.05 },
  ];
  s.realtime.brain = drillBrain({});
  const phone = '+351910000005';
  const call = await DrillCall.place(s, 'CAdrill05optout', phone);
  await bridgeSaid(call, 'consent', 1);
  const first = asked(call)[0];
  if (repeats) {
    const again = bridgeSaid(call, 'consent', 1); // the next consent line done from now on
    call.speak(); // unclear
    await again;
  }
  call.speak(); // declined
  const summary = await call.ended();
  const told = asked(call).find((a) => a.bridge === 'closing')?.text ?? '';
  const completed = call.updates().some((u) => u.Status === 'completed');
  const tag = () =>
    s.backOffice.deliveries.find(
      (d) => (d.body as { call_id?: string })?.call_id === call.callSid && (d.body as any)?.args?.opted_out === true,
    );
  await eventually(() => tag() !== undefined, 10_000);
  const contact = s.backOffice.rows('contacts').find((c) => c.phone === phone);
  // Lines the model started, not the bridge's requests: one the API refused (busy) and the bridge asked again is no second line.
  const lines = call.conn.served.filter(
    (e) => e.type === 'response.created' && (e.response as { metadata?: { bridge?: string } } | undefined)?.metadata?.bridge === 'consent',
  ).length;
  const ok =
    first?.text.includes(line) === true &&
    first.bridge === 'consent' &&
    lines === (repeats ? 2 : 1) &&
    summary.ended_reason === 'opted_out' &&
    told !== '' &&
    completed &&
    tag()?.reply.ok === true &&
    contact?.opted_out === true;
  return {
    step: '5. The consent flow: an opt-out tags the contact',
    measured: [
      `first line the caller heard: ${first?.text.includes(line) ? 'the consent line' : `NOT the consent line (${first?.text.slice(0, 60) ?? 'nothing'})`}`,
      repeats
        ? `an unclear answer → the line said ${lines} time(s) in all (max_retries ${retries})`
        : `no retry configured (retry_if_no_ack ${retry}, max_retries ${retries}): the line said ${lines} time(s)`,
      `"no, I do not want this call recorded" → told ${told ? `"${/"(.*)"$/s.exec(told)?.[1] ?? told}"` : 'NOTHING'}, ${completed ? 'then Twilio Status=completed' : 'the call NOT completed'}, ended_reason ${summary.ended_reason}`,
      tag()
        ? `back office: ${tag()!.action} with opted_out → ${tag()!.reply.ok ? 'ok' : `refused: ${String(tag()!.reply.error)}`}`
        : 'back office: NOTHING tagged',
      `contact ${phone}: opted_out ${String(contact?.opted_out ?? 'no row')}`,
    ].join('; '),
    target:
      'the consent line first (said again once for an unclear answer when retry_if_no_ack); a decline is told, the call completed (opted_out), the contact tagged opted_out',
    status: pass(ok),
  };
}

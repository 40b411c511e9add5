// The launch checklist's steps that take phone calls through the bridge: 4 both caps, 6 the
// workflow webhook replayed, 7 low confidence. Each places its own call at an open hour.
import { guardConfig } from '../../gateway/src/voice/spend-guard';
import type { Reply, RtConn } from '../voice/peers/realtime-peer';
import { assistantAudio } from '../voice/peers/script';
import { pass, type Row } from './config-steps';
import { ANSWER_BOUND, dialed, DrillCall, drillBrain, eventually, openHours } from './drill-calls';
import type { DrillStack } from './drill-stack';

/** The most output audio one realtime response can carry (its `max_output_tokens` ceiling). */
const MAX_ANSWER_TOKENS = 4096;

/** The caller agrees to the consent line, then is heard clearly every turn (so no confidence rule interferes with the caps). */
function clearCaller(s: DrillStack): void {
  s.realtime.heardQueue = [
    { text: 'yes, that is fine', logprob: -0.001 },
    ...Array.from({ length: ANSWER_BOUND }, () => ({ text: 'and can you tell me more', logprob: -0.001 })),
  ];
}

/**
 * The usage of the largest answer a realtime model can give: MAX_ANSWER_TOKENS of output audio,
 * and as input the caller's audio so far plus every earlier answer (the conversation is re-sent
 * to the model each turn), as the Realtime API reports it.
 */
function largestAnswer(conn: RtConn, earlier: number): Reply['usage'] {
  const input = Math.round(conn.inboundBytes / 800) + earlier * MAX_ANSWER_TOKENS;
  return {
    total_tokens: input + MAX_ANSWER_TOKENS,
    input_tokens: input,
    output_tokens: MAX_ANSWER_TOKENS,
    input_token_details: { audio_tokens: input, text_tokens: 0, cached_tokens: 0 },
    output_token_details: { audio_tokens: MAX_ANSWER_TOKENS, text_tokens: 0 },
  };
}

const usd = (n: number | null | undefined) => (typeof n === 'number' ? `${n.toFixed(4)} USD` : '? USD');

/** 4a: the largest answers a model can give, until the guard disconnects (or the call is over another way). */
async function perCallCap(s: DrillStack): Promise<{ ok: boolean; text: string }> {
  const cap = s.config.spend_guard.per_call_usd_cap;
  let answers = 0;
  clearCaller(s);
  s.realtime.brain = drillBrain({}, (r, ctx) =>
    ctx.instructions?.startsWith('Say this') ? r : { ...r, usage: largestAnswer(ctx.conn, answers++) },
  );
  const call = await DrillCall.place(s, 'CAdrill04cost', '+351910000004');
  const { summary } = await call.drive(ANSWER_BOUND);
  const completed = call.updates().some((u) => u.Status === 'completed');
  const cost = summary.estUsd_at_disconnect ?? summary.record?.est_audio_cost_usd;
  if (summary.ended_reason === 'per_call_cap' && completed)
    return {
      ok: true,
      text: `per_call_usd_cap ${cap}: disconnected after ${answers} answer(s) at ${usd(cost)} (closing line, then Twilio Status=completed; ended_reason per_call_cap)`,
    };
  const why = !s.config.spend_guard.disconnect_when_exceeded
    ? 'disconnect_when_exceeded is false, so the call went on'
    : summary.ended_reason === 'turn_cap'
      ? `the turn cap ended the call first: a cap this high can never fire within a call the turn cap allows`
      : `not reached within a ${ANSWER_BOUND}-answer call: a cap this high can never fire`;
  return {
    ok: false,
    text: `per_call_usd_cap ${cap}: NOT disconnected; ${answers} of the largest answers cost ${usd(cost)}, ended ${summary.ended_reason}: ${why}`,
  };
}

/** 4b: short answers, one per caller turn, until the guard escalates at the turn cap. */
async function turnCap(s: DrillStack): Promise<{ ok: boolean; text: string }> {
  const cap = guardConfig(s.config).maxTurns;
  if (cap > ANSWER_BOUND)
    return { ok: false, text: `max_turns ${cap}: NOT reached: more than a ${ANSWER_BOUND}-answer call, so it can never fire` };
  clearCaller(s);
  s.realtime.brain = drillBrain({});
  const call = await DrillCall.place(s, 'CAdrill04turns', '+351910000014');
  const { summary } = await call.drive(ANSWER_BOUND);
  const redirect = call.updates().find((u) => u.Twiml);
  const ok = summary.ended_reason === 'turn_cap' && summary.record?.escalated === true && redirect !== undefined;
  return {
    ok,
    text: ok
      ? `max_turns ${cap}: escalated at answer ${summary.record?.turns} (Twilio redirected to ${dialed(redirect?.Twiml)}; ended_reason turn_cap)`
      : `max_turns ${cap}: NOT reached; the call ended ${summary.ended_reason} after ${summary.record?.turns ?? '?'} answer(s)`,
  };
}

export async function capsStep(s: DrillStack): Promise<Row> {
  openHours(s);
  const spend = await perCallCap(s);
  const turns = await turnCap(s);
  return {
    step: '4. Both caps fire: per_call_usd_cap disconnects, max_turns escalates',
    measured: `${spend.text}; ${turns.text}`,
    target: `each cap fires within a ${ANSWER_BOUND}-answer call whose answers are as large as a realtime response can be (${MAX_ANSWER_TOKENS} output audio tokens)`,
    status: pass(spend.ok && turns.ok),
  };
}

/** Arguments for a function, by the names the configuration gives it. */
function argsFor(s: DrillStack, fn: string, phone: string): Record<string, string> {
  const day = new Date(s.clock.now() + 2 * 86_400_000).toISOString().slice(0, 10);
  const known: Record<string, string> = {
    name: 'Drill Caller',
    phone,
    service: s.config.intents.find((i) => i.id === 'qualify')?.on_match.qualify_rules?.service_in[0] ?? 'drill',
    date: day,
    time: '10:00',
    location: 'concierge drill',
    notes: 'booked by npm run concierge:drill',
  };
  const names = s.config.functions.find((f) => f.name === fn)?.args ?? [];
  return Object.fromEntries(names.map((n) => [n, known[n] ?? 'drill']));
}

export async function replayStep(s: DrillStack): Promise<Row> {
  openHours(s);
  const phone = '+351910000006';
  const args = argsFor(s, 'book_slot', phone);
  s.realtime.heardQueue = [
    { text: 'I would like to book an appointment', logprob: -0.05 },
    { text: 'yes please book it', logprob: -0.05 },
  ];
  s.realtime.brain = drillBrain({
    turns: [{ call: { name: 'book_slot', args } }, { call: { name: 'book_slot', args: { ...args } } }],
    afterOutput: { audio: assistantAudio(400), transcript: 'You are booked.' },
  });
  const before = s.backOffice.bookings();
  const call = await DrillCall.place(s, 'CAdrill06book', phone);
  const outputs: string[] = [];
  call.conn.on(
    'client',
    (e: any) => e.type === 'conversation.item.create' && e.item?.type === 'function_call_output' && outputs.push(e.item.output),
  );
  await call.greeted();
  for (let turn = 1; turn <= 2; turn++) {
    call.speak();
    await call.answered(1 + 2 * turn); // the function call, then the answer with its output
    await call.heard();
  }
  call.call.hangUp();
  const { record } = await call.ended();
  const sent = s.backOffice.deliveries.filter(
    (d) => d.action === 'book_slot' && (d.body as { call_id?: string })?.call_id === call.callSid,
  );
  const replies = sent.length ? [await s.backOffice.replay(sent[0]), await s.backOffice.replay(sent[0])] : [];
  const booked = s.backOffice.bookings() - before;
  const ids = new Set([...sent.map((d) => d.reply), ...replies].map((r) => String(r.booking_id)));
  const ok =
    sent.length === 1 &&
    replies.every((r) => r.replayed === true) &&
    booked === 1 &&
    ids.size === 1 &&
    outputs.length === 2 &&
    outputs[0] === outputs[1];
  return {
    step: '6. The workflow webhook replayed twice yields one booking',
    measured: `the model called book_slot twice → the back office reached ${sent.length} time(s), the same answer both times: ${outputs.length === 2 && outputs[0] === outputs[1]}; that webhook replayed twice → replayed: ${replies.map((r) => r.replayed).join(', ') || 'not sent'}; calendar events: ${booked}, booking id(s) ${[...ids].join(', ')}; call outcome ${record?.outcome}`,
    target: '1 booking, one booking id; every replay answered replayed: true',
    status: pass(ok),
  };
}

export async function lowConfidenceStep(s: DrillStack): Promise<Row> {
  openHours(s);
  const guard = guardConfig(s.config);
  const confidence = Math.max(guard.minConfidence / 2, 1e-6);
  s.realtime.heardQueue = [
    { text: 'mm yes', logprob: Math.log(confidence) },
    { text: 'uh what was it', logprob: Math.log(confidence) },
  ];
  s.realtime.brain = drillBrain({});
  const call = await DrillCall.place(s, 'CAdrill07unsure', '+351910000007');
  await call.greeted();
  call.speak();
  await call.answered(2);
  const afterFirst = call.updates().length;
  await call.heard();
  call.speak();
  const escalated = await eventually(() => call.updates().length > afterFirst, 10_000);
  if (!escalated) call.call.hangUp();
  const summary = await call.ended();
  const redirect = call.updates().find((u) => u.Twiml);
  const ok = afterFirst === 0 && escalated && summary.ended_reason === 'low_confidence' && redirect !== undefined;
  return {
    step: '7. Low confidence twice escalates',
    measured: `two transcripts at confidence ${confidence.toFixed(3)} (min_confidence ${guard.minConfidence}): after the first ${afterFirst ? 'ESCALATED already' : 'the call went on'}; after the second ${escalated ? `Twilio redirected (${dialed(redirect?.Twiml)})` : 'NOT escalated'}; ended_reason ${summary.ended_reason}`,
    target: 'not after one low-confidence transcript; escalated to a person after the second, reason low_confidence',
    status: pass(ok),
  };
}

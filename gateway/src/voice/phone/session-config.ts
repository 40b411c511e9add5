/**
 * The realtime session, built from concierge.json (GA interface: `session.type: "realtime"`,
 * formats under `audio.input` / `audio.output`):
 *   - G.711 µ-law both ways (`audio/pcmu`): Twilio's own format, so bytes pass through untouched;
 *   - server VAD when `guardrails.vad_enabled` (it answers at the end of the caller's turn and
 *     cancels its answer when the caller speaks over it);
 *   - input transcription, with log-probabilities (`include`), for the guard's confidence rules;
 *   - instructions from the configuration: consent line first, today's date in `meta.timezone`
 *     and the date and time forms the functions take, the five intents, the qualify
 *     questions and rules, the pricing message, the privacy notice, the languages, how keys the
 *     caller presses and a caller turn not transcribed are given;
 *   - every `functions` entry as a function tool whose parameters are its `args`;
 *   - `max_output_tokens`: what is left of the call's budget at the dearer output price, audio or text (outputAllowance).
 * The caller's words never go into instructions; only the operator's configuration does.
 */
import type { RealtimeFunctionTool, RealtimeSessionCreateRequest, SessionUpdateEvent } from 'openai/resources/realtime/realtime';
import { localMoment } from '../business-hours';
import type { Concierge } from '../config';
import { NOT_TRANSCRIBED } from './caller-transcript';

/** The transcription model: one that reports log-probabilities (whisper-1 does not). */
export const TRANSCRIBE_MODEL = 'gpt-4o-mini-transcribe';

function intentLines(c: Concierge): string[] {
  const lines: string[] = [];
  for (const intent of c.intents) {
    const m = intent.on_match;
    const words = `(the caller says things like: ${intent.triggers.join(', ')})`;
    switch (intent.id) {
      case 'book':
      case 'reschedule': {
        const fn = c.functions.find((f) => f.name === m.call);
        const action = intent.id === 'book' ? 'wants to book an appointment' : 'wants to move an existing booking';
        lines.push(
          `- ${intent.id}: the caller ${action} ${words}. Collect ${fn?.args.join(', ') ?? 'the details'}` +
            `${m.confirm_readback ? ', read them back and get a yes' : ''}, then call ${m.call}.`,
        );
        break;
      }
      case 'qualify': {
        const rules = m.qualify_rules
          ? ` We serve only these services: ${m.qualify_rules.service_in.join(', ')}; and only these areas: ${m.qualify_rules.geo_whitelist.join(', ')}. Outside them, say so politely.`
          : '';
        lines.push(
          `- qualify: the caller wants a quote ${words}. Ask, one at a time: ${(m.ask ?? []).join(' ')}${rules} Then call ${m.call ?? 'create_lead'}.`,
        );
        break;
      }
      case 'pricing_deflection':
        lines.push(
          `- pricing_deflection: the caller asks about prices ${words}. Say: "${m.say ?? ''}"` +
            `${m.link ? ` The link is ${m.link}.` : ''}` +
            `${m.offer_callback ? ` Offer a call back within ${m.callback_minutes_window ?? 15} minutes.` : ''}`,
        );
        break;
      case 'voicemail':
        lines.push(
          `- voicemail: the caller wants to leave a message. Do not take it yourself: tell them you are putting them through to record it, then call ${m.call ?? 'route_to_voicemail'}; they hear ${m.privacy_notice ? 'that the message is recorded and stored to call them back, then ' : ''}a tone.`,
        );
        break;
    }
  }
  return lines;
}

/**
 * Today's date where the business is, and the forms the back office takes (YYYY-MM-DD, HH:MM in
 * its time zone): a model told neither guesses the year of "tomorrow at 10".
 */
function dateLine(c: Concierge, now: Date): string {
  return (
    `It is now ${localMoment(now, c.meta.timezone)} where the business is (${c.meta.timezone}). ` +
    'Work out the dates the caller says ("tomorrow", "next Tuesday") from that, and say the date back with its day. ' +
    'Give a function dates as YYYY-MM-DD and times as HH:MM (24-hour), in that time zone. ' +
    `The business is open ${c.meta.business_hours_local} (${c.meta.timezone}): book and move appointments only to times it is open.`
  );
}

function buildInstructions(c: Concierge, callerNumber: string | null, now: Date): string {
  const alt = c.meta.alt_languages.length ? ` If the caller speaks ${c.meta.alt_languages.join(' or ')}, answer in that language.` : '';
  const dial = c.functions.find((f) => f.dial);
  return [
    `You answer the phone for this business after hours. Speak ${c.meta.primary_language}.${alt} Keep every answer short: this is a phone call.`,
    `Your first words on the call are exactly: "${c.consent.opening_line}" Then wait for the caller to agree before going on.`,
    dateLine(c, now),
    'You handle exactly five intents:',
    ...intentLines(c),
    'For anything else, say politely that you can only help with bookings, changes, quotes, prices and messages.',
    dial ? `If the caller asks for a person, call ${dial.name}.` : '',
    'Keys the caller presses on the phone come to you as "(keys pressed: 427)": take them as what the caller typed, such as a booking number.',
    'An entry of more than 32 keys comes cut, as "(keys pressed: 123… cut: 40 keys pressed, only the first 32 kept)": do not use it; tell the caller it was too long and ask for it again.',
    `A turn of the caller whose words could not be transcribed comes as "${NOT_TRANSCRIBED}" (after a break in the line): you do not know what they said; if you need it, ask them to say it again.`,
    callerNumber ? `The caller's number is ${callerNumber}; confirm it rather than asking for it.` : '',
  ]
    .filter(Boolean)
    .join('\n');
}

function tools(c: Concierge): RealtimeFunctionTool[] {
  return c.functions.map((f) => {
    const purpose = f.dial
      ? 'Transfer the caller to a person.'
      : f.static_url
        ? 'Get the link to the pricing page.'
        : `Run ${f.name.replace(/_/g, ' ')}.`;
    return {
      type: 'function',
      name: f.name,
      description: `${purpose}${f.args.length ? ` Arguments: ${f.args.join(', ')}.` : ''}`,
      parameters: {
        type: 'object',
        properties: Object.fromEntries(f.args.map((a) => [a, { type: 'string' }])),
        additionalProperties: false,
      },
    };
  });
}

function turnDetection(c: Concierge, respond: boolean) {
  if (!c.guardrails.vad_enabled) return null;
  return {
    type: 'server_vad' as const,
    threshold: 0.5,
    prefix_padding_ms: 300,
    silence_duration_ms: 500,
    create_response: respond,
    // Until the consent line is heard to its end the model's VAD neither answers nor cuts it: a caller who
    // speaks first or over it still hears it whole (the bridge's own barge-in skips it too).
    interrupt_response: respond,
  };
}

/**
 * The model takes turns by itself from now on (`on`), or not while one of the bridge's lines is
 * said: a partial `session.update` with the turn detection only (the Realtime API updates the
 * fields present); null when VAD is off.
 */
export function turnTaking(c: Concierge, on: boolean): SessionUpdateEvent | null {
  const td = turnDetection(c, on);
  return td ? { type: 'session.update', session: { type: 'realtime', audio: { input: { turn_detection: td } } } } : null;
}

/** The most output tokens the Realtime API lets one response have (`max_output_tokens` takes 1 to 4096, or "inf"). */
const MOST_OUTPUT_TOKENS = 4096;

/**
 * How many output tokens one response may have, from what is left of the call's budget
 * (`per_call_usd_cap` less what the call cost so far) at the dearer of `audio_out_per_million` and
 * `text_out_per_million` (the limit counts both kinds of output token), rounded up: a response
 * whose output is all at that rate reaches the cap (by at most one token's price), so the guard
 * ends the call at its response.done; none can run past it by a long answer. At least 1 (the
 * API's least); at most 4096 (its most). With `disconnect_when_exceeded` false the call goes on
 * past the cap, so answers are not cut: "inf", the API's default.
 */
export function outputAllowance(c: Concierge, spentUsd: number): number | 'inf' {
  const g = c.spend_guard;
  if (!g.disconnect_when_exceeded) return 'inf';
  const rate = Math.max(g.audio_out_per_million, g.text_out_per_million ?? 0);
  const tokens = Math.ceil(((g.per_call_usd_cap - spentUsd) * 1e6) / rate);
  return Math.min(MOST_OUTPUT_TOKENS, Math.max(1, Number.isFinite(tokens) ? tokens : MOST_OUTPUT_TOKENS));
}

/** The session's output allowance changed (the call spent): a partial `session.update` with it alone. */
export function outputLimit(maxOutputTokens: number | 'inf'): SessionUpdateEvent {
  return { type: 'session.update', session: { type: 'realtime', max_output_tokens: maxOutputTokens } };
}

/** ISO 639-1 part of a BCP 47 tag ("pt-PT" → "pt"), the transcription's language hint. */
const iso639 = (tag: string) => tag.split('-')[0].toLowerCase();

/**
 * `respond`: whether the server VAD answers the caller's turns by itself. Off until the opening
 * line is said, so nothing the model says comes before it (a caller who speaks first is heard, not
 * answered); on from then on.
 */
export function sessionUpdate(
  c: Concierge,
  callerNumber: string | null,
  opts: { respond: boolean; maxOutputTokens?: number | 'inf' } = { respond: true },
): SessionUpdateEvent {
  const session: RealtimeSessionCreateRequest = {
    type: 'realtime',
    model: c.meta.model,
    output_modalities: ['audio'],
    max_output_tokens: opts.maxOutputTokens ?? outputAllowance(c, 0),
    instructions: buildInstructions(c, callerNumber, new Date()),
    audio: {
      input: {
        format: { type: 'audio/pcmu' },
        // A hint only when the caller is expected to speak one language.
        transcription: { model: TRANSCRIBE_MODEL, ...(c.meta.alt_languages.length ? {} : { language: iso639(c.meta.primary_language) }) },
        turn_detection: turnDetection(c, opts.respond),
      },
      output: { format: { type: 'audio/pcmu' } },
    },
    include: ['item.input_audio_transcription.logprobs'],
    tools: tools(c),
    tool_choice: 'auto',
  };
  return { type: 'session.update', session };
}

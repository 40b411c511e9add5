/**
 * The per-call spend guard, a pure module: state in, event in, state and verdict out.
 * Usable inside a voice server as it is, and behind the gateway's /v1/voice/* endpoints.
 *
 * Per call: inputMs, outputMs, turns, estUsd, ttfbBreaches (all from 0).
 *   user.audio_frame / assistant.audio_frame  add their duration (empty, non-positive or over an hour: refused),
 *                                             and their cost while the call is billed by the estimate
 *   assistant.response.start                  ttfb over latency_budget_s → one more breach
 *   assistant.response.done                   one more turn, cost recomputed, then the checks in
 *                                             this order, first match wins:
 *       turns ≥ max_turns            → escalate   turn_cap
 *       estUsd ≥ per_call_usd_cap    → disconnect per_call_cap (estUsd_at_disconnect kept)
 *       ttfbBreaches ≥ 2             → escalate   latency
 *   (past the cap with disconnect_when_exceeded false the call goes on: the escalations still run)
 *   transcript (user)                         confidence and escalation rules (below)
 *   transcription.done                        the transcription model's cost of a caller turn, added
 *
 * Cost: the concierge's estimate, input tokens = inputMs / 100 and output tokens = outputMs / 50, at
 * the per-million audio prices. When response.done carries the model's reported usage (audio
 * tokens), the call is billed from the sum of those instead and the estimate is kept beside it:
 * the estimate undercounts, because a realtime conversation is re-sent to the model every turn.
 * Cached input audio tokens are billed at the cached price when the configuration has one. The
 * usage's text tokens (the instructions and the conversation's text, re-read by every response;
 * the words of the answer) are billed at the text prices when the configuration has them; without
 * them they add nothing here, and the meter marks such a response UNPRICED (usageCost).
 * A response without usage is billed the estimate of the audio since the response before it.
 * The caller's speech is transcribed by another model, billed apart: each transcription's cost
 * (priced by the voice server) is added to the call's cost, and the next response.done checks it.
 * Every count and duration is checked where it enters (finite, within bounds; the error names the
 * field), so the cost is always a finite number >= 0.
 */
import { cutText } from '../../../schema/cut-text';
import { roundUsd } from '../../../schema/spend-cap';
import type { Concierge, IntentId } from './config';
import { matchIntent, normalise } from './intents';

type Action = 'continue' | 'escalate' | 'disconnect';
type Reason = 'turn_cap' | 'per_call_cap' | 'latency' | 'low_confidence' | 'frustration_markers' | 'caller_request';

export interface CallState {
  inputMs: number;
  outputMs: number;
  turns: number;
  estUsd: number;
  ttfbBreaches: number;
  /** The estimate from audio durations, kept beside the billed figure. */
  estUsdFromDurations: number;
  /**
   * Sum of the cost of the model's reported usage (audio, and text when priced), a response that
   * reported none at the estimate of its audio; null until a response reports usage.
   */
  billedUsd: number | null;
  /** Sum of the transcriptions' costs (absent in a call stored before transcriptions were billed). */
  transcribedUsd?: number;
  /**
   * Text tokens the responses reported that the configuration has no price for (left out of
   * `billedUsd`): when > 0 the call's cost is short, and its meter event says so (absent: none).
   */
  unpricedTextTokens?: number;
  lowConfidence: number;
  confidences: number[];
  ttfbMs: number[];
  intent: IntentId | 'unknown';
  action: Action;
  reason: Reason | null;
  estUsd_at_disconnect: number | null;
}

export type VoiceEvent =
  | { type: 'user.audio_frame'; ms: number }
  | { type: 'assistant.audio_frame'; ms: number }
  | { type: 'assistant.response.start'; ttfb_ms: number }
  | { type: 'assistant.response.done'; usage?: RealtimeUsage }
  | { type: 'transcript'; text: string; confidence: number; speaker: 'user' | 'assistant' }
  | { type: 'transcription.done'; usd: number };

/** The token counts of a realtime response's usage the guard prices. */
export interface RealtimeUsage {
  input_token_details?: {
    audio_tokens?: number;
    text_tokens?: number;
    cached_tokens_details?: { audio_tokens?: number; text_tokens?: number };
  };
  output_token_details?: { audio_tokens?: number; text_tokens?: number };
}

export class VoiceEventError extends Error {}

/** Where each count the guard prices is in a usage, in the order they are checked. */
export const PRICED_COUNTS = (['audio_tokens', 'text_tokens'] as const).flatMap((kind) => [
  ['input_token_details', kind],
  ['input_token_details', 'cached_tokens_details', kind],
  ['output_token_details', kind],
]);

/** The longest audio frame or time to first byte taken (an hour): longer is not a measurement. */
const MAX_MS = 3_600_000;
/** The most audio (or text) tokens one response may report: far above any realtime session's context. */
export const MAX_AUDIO_TOKENS = 10_000_000;
/** The most one caller turn's transcription may cost: far above any (a whole hour is cents). */
const MAX_TRANSCRIPTION_USD = 1000;

/** A value sent, as an error quotes it: cut short, so that one of megabytes is not sent back whole. */
function sent(value: unknown): string {
  const text = typeof value === 'number' ? String(value) : (JSON.stringify(value) ?? 'nothing'); // 1e309 shows as Infinity
  return cutText(text, 100);
}

/** A number from a voice server as a count or duration: finite, within [min, max], else refused naming the field. */
function measure(field: string, value: unknown, min: number, max: number, what: string, exclusiveMin = false): number {
  const ok = typeof value === 'number' && Number.isFinite(value) && (exclusiveMin ? value > min : value >= min) && value <= max;
  if (!ok) throw new VoiceEventError(`${field}: expected ${what}, got ${sent(value)}`);
  return value as number;
}

/** Each audio and text token count the usage carries: a whole number from 0 to MAX_AUDIO_TOKENS. */
function checkUsage(usage: RealtimeUsage): void {
  const at = 'assistant.response.done.usage';
  if (typeof usage !== 'object' || usage === null) throw new VoiceEventError(`${at}: expected an object`);
  for (const path of PRICED_COUNTS) {
    const value = path.reduce<unknown>((v, key) => (v as Record<string, unknown> | null | undefined)?.[key], usage);
    if (value === undefined) continue;
    const field = `${at}.${path.join('.')}`;
    const n = measure(field, value, 0, MAX_AUDIO_TOKENS, `a whole number of tokens from 0 to ${MAX_AUDIO_TOKENS}`);
    if (!Number.isInteger(n)) throw new VoiceEventError(`${field}: expected a whole number of tokens, got ${n}`);
  }
}

export interface GuardConfig {
  maxTurns: number;
  minConfidence: number;
  confidenceRepeat: number;
  latencyBudgetMs: number;
  latencyRepeat: number;
  perCallUsdCap: number;
  /**
   * `spend_guard.disconnect_when_exceeded`: false, the call goes on past the per-call cap, so its
   * `disconnect` verdict gives way to a later escalation (the turn cap, a caller asking for a person…).
   */
  disconnectWhenExceeded: boolean;
  inPerMillion: number;
  outPerMillion: number;
  /** Cached input audio tokens: the configuration's cached price, else the full input price. */
  cachedInPerMillion: number;
  /** Text tokens: the configuration's text prices; null, not set (the text tokens go unpriced). */
  textInPerMillion: number | null;
  /** Cached input text tokens: the configuration's cached text price, else the text input price. */
  textCachedInPerMillion: number | null;
  textOutPerMillion: number | null;
  frustrationMarkers: string[];
  callerRequestMarkers: string[];
  handoffBelow: Partial<Record<IntentId, number>>;
  triggers: Array<{ id: IntentId; triggers: string[] }>;
}

/** Phrases of a caller asking for a person, when the configuration gives none. */
const DEFAULT_CALLER_REQUEST = [
  'speak to a person',
  'talk to a person',
  'real person',
  'a human',
  'speak to someone',
  'talk to someone',
  'an operator',
  'customer service',
];

type TokenPrices = Pick<
  GuardConfig,
  'inPerMillion' | 'outPerMillion' | 'cachedInPerMillion' | 'textInPerMillion' | 'textCachedInPerMillion' | 'textOutPerMillion'
>;

/**
 * The configuration's token prices: audio, and text when it has text prices (null when not);
 * cached input at the full input price unless it names one.
 */
export function tokenPrices(g: Concierge['spend_guard']): TokenPrices {
  const textIn = g.text_in_per_million ?? null;
  return {
    inPerMillion: g.audio_in_per_million,
    outPerMillion: g.audio_out_per_million,
    cachedInPerMillion: g.audio_in_cached_per_million ?? g.audio_in_per_million,
    textInPerMillion: textIn,
    textCachedInPerMillion: g.text_in_cached_per_million ?? textIn,
    textOutPerMillion: g.text_out_per_million ?? null,
  };
}

/**
 * The startup warning of a configuration without text prices (null when it has them): the text
 * tokens of its responses go unpriced, so the per-call cap and the call record leave them out and
 * the meter marks those responses UNPRICED.
 */
export function unpricedTextWarning(g: Concierge['spend_guard']): string | null {
  const missing = (['text_in_per_million', 'text_out_per_million'] as const).filter((k) => g[k] === undefined);
  if (!missing.length) return null;
  return `spend_guard has no ${missing.join(' or ')}: the realtime responses' text tokens (instructions and conversation re-read by every response, the answers' words) go unpriced: the per-call cap and est_audio_cost_usd leave them out, and the meter marks each response with such tokens UNPRICED`;
}

export function guardConfig(c: Concierge): GuardConfig {
  const rule = (t: string) => c.escalation.rules.find((r) => r.trigger === t);
  return {
    maxTurns: rule('turn_cap_reached')?.threshold ?? c.guardrails.max_turns,
    minConfidence: rule('confidence_below')?.threshold ?? c.guardrails.min_confidence,
    confidenceRepeat: rule('confidence_below')?.repeat ?? 2,
    latencyBudgetMs: (rule('latency_over_budget')?.threshold ?? c.guardrails.latency_budget_s) * 1000,
    latencyRepeat: rule('latency_over_budget')?.repeat ?? 2,
    perCallUsdCap: c.spend_guard.per_call_usd_cap,
    disconnectWhenExceeded: c.spend_guard.disconnect_when_exceeded,
    ...tokenPrices(c.spend_guard),
    frustrationMarkers: rule('frustration_detected')?.markers ?? [],
    callerRequestMarkers: rule('caller_request')?.markers ?? DEFAULT_CALLER_REQUEST,
    handoffBelow: Object.fromEntries(
      c.intents.filter((i) => i.handoff_if_confidence_below !== undefined).map((i) => [i.id, i.handoff_if_confidence_below]),
    ),
    triggers: c.intents.map((i) => ({ id: i.id, triggers: i.triggers })),
  };
}

export function newCall(): CallState {
  return {
    inputMs: 0,
    outputMs: 0,
    turns: 0,
    estUsd: 0,
    ttfbBreaches: 0,
    estUsdFromDurations: 0,
    billedUsd: null,
    transcribedUsd: 0,
    lowConfidence: 0,
    confidences: [],
    ttfbMs: [],
    intent: 'unknown',
    action: 'continue',
    reason: null,
    estUsd_at_disconnect: null,
  };
}

/** The estimate from audio durations: 1 input token per 100 ms, 1 output token per 50 ms of audio. */
export function estUsdFromDurations(
  state: Pick<CallState, 'inputMs' | 'outputMs'>,
  cfg: Pick<GuardConfig, 'inPerMillion' | 'outPerMillion'>,
): number {
  return ((state.inputMs / 100) * cfg.inPerMillion) / 1e6 + ((state.outputMs / 50) * cfg.outPerMillion) / 1e6;
}

export interface UsageCost {
  /** USD of the tokens the configuration has prices for. */
  usd: number;
  /** Text tokens reported that the configuration has no price for (left out of `usd`): the cost is then not whole. */
  unpricedTextTokens: number;
}

/**
 * The cost of a response's reported usage (null when it reports no audio counts: its audio, the
 * bulk of it, is unknown), shared by the guard, the bridge's output allowance and the meter so they
 * agree: its audio tokens at the audio prices, its text tokens at the text prices. Each input count
 * includes its cached part, which is priced at the cached rate (never more of it than the count it
 * is part of). Text tokens without a price add nothing to `usd` and are counted in `unpricedTextTokens`.
 */
export function usageCost(usage: RealtimeUsage, cfg: TokenPrices): UsageCost | null {
  const input = usage.input_token_details;
  const output = usage.output_token_details;
  if (typeof input?.audio_tokens !== 'number' && typeof output?.audio_tokens !== 'number') return null;
  const inputUsd = (kind: 'audio_tokens' | 'text_tokens', full: number, cachedRate: number) => {
    const tokens = input?.[kind] ?? 0;
    const cached = Math.min(input?.cached_tokens_details?.[kind] ?? 0, tokens);
    return (tokens - cached) * full + cached * cachedRate;
  };
  let micro = inputUsd('audio_tokens', cfg.inPerMillion, cfg.cachedInPerMillion) + (output?.audio_tokens ?? 0) * cfg.outPerMillion;
  let unpricedTextTokens = 0;
  const textIn = input?.text_tokens ?? 0;
  const textOut = output?.text_tokens ?? 0;
  if (cfg.textInPerMillion === null) unpricedTextTokens += textIn;
  else micro += inputUsd('text_tokens', cfg.textInPerMillion, cfg.textCachedInPerMillion ?? cfg.textInPerMillion);
  if (cfg.textOutPerMillion === null) unpricedTextTokens += textOut;
  else micro += textOut * cfg.textOutPerMillion;
  return { usd: micro / 1e6, unpricedTextTokens };
}

/** Whether one of the phrases is in the text, both compared as intent triggers are (a phrase of punctuation alone: never). */
const includesPhrase = (text: string, phrases: string[]) => {
  const t = normalise(text);
  return phrases.some((p) => normalise(p) !== '  ' && t.includes(normalise(p)));
};

/**
 * Whether the escalation checks still run: the call goes on, or goes on past the per-call cap
 * (disconnect_when_exceeded false), where a cap's verdict that stayed would leave the caller with no
 * way to a person for the rest of the call.
 */
const checking = (state: CallState, cfg: GuardConfig) =>
  state.action === 'continue' || (state.action === 'disconnect' && !cfg.disconnectWhenExceeded);

function escalate(state: CallState, reason: Reason): void {
  state.action = 'escalate';
  state.reason = reason;
}

type EventOf<T extends VoiceEvent['type']> = Extract<VoiceEvent, { type: T }>;

function onAudioFrame(state: CallState, event: EventOf<'user.audio_frame' | 'assistant.audio_frame'>, cfg: GuardConfig): void {
  const expected = `a duration in milliseconds > 0 and at most ${MAX_MS} (empty frames are rejected)`;
  measure(`${event.type}.ms`, event.ms, 0, MAX_MS, expected, true);
  if (event.type === 'user.audio_frame') state.inputMs += event.ms;
  else state.outputMs += event.ms;
  // A call billed by the estimate (no response reported usage yet) costs its audio as it is measured:
  // frames after the last response.done (an answer reported as it is played) are in the call's cost too.
  if (state.billedUsd === null) state.estUsd = roundUsd(estUsdFromDurations(state, cfg) + (state.transcribedUsd ?? 0));
}

function onResponseStart(state: CallState, event: EventOf<'assistant.response.start'>, cfg: GuardConfig): void {
  measure('assistant.response.start.ttfb_ms', event.ttfb_ms, 0, MAX_MS, `milliseconds from 0 to ${MAX_MS}`);
  state.ttfbMs.push(event.ttfb_ms);
  if (event.ttfb_ms > cfg.latencyBudgetMs) state.ttfbBreaches++;
}

function onResponseDone(state: CallState, event: EventOf<'assistant.response.done'>, cfg: GuardConfig): void {
  if (event.usage !== undefined) checkUsage(event.usage);
  state.turns++;
  const before = state.estUsdFromDurations;
  state.estUsdFromDurations = estUsdFromDurations(state, cfg);
  const cost = event.usage ? usageCost(event.usage, cfg) : null;
  const billed = cost?.usd ?? null;
  if (cost?.unpricedTextTokens) state.unpricedTextTokens = (state.unpricedTextTokens ?? 0) + cost.unpricedTextTokens;
  // A response without usage (omitted, or cancelled before it) is billed the estimate of the
  // audio since the previous one, so the cap still holds; responses before the first that
  // reported usage likewise.
  if (billed !== null) state.billedUsd = (state.billedUsd ?? before) + billed;
  else if (state.billedUsd !== null) state.billedUsd += state.estUsdFromDurations - before;
  // Without the float noise of the sum: a call billed exactly the cap in parts reaches it.
  state.estUsd = roundUsd((state.billedUsd ?? state.estUsdFromDurations) + (state.transcribedUsd ?? 0));
  if (!checking(state, cfg)) return;
  if (state.turns >= cfg.maxTurns) return escalate(state, 'turn_cap');
  if (state.action === 'continue' && state.estUsd >= cfg.perCallUsdCap) {
    state.action = 'disconnect';
    state.reason = 'per_call_cap';
    state.estUsd_at_disconnect = state.estUsd;
    return;
  }
  if (state.ttfbBreaches >= cfg.latencyRepeat) escalate(state, 'latency');
}

function onTranscript(state: CallState, event: EventOf<'transcript'>, cfg: GuardConfig): void {
  // Each field named, as the counts are: the sender sees which one it got wrong.
  if (typeof event.text !== 'string') throw new VoiceEventError(`transcript.text: expected text, got ${sent(event.text)}`);
  measure('transcript.confidence', event.confidence, 0, 1, 'a number from 0 to 1');
  if (event.speaker !== 'user' && event.speaker !== 'assistant')
    throw new VoiceEventError(`transcript.speaker: expected "user" or "assistant", got ${sent(event.speaker)}`);
  if (event.speaker !== 'user') return;
  state.confidences.push(event.confidence);
  if (state.intent === 'unknown') state.intent = matchIntent(event.text, cfg.triggers);
  if (!checking(state, cfg)) return;
  if (includesPhrase(event.text, cfg.callerRequestMarkers)) return escalate(state, 'caller_request');
  if (includesPhrase(event.text, cfg.frustrationMarkers)) return escalate(state, 'frustration_markers');
  const handoff = state.intent !== 'unknown' ? cfg.handoffBelow[state.intent] : undefined;
  if (handoff !== undefined && event.confidence < handoff) return escalate(state, 'low_confidence');
  if (event.confidence < cfg.minConfidence && ++state.lowConfidence >= cfg.confidenceRepeat) escalate(state, 'low_confidence');
}

function onTranscription(state: CallState, event: EventOf<'transcription.done'>): void {
  const usd = measure('transcription.done.usd', event.usd, 0, MAX_TRANSCRIPTION_USD, `USD from 0 to ${MAX_TRANSCRIPTION_USD}`);
  // Added to the cost now (the record and the answers show it); the checks run at the next response.done.
  state.transcribedUsd = (state.transcribedUsd ?? 0) + usd;
  state.estUsd = roundUsd(state.estUsd + usd);
}

/**
 * Applies one event, in place, and returns the state. Once a call is escalated or disconnected,
 * the verdict stays (later events still count audio and cost); with disconnect_when_exceeded
 * false a disconnect gives way to a later escalation, the checks go on past the cap.
 */
export function applyEvent(state: CallState, event: VoiceEvent, cfg: GuardConfig): CallState {
  switch (event.type) {
    case 'user.audio_frame':
    case 'assistant.audio_frame':
      onAudioFrame(state, event, cfg);
      break;
    case 'assistant.response.start':
      onResponseStart(state, event, cfg);
      break;
    case 'assistant.response.done':
      onResponseDone(state, event, cfg);
      break;
    case 'transcript':
      onTranscript(state, event, cfg);
      break;
    case 'transcription.done':
      onTranscription(state, event);
      break;
    default:
      throw new VoiceEventError(
        `type: expected one of user.audio_frame, assistant.audio_frame, assistant.response.start, assistant.response.done, transcript, transcription.done, billing.monthly_rollup; got ${sent((event as { type?: unknown }).type)}`,
      );
  }
  return state;
}

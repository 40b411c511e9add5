/**
 * The caller's speech is transcribed by the session's transcription model, which the Realtime API
 * bills apart from the responses: each `conversation.item.input_audio_transcription.completed`
 * reports what it used (`usage`: tokens, `{type: "tokens", input_tokens, input_token_details:
 * {text_tokens, audio_tokens}, output_tokens}`, or for a model billed by the minute `{type:
 * "duration", seconds}`). Each transcription is one meter event of its own model, priced from the
 * same price list as chat calls (input audio at the model's audio rate), and its cost goes to the
 * spend guard, so the per-call cap and the call record count it. A duration, a model without a
 * known price or no usage at all: the cost is unknown, so the event is UNPRICED (never a silent $0)
 * and the guard is given nothing. Counts are cleaned as a response's are (usage.ts).
 * Once per item: a completed event the server repeats is not billed twice.
 */
import type { EventRecord } from '../../../../schema/event-record';
import { markUnpriced } from '../../../../schema/unpriced';
import { costUsd } from '../../pricing';
import { isObject } from '../../json-object';
import { callEvent } from './meter-event';
import { cleanUsage } from './usage';

interface TranscriptionFacts {
  provider: string;
  model: string;
  tenant: string;
  callId: string;
  confidence: number | null;
  log: { warn: (m: string) => void };
}

export class TranscriptionUsage {
  private readonly billed = new Set<string>();

  constructor(
    private readonly sinks: {
      meter: { send(event: EventRecord): void };
      /** The cost to the spend guard (only a known one). */
      guard: (usd: number) => void;
    },
  ) {}

  /** One completed transcription: metered and counted, unless its item (when it names one) already was. */
  completed(itemId: unknown, usage: unknown, facts: TranscriptionFacts): void {
    if (typeof itemId === 'string' && itemId !== '') {
      if (this.billed.has(itemId)) return;
      this.billed.add(itemId);
    }
    const tokens = tokensOf(usage);
    const usd = tokens
      ? costUsd(facts.provider, facts.model, tokens, (m) => facts.log.warn(`call ${facts.callId}: transcription: ${m}`))
      : null;
    this.sinks.meter.send(transcriptionEvent(facts, tokens, usd));
    if (usd !== null) this.sinks.guard(usd);
  }
}

/** The token counts of a `tokens` usage (null for a duration, none, or counts that are not whole numbers in bounds). */
function tokensOf(usage: unknown): { input_tokens: number; output_tokens: number; input_audio_tokens?: number } | null {
  if (!isObject(usage) || usage.type !== 'tokens') return null;
  const { input_tokens: input, output_tokens: output, input_token_details: details } = cleanUsage(usage).usage ?? {};
  if (input === undefined || output === undefined) return null;
  const audio = details?.audio_tokens;
  // The audio tokens are part of the input: never more of them than the input they are part of.
  return { input_tokens: input, output_tokens: output, ...(audio !== undefined ? { input_audio_tokens: Math.min(audio, input) } : {}) };
}

function transcriptionEvent(f: TranscriptionFacts, tokens: ReturnType<typeof tokensOf>, usd: number | null): EventRecord {
  return callEvent(f, f.model, {
    input_tokens: tokens?.input_tokens ?? 0,
    output_tokens: tokens?.output_tokens ?? 0,
    latency_ms: 0,
    cost_usd: usd,
    error_code: usd === null ? markUnpriced('') : '',
  });
}

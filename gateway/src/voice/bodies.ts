/**
 * The request bodies of the voice endpoints, checked with zod: an error names the field
 * (`call_id: an id of 1 to 128 characters …`).
 */
import { ID_PATTERN, ID_RULE } from '../../../schema/ids';
import { z } from 'zod';
import { INTENTS_PRIMARY, OUTCOMES } from '../../../schema/call-record';
import { CLOCK_SKEW_ALLOWANCE_MS } from '../../../schema/event-record';

const callId = z.string().regex(ID_PATTERN, `an id of ${ID_RULE}`);

/** Twilio ends any call at 24 hours: a longer duration is a sender's mistake, billed as telephony minutes. */
export const MAX_CALL_S = 86_400;
const MAX_AHEAD_MIN = CLOCK_SKEW_ALLOWANCE_MS / 60_000;

/** An RFC 3339 time not ahead of the clock by more than the meter allows (checked when the body is read). */
const notAhead = (why = '') =>
  z.iso.datetime({ offset: true }).refine((t) => Date.parse(t) <= Date.now() + CLOCK_SKEW_ALLOWANCE_MS, {
    message: `expected a time at most ${MAX_AHEAD_MIN} minutes after the gateway’s clock${why}`,
  });

/** POST /v1/voice/calls */
export const StartCall = z.strictObject({
  call_id: callId,
  from: z.string().min(1),
  country: z
    .string()
    .regex(/^[A-Z]{2}$/, 'an ISO 3166 alpha-2 code such as PT')
    .optional(),
  /** A later start makes a call record the meter refuses (lost at the call's end). */
  at: notAhead(' (the meter refuses a call record that starts later)').optional(),
  /** The telephony layer's reason to skip the conversation: no_answer or network_issue → voicemail. */
  trigger: z.enum(['no_answer', 'network_issue']).optional(),
});
export type StartCallBody = z.infer<typeof StartCall>;

/** POST /v1/voice/calls/:call_id/end */
export const EndCall = z.strictObject({
  outcome: z.enum(OUTCOMES),
  intent_primary: z.enum(INTENTS_PRIMARY).optional(),
  duration_s: z
    .number()
    .min(0)
    .max(MAX_CALL_S, `expected seconds from 0 to ${MAX_CALL_S} (a phone call lasts at most 24 hours)`)
    .optional(),
  asr_wer: z.number().min(0).max(1).optional(),
  escalated: z.boolean().optional(),
  ended_at: notAhead().optional(),
  /** Why the call ended (schema ENDED_REASONS); by default the guard's escalation reason, if any. */
  ended_reason: z
    .string()
    .regex(/^[a-z][a-z0-9_]{0,63}$/, 'a snake_case reason such as caller_hangup')
    .optional(),
  /** The voice server sent one meter event per model response (the phone bridge does): the call's audio cost is not sent again. */
  responses_metered: z.boolean().optional(),
});
export type EndCallBody = z.infer<typeof EndCall>;

/** POST /v1/voice/billing/monthly-rollup */
export const Rollup = z.strictObject({ monthly_usd: z.number().finite().min(0) });

/** POST /v1/workflow/function-called */
export const FunctionCalled = z.strictObject({
  function: z.string().min(1),
  args: z.record(z.string(), z.unknown()).default({}),
  call_id: callId,
});

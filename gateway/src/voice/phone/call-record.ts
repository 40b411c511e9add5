/**
 * The end of a phone call through the existing end-of-call path (VoiceService.end: the call record
 * to the meter's `calls`, the summary to `log_to`, the telephony cost), with what the bridge knows:
 * the outcome and intent the functions produced, whether the caller was handed to a person, why
 * and when the call ended, and that each response was already metered (so the audio cost is not sent twice).
 */
import type { CallRecord } from '../../../../schema/call-record';
import type { VoiceService } from '../calls';
import type { FunctionCalls } from './function-calls';

export async function writeCallRecord(
  voice: Pick<VoiceService, 'end'>,
  callSid: string,
  facts: { functions: FunctionCalls; escalated: boolean; reason: string; endedAt: string; tenant: string },
  log: { error: (m: string) => void },
): Promise<CallRecord | null> {
  const { outcome, intent } = facts.functions.result();
  try {
    const out = await voice.end(
      callSid,
      {
        outcome,
        ...(intent ? { intent_primary: intent } : {}),
        escalated: facts.escalated,
        ended_reason: facts.reason,
        // When the call ended: its duration and telephony minutes are not the wait for its record.
        ended_at: facts.endedAt,
        responses_metered: true,
      },
      facts.tenant,
    );
    if (out.status === 200) return out.body as CallRecord;
    log.error(`call ${callSid}: the call record was refused (${out.status}: ${JSON.stringify(out.body)})`);
  } catch (error) {
    log.error(`call ${callSid}: the call record could not be written (${(error as Error).message})`);
  }
  return null;
}

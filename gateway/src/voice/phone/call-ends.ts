/**
 * The record of a call that ends outside a media session (voicemail, the monthly pause, a status
 * callback for a stream that never ended cleanly), through the same end-of-call path as every
 * call. The store writes a call's record once whoever asks first (a second callback or a late
 * stream end answers the same record and sends nothing again); `onCallEnded` is told once per
 * call on this instance.
 */
import type { CallRecord } from '../../../../schema/call-record';
import type { EndCallBody } from '../bodies';
import type { VoiceService } from '../calls';
import { ExpiringMap } from '../expiring-map';
import type { CallSummary } from './call-types';

export type EdgeEnd = Pick<EndCallBody, 'outcome' | 'intent_primary' | 'escalated' | 'ended_at'> & { ended_reason: string };

export class CallEnds {
  private readonly reported = new ExpiringMap<true>();

  constructor(
    private readonly deps: {
      voice: Pick<VoiceService, 'end'>;
      onCallEnded?: (summary: CallSummary) => void;
      /** The customer_id of the call's meter events (VOICE_TENANT). */
      tenant: string;
      log: { info: (m: string) => void; error: (m: string) => void };
    },
  ) {}

  /** Tells `onCallEnded` about a call, once. */
  report(summary: CallSummary): void {
    if (this.reported.get(summary.call_id)) return;
    this.reported.set(summary.call_id, true, 3600);
    this.deps.onCallEnded?.(summary);
  }

  /** Writes the record unless one exists; the record either way (null: unknown call or a failure, logged). */
  async write(callSid: string, end: EdgeEnd): Promise<CallRecord | null> {
    try {
      // No model response of such a call was metered, and none is owed: its audio cost is 0.
      const out = await this.deps.voice.end(callSid, { ...end, responses_metered: true }, this.deps.tenant);
      if (out.status !== 200) return null;
      const record = out.body as CallRecord;
      if ('fresh' in out && out.fresh) {
        this.deps.log.info(`call ${callSid}: ended (${end.ended_reason}, ${end.outcome})`);
        this.report({
          call_id: callSid,
          ended_reason: end.ended_reason,
          record,
          transcript: [],
          estUsd_at_disconnect: null,
          realtime_failure: null,
        });
      }
      return record;
    } catch (error) {
      this.deps.log.error(`call ${callSid}: the call record could not be written (${(error as Error).message})`);
      return null;
    }
  }
}

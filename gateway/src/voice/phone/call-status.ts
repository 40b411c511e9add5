/**
 * `POST /twilio/status`, Twilio's call status callback. A terminal status (completed, busy,
 * failed, no-answer, canceled) closes what is still open for the call: a live session here ends
 * (its own end writes the record); a call with no session (voicemail, the monthly pause, a stream
 * that never came or broke off without `stop`) gets its record now, `abandoned` unless a voicemail
 * was already recorded. Once: a call that has its record is left alone.
 */
import type { VoiceService } from '../calls';
import type { CallEnds } from './call-ends';
import type { EndReason } from './call-types';
import type { MediaStreams } from './media-stream';

const TERMINAL: Record<string, EndReason> = {
  completed: 'caller_hangup',
  busy: 'busy',
  failed: 'failed',
  'no-answer': 'no_answer',
  canceled: 'canceled',
};

export class CallStatus {
  constructor(
    private readonly deps: {
      voice: Pick<VoiceService, 'get'>;
      streams: Pick<MediaStreams, 'live'>;
      ends: CallEnds;
      log: { info: (m: string) => void };
    },
  ) {}

  async update(callSid: string, status: string): Promise<void> {
    const reason = TERMINAL[status];
    if (!reason) return;
    const session = this.deps.streams.live.get(callSid);
    if (session) return void session.finish(reason);
    const call = await this.deps.voice.get(callSid);
    if (!call || call.record) return;
    const paused = call.voicemail_reason === 'monthly_cap';
    this.deps.log.info(`call ${callSid}: status ${status} with no live stream; writing its record`);
    await this.deps.ends.write(callSid, {
      outcome: 'abandoned',
      ...(call.action === 'voicemail' ? { intent_primary: 'voicemail' as const } : {}),
      ended_reason: paused ? 'monthly_cap' : reason,
    });
  }
}

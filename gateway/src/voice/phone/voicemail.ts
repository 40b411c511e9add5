/**
 * Voicemail over the phone: the voicemail intent's flow for callers after hours, a person who did
 * not answer a transfer (no_answer), a realtime failure before the agent spoke (network_issue),
 * the monthly pause (monthly_cap, offered rather than imposed) and a caller who asks the agent to
 * leave a message (caller_request: the model's call of the voicemail function moves the live call here).
 *
 *   TwiML        the reason's line, the privacy notice, `<Record>` naming both callbacks
 *   recorded     (`<Record action>`) the caller finished: the call's record (voicemail_left), thanks
 *   recording    (`recordingStatusCallback`) the file is ready: `route_to_voicemail` through the
 *                workflow with the recording URL (`.mp3`), the caller's number and the time, so the
 *                back office saves voicemail/<call_id>.mp3 and makes the 24-hour callback task
 *
 * Twilio may send a callback again: the workflow's idempotency key (same arguments) and the
 * once-only record make a repeat harmless.
 */
import type { Concierge } from '../config';
import type { Workflow } from '../workflow';
import type { CallEnds } from './call-ends';
import { CallbackUrls, type VoicemailReason } from './callback-urls';
import { sayAndHangUp, voicemailTwiml, type Lines } from './twiml';

/** `ended_reason` of a call that ended in voicemail, by why it went there. */
const VOICEMAIL_ENDED: Record<VoicemailReason, string> = {
  after_hours: 'after_hours',
  no_answer: 'no_answer',
  network_issue: 'realtime_failure',
  monthly_cap: 'monthly_cap',
  caller_request: 'caller_request',
};

type Form = Record<string, unknown>;
const str = (v: unknown) => (typeof v === 'string' ? v : '');

/** Twilio's RecordingStartTime ("Mon, 23 Nov 2026 22:01:02 +0000") as RFC 3339; else now. */
function recordedAt(form: Form): string {
  const t = Date.parse(str(form.RecordingStartTime));
  return new Date(Number.isFinite(t) ? t : Date.now()).toISOString();
}

export class Voicemail {
  /** The function that files a recording (the voicemail intent's `on_match.call`). */
  readonly fn: string;
  private readonly privacyNotice: boolean;

  constructor(
    private readonly deps: {
      config: Concierge;
      urls: CallbackUrls;
      lines: Lines;
      workflow: Pick<Workflow, 'called'>;
      ends: CallEnds;
      log: { info: (m: string) => void; warn: (m: string) => void; error: (m: string) => void };
    },
  ) {
    const intent = deps.config.intents.find((i) => i.id === 'voicemail');
    this.fn = intent?.on_match.call ?? 'route_to_voicemail';
    this.privacyNotice = intent?.on_match.privacy_notice ?? true;
  }

  twiml(reason: VoicemailReason, from: string | null): string {
    const { urls, lines } = this.deps;
    return voicemailTwiml({
      lines,
      reason,
      privacyNotice: this.privacyNotice,
      recordingCallback: urls.recording(reason, from),
      action: urls.recorded(reason, from),
    });
  }

  /** `<Record action>`: the message is over (or the caller hung up during it). */
  async recorded(callSid: string, reason: VoicemailReason, form: Form): Promise<string> {
    const seconds = Number(str(form.RecordingDuration));
    if (str(form.RecordingUrl) && seconds > 0)
      await this.deps.ends.write(callSid, {
        outcome: 'voicemail_left',
        intent_primary: 'voicemail',
        ended_reason: VOICEMAIL_ENDED[reason],
      });
    return sayAndHangUp(this.deps.lines.voicemailThanks);
  }

  /** `recordingStatusCallback`: the recording exists; the back office keeps it and makes the callback task. */
  async recording(callSid: string, reason: VoicemailReason, from: string | null, form: Form): Promise<void> {
    const { log } = this.deps;
    const status = str(form.RecordingStatus);
    if (status !== 'completed')
      return void log.warn(`call ${callSid}: voicemail recording ${status || 'without a status'}; nothing to keep`);
    const url = str(form.RecordingUrl);
    if (!/^https:\/\/[^\s?#]+$/.test(url))
      return void log.error(`call ${callSid}: RecordingUrl: expected an https URL; voicemail not routed`);
    const args = { transcript: '', phone: from ?? 'unknown', utc: recordedAt(form), recording_url: `${url}.mp3` };
    try {
      const answer = await this.deps.workflow.called({ function: this.fn, args, call_id: callSid });
      if (!answer.ok) return void log.error(`call ${callSid}: ${this.fn} failed: ${answer.error ?? 'refused'}`);
      log.info(`call ${callSid}: voicemail routed to the back office (${this.fn}${answer.replayed ? ', replayed' : ''})`);
      await this.deps.ends.write(callSid, {
        outcome: 'voicemail_left',
        intent_primary: 'voicemail',
        ended_reason: VOICEMAIL_ENDED[reason],
      });
    } catch (error) {
      log.error(`call ${callSid}: ${this.fn} failed: ${(error as Error).message}`);
    }
  }
}

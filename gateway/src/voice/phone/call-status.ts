/**
 * `POST /twilio/status`, Twilio's call status callback. A terminal status (completed, busy,
 * failed, no-answer, canceled) closes what is still open for the call: a live session here ends
 * (its own end writes the record); a call with no session (voicemail, the monthly pause, a stream
 * that never came or broke off without `stop`) gets its record, `abandoned` unless a voicemail
 * was already recorded (a session that handed its call to voicemail and ended before the callback
 * says why: realtime_failure). Once: a call that has its record is left alone.
 *
 * The callback often comes before the record that says more: an answered call's stream may be
 * ending on another instance (its session records what the call achieved, a booking…), and a
 * voicemail's recording callback comes after the call (if the caller hung up before Twilio asked
 * the `<Record>` action). So the record is written here only if none appears within `graceMs`
 * (60 s: a session's end waits up to 47 s for function calls), checked in the store every 250 ms.
 * At shutdown a wait still running is cut to 5 s, as a session's wait for its function calls is,
 * and the record then written: Twilio sends the callback once, so no instance would write it later.
 * Not for a call whose stream ran: its session writes the record, perhaps on another gateway after
 * a function call that takes longer than 5 s, and an "abandoned" one written first would win.
 */
import type { StoredCall } from '../call-store';
import type { VoiceService } from '../calls';
import type { CallEnds } from './call-ends';
import type { EndReason } from './call-types';
import type { MediaStreams } from './media-stream';
import { ExpiringMap } from '../expiring-map';

const GRACE_MS = 60_000;
const POLL_MS = 250;
const GRACE_AT_SHUTDOWN_MS = 5_000;

const TERMINAL: Record<string, EndReason> = {
  completed: 'caller_hangup',
  busy: 'busy',
  failed: 'failed',
  'no-answer': 'no_answer',
  canceled: 'canceled',
};

/** A terminal status for a call: what Twilio said, why the call ended, and when it said so. */
interface Ending {
  callSid: string;
  status: string;
  reason: EndReason;
  endedAt: string;
}

export class CallStatus {
  /** Calls whose session handed them to voicemail and ended (the record left to the voicemail), with why. */
  private readonly handedOver = new ExpiringMap<EndReason>();
  /** Records waiting for their grace to end, and when shutdown cuts every wait short. */
  private readonly waiting = new Set<Promise<void>>();
  private closingBy = Infinity;

  constructor(
    private readonly deps: {
      voice: Pick<VoiceService, 'get' | 'now'>;
      streams: Pick<MediaStreams, 'live'>;
      ends: CallEnds;
      log: { info: (m: string) => void };
      graceMs?: number;
    },
  ) {}

  /** A session ended having handed its call to voicemail: a later callback records why (realtime_failure), not the status. */
  handedToVoicemail(callSid: string, reason: EndReason): void {
    this.handedOver.set(callSid, reason, 3600);
  }

  async update(callSid: string, status: string): Promise<void> {
    if (!TERMINAL[status]) return;
    // The call ended when Twilio said so, not when the grace below ran out: its duration and
    // started minutes are the call's, not the wait's.
    // On the voice service's clock, as the call's start (a drill's clock moved to business hours).
    const endedAt = this.deps.voice.now().toISOString();
    const reason = this.handedOver.get(callSid) ?? TERMINAL[status];
    const session = this.deps.streams.live.get(callSid);
    // Its end writes the record, unless it handed the call to voicemail (a realtime failure): then
    // the record is the voicemail's, or this one's, as for a call with no session.
    if (session)
      return void session
        .finish(reason)
        .then(() => this.recordLater({ callSid, status, reason: session.decidedReason ?? reason, endedAt }))
        .catch((error: Error) => this.deps.log.info(`call ${callSid}: status ${status}: ${error.message}`));
    await this.recordLater({ callSid, status, reason, endedAt });
  }

  private async recordLater(end: Ending): Promise<void> {
    const { callSid, status } = end;
    const call = await this.deps.voice.get(callSid);
    if (!call || call.record) return;
    const wait: Promise<void> = this.unlessEnded(end)
      .catch((error: Error) => this.deps.log.info(`call ${callSid}: status ${status}: ${error.message}`))
      .finally(() => this.waiting.delete(wait));
    this.waiting.add(wait);
  }

  /** Shutdown: every record still waiting is written within 5 s (sooner if its own end comes). */
  async close(): Promise<void> {
    this.closingBy = performance.now() + GRACE_AT_SHUTDOWN_MS;
    await Promise.all(this.waiting);
  }

  /** The record from here only if the stream's session or the voicemail did not write one in time. */
  private async unlessEnded(end: Ending): Promise<void> {
    const { callSid } = end;
    // Monotonic: a wall clock set back would hold the record, and a shutdown, for the time it went back.
    const until = performance.now() + (this.deps.graceMs ?? GRACE_MS);
    for (;;) {
      await new Promise((r) => setTimeout(r, POLL_MS).unref());
      if (this.deps.streams.live.has(callSid)) return; // its stream is here after all: its end writes
      const call = await this.deps.voice.get(callSid);
      if (!call || call.record) return;
      // Shutting down: a call whose stream ran (its guard feed's batches are stored) is its session's
      // to record, maybe on another gateway still waiting for a function call; "abandoned" from here
      // would win over that record. This wait is given up, as before the shutdown cut.
      if (this.closingBy !== Infinity && call.guardBatch) return;
      if (performance.now() >= Math.min(until, this.closingBy)) return this.write(call, end);
    }
  }

  private async write(call: StoredCall, { status, reason, endedAt }: Ending): Promise<void> {
    const callSid = call.call_id;
    const paused = call.voicemail_reason === 'monthly_cap';
    // A session (maybe on another instance) handed it to voicemail: a realtime failure, or the caller asked.
    const failed = call.voicemail_reason === 'network_issue';
    const asked = call.voicemail_reason === 'caller_request';
    this.deps.log.info(`call ${callSid}: status ${status} with no live stream; writing its record`);
    await this.deps.ends.write(callSid, {
      outcome: 'abandoned',
      ...(call.action === 'voicemail' ? { intent_primary: 'voicemail' as const } : {}),
      ended_reason: paused ? 'monthly_cap' : failed ? 'realtime_failure' : asked ? 'caller_request' : reason,
      ended_at: endedAt,
    });
  }
}

// How the drill places and drives a phone call: the local Twilio places it through the signed
// webhook and streams µ-law speech, the realtime peer answers as the drill's script says, and the
// drill waits on what happens (answers done, Twilio told to redirect or complete, the record).
import { isOpen, parseBusinessHours } from '../../gateway/src/voice/business-hours';
import type { Concierge } from '../../gateway/src/voice/config';
import type { CallSummary } from '../../gateway/src/voice/phone/call-types';
import type { BrainContext, Reply, RtConn } from '../voice/peers/realtime-peer';
import { assistantAudio, brain, speak, type Script } from '../voice/peers/script';
import type { MediaCall } from '../voice/peers/twilio-peer';
import { until } from '../voice/peers/wait';
import type { DrillStack } from './drill-stack';

/** A drill call never runs longer than this many answers (the bound a cap must fire within). */
export const ANSWER_BOUND = 20;
const QUARTER_HOUR = 15 * 60_000;

/** The next instant (from now, within 8 days) that is inside (`open`) or outside the business hours; null if none. */
export function nextInstant(config: Concierge, open: boolean): number | null {
  const parsed = parseBusinessHours(config.meta.business_hours_local);
  if (!parsed.ok) return null;
  const start = Math.ceil(Date.now() / QUARTER_HOUR) * QUARTER_HOUR + 60_000;
  for (let t = start; t < start + 8 * 86_400_000; t += QUARTER_HOUR)
    if (isOpen(parsed.windows, new Date(t), config.meta.timezone) === open) return t;
  return null;
}

/** Moves the drill's clock to an open hour, or throws saying why no call can be answered. */
export function openHours(s: DrillStack): void {
  const at = nextInstant(s.config, true);
  if (at === null) throw new Error(`meta.business_hours_local "${s.config.meta.business_hours_local}" is never open: no call is answered`);
  s.clock.moveTo(at);
}

/**
 * The drill's model: the script's replies, with the transcript of each line the gateway asks for
 * (the consent line, its repeat, a closing line) set to that line, so the transcripts read as the
 * call went.
 */
export function drillBrain(script: Script, adjust: (r: Reply, ctx: BrainContext) => Reply = (r) => r): (ctx: BrainContext) => Reply | null {
  const talk = brain(script);
  return (ctx) => {
    const reply = talk(ctx);
    if (!reply) return null;
    const asked = /^(?:Greet|Repeat|Say this)[^"]*"(.*)"$/s.exec(ctx.instructions ?? '')?.[1];
    return adjust(asked ? { ...reply, audio: reply.audio ?? assistantAudio(600), transcript: asked } : reply, ctx);
  };
}

/** One call on the line: the Twilio side, the realtime side, and the answers counted as they finish. */
export class DrillCall {
  answers = 0;
  private constructor(
    readonly stack: DrillStack,
    readonly callSid: string,
    readonly call: MediaCall,
    readonly conn: RtConn,
  ) {
    conn.on('server', (e: { type: string }) => {
      if (e.type === 'response.done') this.answers++;
    });
  }

  /** Places the call (signed webhook, media stream) and waits for its realtime session. */
  static async place(stack: DrillStack, callSid: string, from: string): Promise<DrillCall> {
    const connected = until<RtConn>(stack.realtime, 'connection', () => true, `the realtime session of ${callSid}`);
    const call = await stack.twilio.call(callSid, from);
    return new DrillCall(stack, callSid, call, await connected);
  }

  /** Resolves once `n` answers are done. */
  answered(n: number): Promise<unknown> {
    return this.answers >= n ? Promise.resolve() : until(this.conn, 'server', () => this.answers >= n, `answer ${n} of ${this.callSid}`);
  }

  /** Resolves once everything the gateway sent has played to the caller. */
  heard(): Promise<unknown> {
    const c = this.call;
    return c.playedBytes === c.receivedBytes
      ? Promise.resolve()
      : until(c, 'frame', () => c.playedBytes === c.receivedBytes || c.closed, 'the answer heard');
  }

  /** Resolves once the greeting (the consent line) has been said and heard. */
  async greeted(): Promise<void> {
    await this.answered(1);
    await this.heard();
  }

  /** The caller says something and pauses (the model's VAD ends the turn). */
  speak(): void {
    speak(this.call, 400);
  }

  ended(limitMs = 20_000): Promise<CallSummary> {
    return this.stack.endOf(this.callSid, limitMs);
  }

  /** Twilio's REST updates for this call (redirect with TwiML, or Status=completed). */
  updates(): Array<Record<string, string>> {
    return this.stack.twilio.updates.filter((u) => u.callSid === this.callSid).map((u) => u.form);
  }

  /**
   * The caller keeps talking, one turn per answer, until the gateway ends the call or `bound`
   * answers are done (then the caller hangs up). The call's summary, and whether the gateway ended it.
   */
  async drive(bound: number): Promise<{ summary: CallSummary; byGateway: boolean }> {
    const end = this.ended(120_000);
    let gone = false;
    void end.then(
      () => (gone = true),
      () => undefined,
    );
    for (let n = 1; n <= bound && !gone; n++) {
      await Promise.race([end, this.answered(n).then(() => this.heard())]);
      if (!gone && n < bound) this.speak();
    }
    const byGateway = gone || this.updates().length > 0;
    if (!byGateway) this.call.hangUp();
    return { summary: await end, byGateway };
  }
}

/** The number a transfer's TwiML dials, or a note that it dials none. */
export function dialed(twiml: string | undefined): string {
  return /<Dial\b[^>]*>([^<]+)<\/Dial>/.exec(twiml ?? '')?.[1] ?? 'no <Dial>: a closing line';
}

/** Polls a condition (the back office is reached asynchronously) until it holds or `ms` pass. */
export async function eventually(check: () => boolean, ms = 10_000): Promise<boolean> {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) return false;
    await new Promise((r) => setTimeout(r, 25));
  }
  return true;
}

/**
 * What the guard's decisions and the model's transfer do to the live call, through Twilio's REST
 * API (a caller is on the line, so each says in the log what happened and why):
 *   transfer   the call is redirected to TwiML that says a short line and `<Dial>`s the
 *              `escalate_to_human` number (without one: a polite line and hang-up);
 *   hang up    `Status=completed` (after the session has played its closing line).
 * When Twilio cannot be told (down, refusing), the caller is still not stranded: closing the
 * media stream makes Twilio run the answer's fallback (the same line and `<Dial>`).
 */
import type { CallControl } from './twilio-calls';
import { transferTwiml, type DialTarget, type Lines } from './twiml';

export class CallActions {
  constructor(
    private readonly opts: {
      calls: CallControl;
      callSid: string;
      dial: DialTarget;
      lines: Lines;
      log: { info: (m: string) => void; error: (m: string) => void };
    },
  ) {}

  /** True when Twilio took the redirect. */
  async transfer(reason: string): Promise<boolean> {
    const { calls, callSid, dial, lines, log } = this.opts;
    try {
      await calls.redirect(callSid, transferTwiml(lines.transfer, dial, lines.unavailable));
      log.info(
        `call ${callSid}: transferred to ${dial.number ? 'the human number' : 'a closing line (no dial number configured)'} (${reason})`,
      );
      return true;
    } catch (error) {
      log.error(`call ${callSid}: the transfer (${reason}) was not taken by Twilio: ${(error as Error).message}`);
      return false;
    }
  }

  /** True when Twilio took the redirect to this TwiML (voicemail). */
  async redirect(twiml: string, why: string): Promise<boolean> {
    const { calls, callSid, log } = this.opts;
    try {
      await calls.redirect(callSid, twiml);
      log.info(`call ${callSid}: redirected (${why})`);
      return true;
    } catch (error) {
      log.error(`call ${callSid}: the redirect (${why}) was not taken by Twilio: ${(error as Error).message}`);
      return false;
    }
  }

  /** True when Twilio completed the call. */
  async hangUp(reason: string): Promise<boolean> {
    const { calls, callSid, log } = this.opts;
    try {
      await calls.complete(callSid);
      log.info(`call ${callSid}: ended by the gateway (${reason})`);
      return true;
    } catch (error) {
      log.error(`call ${callSid}: Twilio did not end the call (${reason}): ${(error as Error).message}`);
      return false;
    }
  }
}

/**
 * Call control through Twilio's REST API: `POST {TWILIO_API_URL}/2010-04-01/Accounts/{sid}/Calls/
 * {callSid}.json` with `Twiml` (redirect the live call: the transfer) or `Status=completed` (hang
 * up), basic auth with the account SID and auth token. A network error, 429 or 5xx is retried
 * (3 attempts in all, short backoff: a caller is waiting); a 4xx is not (the call is gone, or the
 * request is wrong). Errors name the status and Twilio's message, never the credentials.
 */
import pRetry, { AbortError } from 'p-retry';

class TwilioCallError extends Error {
  constructor(
    message: string,
    readonly status: number | null,
  ) {
    super(message);
  }
}

export interface CallControl {
  redirect(callSid: string, twiml: string): Promise<void>;
  complete(callSid: string): Promise<void>;
  /** A text message; what happened, in the back office's words: `sent`, `unsent: …` or `unknown: …`. */
  text(to: string, from: string, body: string): Promise<string>;
}

export class TwilioCalls implements CallControl {
  private readonly auth: string;
  constructor(private readonly opts: { apiUrl: string; accountSid: string; authToken: string; timeoutMs?: number; backoffMs?: number }) {
    this.auth = `Basic ${Buffer.from(`${opts.accountSid}:${opts.authToken}`).toString('base64')}`;
  }

  redirect(callSid: string, twiml: string): Promise<void> {
    return this.update(callSid, { Twiml: twiml });
  }

  complete(callSid: string): Promise<void> {
    return this.update(callSid, { Status: 'completed' });
  }

  /**
   * A text through Twilio's Messages API (`POST …/Messages.json` with To, From, Body), the request
   * the back office's texts make. Sent at most once: never retried, since a failure half-way cannot
   * say whether the message went out (then `unknown`).
   */
  async text(to: string, from: string, body: string): Promise<string> {
    const url = `${this.opts.apiUrl}/2010-04-01/Accounts/${encodeURIComponent(this.opts.accountSid)}/Messages.json`;
    try {
      await this.once(url, new URLSearchParams({ To: to, From: from, Body: body }).toString());
      return 'sent';
    } catch (error) {
      const e = ((error as { originalError?: unknown }).originalError ?? error) as TwilioCallError;
      const certain = e.status !== null && e.status !== undefined && e.status < 500;
      return `${certain ? 'unsent' : 'unknown'}: ${e.message.replace('Twilio call update', 'Twilio text')}`;
    }
  }

  private async update(callSid: string, form: Record<string, string>): Promise<void> {
    if (!/^[A-Za-z0-9]{1,64}$/.test(callSid)) throw new TwilioCallError(`call ${JSON.stringify(callSid)}: not a Twilio CallSid`, null);
    const url = `${this.opts.apiUrl}/2010-04-01/Accounts/${encodeURIComponent(this.opts.accountSid)}/Calls/${callSid}.json`;
    const body = new URLSearchParams(form).toString();
    await pRetry(() => this.once(url, body), {
      retries: 2,
      minTimeout: this.opts.backoffMs ?? 200,
      factor: 2,
      randomize: true,
    });
  }

  private async once(url: string, body: string): Promise<void> {
    let res: Response;
    try {
      res = await fetch(url, {
        method: 'POST',
        headers: { authorization: this.auth, 'content-type': 'application/x-www-form-urlencoded' },
        body,
        signal: AbortSignal.timeout(this.opts.timeoutMs ?? 5000),
      });
    } catch (error) {
      throw new TwilioCallError(`Twilio call update: network error (${(error as Error).name})`, null);
    }
    if (res.ok) {
      await res.body?.cancel();
      return;
    }
    const text = (await res.text()).slice(0, 300);
    let message = text;
    try {
      message = String((JSON.parse(text) as { message?: unknown }).message ?? text);
    } catch {
      /* not JSON */
    }
    const error = new TwilioCallError(`Twilio call update: HTTP ${res.status}: ${message}`, res.status);
    if (res.status === 429 || res.status >= 500) throw error;
    throw new AbortError(error);
  }
}

/**
 * Text messages through Twilio's Messages API, sent at most once per back-office action. The
 * state lives in the action's progress (`text`): before sending it is set to `sending` (saved,
 * under the lock); after, to the outcome. A retry that finds `sending` (the earlier attempt still
 * running, or cut off) cannot know whether the message went out, so it records `unknown` instead of
 * sending again. Outcomes:
 *   sent                 Twilio accepted it (2xx)
 *   unsent: <why>        certainly not sent (no credentials, or Twilio refused it with a 4xx)
 *   unknown: <why>       maybe sent (an exception or a 5xx mid-request, or another attempt was sending it)
 */
import type { Progress } from './idempotency';
import type { MeterServices } from './services';

const SENDING = 'sending';
const NO_CREDENTIALS = 'unsent: Twilio credentials are not set in script properties';
/** Found `sending`: that attempt may still be running (the gateway retried a slow one) or have been cut off. */
const SENDING_SEEN =
  'unknown: an earlier attempt of this request was sending it when this one looked (still running, or cut off); it may have been sent; not sent again';

/** The account a text is sent from, read when the text is claimed: no read stands between the claim and the send. */
export interface TwilioCredentials {
  sid: string;
  token: string;
  from: string;
}

function credentials(svc: Pick<MeterServices, 'properties'>): TwilioCredentials | null {
  const sid = svc.properties.getProperty('TWILIO_ACCOUNT_SID');
  const token = svc.properties.getProperty('TWILIO_AUTH_TOKEN');
  const from = svc.properties.getProperty('TWILIO_FROM');
  return sid && token && from ? { sid, token, from } : null;
}

/**
 * Decides, under the lock, whether this attempt sends the text; updates `progress.text` (the
 * caller saves it). The credentials to send it with only when the text has never been attempted
 * and can be sent: read here, since a read that failed after the claim was saved would leave the
 * text `sending`, never sent, and its retry could only record it as unknown.
 */
export function claimText(svc: Pick<MeterServices, 'properties'>, progress: Progress, attempt: string): TwilioCredentials | null {
  if (progress.text === SENDING) progress.text = SENDING_SEEN;
  if (progress.text) return null;
  const creds = credentials(svc);
  if (!creds) {
    progress.text = NO_CREDENTIALS;
    return null;
  }
  progress.text = SENDING;
  progress.text_claim = attempt; // which attempt claimed it, so that only it gives the claim back
  return creds;
}

/** The claiming attempt's outcome of the send. */
export function sentText(progress: Progress, outcome: string): void {
  progress.text = outcome;
  progress.text_claim = undefined;
}

/**
 * Gives back the claim `attempt` made and never sent on (its hold of the lock failed), with the
 * progress as saved: the text is then as never attempted (`''`), and a retry sends it. A claim
 * another attempt has seen since (and recorded as unknown), or never saved, is left as it is.
 */
export function unclaimText(progress: Progress, attempt: string): void {
  if (progress.text !== SENDING || progress.text_claim !== attempt) return;
  progress.text = '';
  progress.text_claim = undefined;
}

/** Sends the text (outside the lock) and says what happened. */
export function sendText(svc: Pick<MeterServices, 'fetch' | 'base64'>, creds: TwilioCredentials, to: string, body: string): string {
  try {
    const res = svc.fetch(`https://api.twilio.com/2010-04-01/Accounts/${creds.sid}/Messages.json`, {
      method: 'post',
      payload: { To: to, From: creds.from, Body: body },
      headers: { Authorization: `Basic ${svc.base64(`${creds.sid}:${creds.token}`)}` },
      muteHttpExceptions: true,
    });
    const code = res.getResponseCode();
    if (code >= 200 && code < 300) return 'sent';
    return code < 500 ? `unsent: Twilio answered HTTP ${code}` : `unknown: Twilio answered HTTP ${code}`;
  } catch (error) {
    return `unknown: ${(error as Error).message}`;
  }
}

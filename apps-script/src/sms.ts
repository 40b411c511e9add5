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

function credentials(svc: Pick<MeterServices, 'properties'>) {
  const sid = svc.properties.getProperty('TWILIO_ACCOUNT_SID');
  const token = svc.properties.getProperty('TWILIO_AUTH_TOKEN');
  const from = svc.properties.getProperty('TWILIO_FROM');
  return sid && token && from ? { sid, token, from } : null;
}

/**
 * Decides, under the lock, whether this attempt sends the text; updates `progress.text` (the
 * caller saves it). True only when the text has never been attempted and can be sent.
 */
export function claimText(svc: Pick<MeterServices, 'properties'>, progress: Progress): boolean {
  if (progress.text === SENDING) progress.text = SENDING_SEEN;
  if (progress.text) return false;
  if (!credentials(svc)) {
    progress.text = NO_CREDENTIALS;
    return false;
  }
  progress.text = SENDING;
  return true;
}

/** Sends the text (outside the lock) and says what happened. */
export function sendText(svc: Pick<MeterServices, 'properties' | 'fetch' | 'base64'>, to: string, body: string): string {
  const creds = credentials(svc);
  if (!creds) return NO_CREDENTIALS;
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

/**
 * Is this request from Twilio, and is this media stream one we asked for?
 *
 * - Webhooks (`/twilio/voice`, `/twilio/status`): `X-Twilio-Signature` over PUBLIC_URL + path and
 *   the form parameters (twilio's own `validateRequest`, which also tries the URL with and without
 *   the default port, as Twilio may sign either).
 * - The media stream's WebSocket handshake: the same header over the `wss://` URL and no
 *   parameters (Twilio signs WebSocket requests that way).
 * - The stream's ticket: the webhook that answered a call puts its time and HMAC(auth token,
 *   CallSid and that time) in the `<Stream>`'s parameters; Twilio hands it back in the `start`
 *   message. A stream whose ticket does not match its CallSid was not answered by us (or not by any
 *   instance sharing this auth token, so it works behind a load balancer without shared state), and
 *   is refused before anything starts; so is a ticket older than TICKET_TTL_MS (Twilio opens the
 *   stream as soon as it reads the answer: an old ticket is a replayed one). media-stream.ts takes
 *   each ticket once.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { validateRequest } from 'twilio/lib/webhooks/webhooks.js';

/** How long after the answer a ticket opens a stream; instances' clocks may differ by a minute. */
const TICKET_TTL_MS = 10 * 60_000;
const CLOCK_SKEW_MS = 60_000;
/** The longest a ticket can be accepted after it is first used (a stamp up to a minute ahead). */
export const TICKET_VALID_FOR_MS = TICKET_TTL_MS + CLOCK_SKEW_MS;

export class TwilioAuth {
  constructor(
    private readonly authToken: string,
    readonly publicUrl: string,
    readonly mediaUrl: string,
    private readonly now: () => number = Date.now,
  ) {}

  /** A webhook: the path (with its query) under PUBLIC_URL and the parsed form. */
  webhook(signature: string | undefined, pathWithQuery: string, params: Record<string, unknown>): boolean {
    if (!signature) return false;
    return validateRequest(this.authToken, signature, `${this.publicUrl}${pathWithQuery}`, params as Record<string, string>);
  }

  /** The media stream's handshake, signed over its wss:// URL with no parameters. */
  handshake(req: IncomingMessage): boolean {
    const signature = req.headers['x-twilio-signature'];
    if (typeof signature !== 'string' || !signature) return false;
    const query = req.url?.includes('?') ? req.url.slice(req.url.indexOf('?')) : '';
    return validateRequest(this.authToken, signature, `${this.mediaUrl}${query}`, {});
  }

  /**
   * Why a request was refused, for the log: no signature (not from Twilio), or one that does not
   * match the URL it was checked over, which is what an operator behind a proxy needs to see (the
   * path only: a callback's query carries the caller's number).
   */
  refusal(signature: unknown, checkedOver: string): string {
    if (typeof signature !== 'string' || !signature) return 'no X-Twilio-Signature (not sent by Twilio)';
    return (
      `X-Twilio-Signature does not match ${checkedOver}: Twilio signs the URL it requested, so PUBLIC_URL must be the ` +
      "origin of the number's webhook URL (scheme and host as Twilio calls them, not as the proxy forwards them) " +
      "and TWILIO_AUTH_TOKEN the auth token of the number's account"
    );
  }

  /** The ticket the answering webhook puts in the stream's parameters: `<ms>.<mac>`. */
  ticket(callSid: string): string {
    const at = String(Math.floor(this.now()));
    return `${at}.${this.mac(callSid, at)}`;
  }

  /** A ticket this auth token made for this call, within TICKET_TTL_MS of now. */
  ticketMatches(callSid: string, ticket: unknown): boolean {
    const m = typeof ticket === 'string' ? /^(\d{1,15})\.([A-Za-z0-9_-]{43})$/.exec(ticket) : null;
    if (!m) return false;
    const age = this.now() - Number(m[1]);
    if (age > TICKET_TTL_MS || age < -CLOCK_SKEW_MS) return false;
    const want = Buffer.from(this.mac(callSid, m[1]));
    const got = Buffer.from(m[2]);
    return want.length === got.length && timingSafeEqual(want, got);
  }

  private mac(callSid: string, at: string): string {
    return createHmac('sha256', this.authToken).update(`media-stream\u0000${callSid}\u0000${at}`).digest('base64url');
  }
}

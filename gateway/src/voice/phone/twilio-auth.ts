/**
 * Is this request from Twilio, and is this media stream one we asked for?
 *
 * - Webhooks (`/twilio/voice`, `/twilio/status`): `X-Twilio-Signature` over PUBLIC_URL + path and
 *   the form parameters (twilio's own `validateRequest`, which also tries the URL with and without
 *   the default port, as Twilio may sign either).
 * - The media stream's WebSocket handshake: the same header over the `wss://` URL and no
 *   parameters (Twilio signs WebSocket requests that way).
 * - The stream's ticket: the webhook that answered a call puts HMAC(auth token, CallSid) in the
 *   `<Stream>`'s parameters; Twilio hands it back in the `start` message. A stream whose ticket does
 *   not match its CallSid was not answered by us (or not by any instance sharing this auth token,
 *   so it works behind a load balancer without shared state), and is refused before anything
 *   starts.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { validateRequest } from 'twilio/lib/webhooks/webhooks.js';

export class TwilioAuth {
  constructor(
    private readonly authToken: string,
    private readonly publicUrl: string,
    private readonly mediaUrl: string,
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

  /** The ticket the answering webhook puts in the stream's parameters. */
  ticket(callSid: string): string {
    return createHmac('sha256', this.authToken).update(`media-stream\u0000${callSid}`).digest('base64url');
  }

  ticketMatches(callSid: string, ticket: unknown): boolean {
    if (typeof ticket !== 'string') return false;
    const want = Buffer.from(this.ticket(callSid));
    const got = Buffer.from(ticket);
    return want.length === got.length && timingSafeEqual(want, got);
  }
}

/**
 * The TwiML the bridge answers or sends, built with twilio's own builder so that nothing (a
 * caller's number, a configured line) can break out of its attribute or element.
 *
 * The answer connects the media stream and, after it, names a fallback: Twilio runs the verbs that
 * follow `<Connect>` when the stream ends without the call being redirected or completed (the
 * gateway stopped, a socket broke), so a caller is then handed to a person, never left in silence.
 */
import VoiceResponse from 'twilio/lib/twiml/VoiceResponse.js';

/** The short lines the caller hears from Twilio (English; the model speaks the configured language). */
export interface Lines {
  transfer: string;
  closing: string;
  voicemail: string;
  monthlyPause: string;
  unavailable: string;
}

export const DEFAULT_LINES: Lines = {
  transfer: 'One moment, please. I am connecting you to a member of our team.',
  closing: 'I am sorry, I have to end the call now. Thank you for calling. Goodbye.',
  voicemail: 'Thank you for calling. We are closed right now; please call again during our opening hours. Goodbye.',
  monthlyPause: 'Thank you for calling. We cannot take your call right now; please call again later. Goodbye.',
  unavailable: 'Sorry, we cannot take your call right now. Please call again later. Goodbye.',
};

export function answerTwiml(opts: {
  mediaUrl: string;
  parameters: Record<string, string>;
  fallback: { line: string; dial: string | null; unavailable: string };
}): string {
  const r = new VoiceResponse();
  const stream = r.connect().stream({ url: opts.mediaUrl });
  for (const [name, value] of Object.entries(opts.parameters)) stream.parameter({ name, value });
  addTransfer(r, opts.fallback.line, opts.fallback.dial, opts.fallback.unavailable);
  return r.toString();
}

function addTransfer(r: VoiceResponse, line: string, dial: string | null, unavailable: string): void {
  if (dial) {
    r.say(line);
    r.dial(dial);
  } else {
    r.say(unavailable);
    r.hangup();
  }
}

/** The call redirected to a person (or, with no number configured, ended politely). */
export function transferTwiml(line: string, dial: string | null, unavailable: string): string {
  const r = new VoiceResponse();
  addTransfer(r, line, dial, unavailable);
  return r.toString();
}

/** A short message, then the call ends (voicemail and the monthly pause until their own flows exist). */
export function sayAndHangUp(line: string): string {
  const r = new VoiceResponse();
  r.say(line);
  r.hangup();
  return r.toString();
}

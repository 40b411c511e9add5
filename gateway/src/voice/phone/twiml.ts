/**
 * The TwiML the bridge answers or sends, built with twilio's own builder so that nothing (a
 * caller's number, a configured line) can break out of its attribute or element.
 *
 * The answer connects the media stream and, after it, names a fallback: Twilio runs the verbs that
 * follow `<Connect>` when the stream ends without the call being redirected or completed (the
 * gateway stopped, a socket broke), so a caller is then handed to a person, never left in silence.
 * Every `<Dial>` names its action callback, so a person who does not answer sends the caller to
 * voicemail; voicemail says the privacy notice and `<Record>`s, with both callbacks named.
 */
import VoiceResponse from 'twilio/lib/twiml/VoiceResponse.js';
import type { VoicemailReason } from './callback-urls';

/** The short lines the caller hears from Twilio (English; the model speaks the configured language). */
export interface Lines {
  transfer: string;
  closing: string;
  /** Before the recording, by why the caller is in voicemail. */
  voicemail: string;
  noAnswer: string;
  networkIssue: string;
  /** The monthly cap: no conversation, voicemail offered. */
  monthlyPause: string;
  /** A caller who asked the agent to leave a message. */
  messageRequested: string;
  privacyNotice: string;
  /** After the message (or when nothing was recorded). */
  voicemailThanks: string;
  unavailable: string;
  /** A caller who declines the consent line, and one who never answers it. */
  optedOut: string;
  noConsent: string;
}

export const DEFAULT_LINES: Lines = {
  transfer: 'One moment, please. I am connecting you to a member of our team.',
  closing: 'I am sorry, I have to end the call now. Thank you for calling. Goodbye.',
  voicemail: 'Thank you for calling. We are closed right now.',
  noAnswer: 'I am sorry, nobody from our team is free to take your call right now.',
  networkIssue: 'I am sorry, we are having trouble on our side.',
  monthlyPause:
    'Thank you for calling. We cannot take your call right now. If you like, leave a message after the tone, or simply hang up.',
  messageRequested: 'Of course.',
  privacyNotice:
    'Please leave your name, number and message after the tone. Your message is recorded and stored only so that we can call you back.',
  voicemailThanks: 'Thank you. We will call you back. Goodbye.',
  unavailable: 'Sorry, we cannot take your call right now. Please call again later. Goodbye.',
  optedOut: 'Understood. This call will not go on, and we will not contact you again. Goodbye.',
  noConsent: 'I did not hear an answer, so I will end the call now. Please call again any time. Goodbye.',
};

/** Where a `<Dial>` reports how it ended (a person busy or not answering → voicemail). */
export interface DialTarget {
  number: string | null;
  action: string;
}

/** The longest voicemail, in seconds. */
const VOICEMAIL_MAX_S = 120;
/** How long a `<Dial>` rings before it counts as not answered, in seconds. */
const DIAL_TIMEOUT_S = 25;

export function answerTwiml(opts: {
  mediaUrl: string;
  parameters: Record<string, string>;
  fallback: { line: string; dial: DialTarget; unavailable: string };
}): string {
  const r = new VoiceResponse();
  const stream = r.connect().stream({ url: opts.mediaUrl });
  for (const [name, value] of Object.entries(opts.parameters)) stream.parameter({ name, value });
  addTransfer(r, opts.fallback.line, opts.fallback.dial, opts.fallback.unavailable);
  return r.toString();
}

function addTransfer(r: VoiceResponse, line: string, dial: DialTarget, unavailable: string): void {
  if (dial.number) {
    r.say(line);
    r.dial({ action: dial.action, method: 'POST', timeout: DIAL_TIMEOUT_S }, dial.number);
  } else {
    r.say(unavailable);
    r.hangup();
  }
}

/** The call redirected to a person (or, with no number configured, ended politely). */
export function transferTwiml(line: string, dial: DialTarget, unavailable: string): string {
  const r = new VoiceResponse();
  addTransfer(r, line, dial, unavailable);
  return r.toString();
}

/** A short message, then the call ends. */
export function sayAndHangUp(line: string): string {
  const r = new VoiceResponse();
  r.say(line);
  r.hangup();
  return r.toString();
}

/** The line that opens voicemail, by why the caller is there. */
function voicemailLine(lines: Lines, reason: VoicemailReason): string {
  return {
    after_hours: lines.voicemail,
    no_answer: lines.noAnswer,
    network_issue: lines.networkIssue,
    monthly_cap: lines.monthlyPause,
    caller_request: lines.messageRequested,
  }[reason];
}

/**
 * Voicemail: the reason's line, the privacy notice (the voicemail intent's `privacy_notice`), then
 * `<Record>` with the recording callback (the message goes to the back office) and the action
 * callback (the caller hears thanks). When nothing is recorded Twilio goes on past `<Record>`:
 * the thanks and a hang-up, never silence.
 */
export function voicemailTwiml(opts: {
  lines: Lines;
  reason: VoicemailReason;
  privacyNotice: boolean;
  recordingCallback: string;
  action: string;
}): string {
  const r = new VoiceResponse();
  r.say(voicemailLine(opts.lines, opts.reason));
  if (opts.privacyNotice) r.say(opts.lines.privacyNotice);
  r.record({
    action: opts.action,
    method: 'POST',
    recordingStatusCallback: opts.recordingCallback,
    recordingStatusCallbackMethod: 'POST',
    maxLength: VOICEMAIL_MAX_S,
    playBeep: true,
    timeout: 5,
    trim: 'trim-silence',
  });
  r.say(opts.lines.voicemailThanks);
  r.hangup();
  return r.toString();
}

/** After a transfer that connected and ended: nothing more to say. */
export function hangUpTwiml(): string {
  const r = new VoiceResponse();
  r.hangup();
  return r.toString();
}

/**
 * The gateway's own Twilio callbacks, named in the TwiML it answers as absolute URLs under
 * PUBLIC_URL (Twilio signs each request over the URL it was given, query included, so what the
 * URL carries cannot be changed on the way):
 *   /twilio/voicemail/recording  `<Record recordingStatusCallback>`: the recording is ready
 *   /twilio/voicemail/recorded   `<Record action>`: the caller finished the message
 *   /twilio/dial                 `<Dial action>`: how the transfer to a person ended
 * Each carries why the caller is in voicemail (`reason`) and the caller's number (`from`, only when
 * it looks like one): the recording callback does not send the caller's number, and the URLs keep
 * every instance behind a load balancer able to answer any callback without shared state.
 */

export const CALLBACK_PATHS = {
  recording: '/twilio/voicemail/recording',
  recorded: '/twilio/voicemail/recorded',
  dial: '/twilio/dial',
} as const;

/**
 * Why a caller is sent to voicemail: the voicemail intent's triggers, the monthly pause, and a
 * caller who asked to leave a message during the conversation (the model's voicemail call).
 */
const VOICEMAIL_REASONS = ['after_hours', 'no_answer', 'network_issue', 'monthly_cap', 'caller_request'] as const;
export type VoicemailReason = (typeof VOICEMAIL_REASONS)[number];

const PHONE = /^\+?[0-9]{3,16}$/;

export const isPhone = (s: unknown): s is string => typeof s === 'string' && PHONE.test(s);

export class CallbackUrls {
  constructor(private readonly publicUrl: string) {}

  recording(reason: VoicemailReason, from: string | null): string {
    return this.url(CALLBACK_PATHS.recording, { reason, from });
  }

  recorded(reason: VoicemailReason, from: string | null): string {
    return this.url(CALLBACK_PATHS.recorded, { reason, from });
  }

  dial(from: string | null): string {
    return this.url(CALLBACK_PATHS.dial, { from });
  }

  private url(path: string, params: Record<string, string | null>): string {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(params)) if (v && (k !== 'from' || isPhone(v))) q.set(k, v);
    const query = q.toString();
    return `${this.publicUrl}${path}${query ? `?${query}` : ''}`;
  }
}

/** The callback's query, checked: a reason we never send is refused, a number that is not one is dropped. */
export function callbackQuery(query: Record<string, unknown>): { reason: VoicemailReason | null; from: string | null } {
  const reason = (VOICEMAIL_REASONS as readonly string[]).includes(String(query.reason)) ? (query.reason as VoicemailReason) : null;
  return { reason, from: isPhone(query.from) ? query.from : null };
}

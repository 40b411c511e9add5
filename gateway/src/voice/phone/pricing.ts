/**
 * The pricing deflection over the phone. When the model looks up the pricing page (the function
 * with a `static_url`), the caller gets a text with the link, at most once per call, through
 * Twilio's Messages API from the number they called, the same request as the back office's
 * texts; the model is handed the intent's short message, the text's status and the callback offer
 * with its window, so it says them; and the offer is recorded on the call's summary (`pricing`:
 * link, text status, offered, window, the time the window closes) and in the log.
 */
import type { Concierge } from '../config';
import type { CallControl } from './twilio-calls';

export interface PricingRecord {
  link: string;
  /** `sent`, `unsent: …` or `unknown: …` (as the back office records texts). */
  text: string;
  callback_offered: boolean;
  callback_minutes_window: number | null;
  /** RFC 3339: the end of the window in which the business offered to call back. */
  callback_by: string | null;
}

export class PricingDeflection {
  private done: PricingRecord | null = null;
  /** The one text of the call, once asked for: a second lookup while it is on its way waits for it. */
  private sending: Promise<PricingRecord> | null = null;
  private readonly fn: string | null;

  constructor(
    private readonly opts: {
      config: Concierge;
      calls: Pick<CallControl, 'text'>;
      callSid: string;
      /** The caller's number, and the number they called (the text's sender). */
      caller: string | null;
      business: string | null;
      log: { info: (m: string) => void; warn: (m: string) => void };
    },
  ) {
    this.fn = opts.config.functions.find((f) => f.static_url)?.name ?? null;
  }

  get record(): PricingRecord | null {
    return this.done;
  }

  /** The function's result, with what the model needs to say (unchanged for any other function). */
  async handle(fn: string, result: unknown): Promise<unknown> {
    if (fn !== this.fn) return result;
    const intent = this.opts.config.intents.find((i) => i.id === 'pricing_deflection')?.on_match;
    const link = intent?.link ?? String((result as { url?: unknown } | null)?.url ?? '');
    this.sending ??= this.send(link, intent?.offer_callback === true ? (intent.callback_minutes_window ?? 15) : null);
    this.done = await this.sending;
    return {
      ...(result && typeof result === 'object' ? result : {}),
      say: intent?.say ?? '',
      text: this.done.text,
      offer_callback: this.done.callback_offered,
      ...(this.done.callback_offered ? { callback_minutes_window: this.done.callback_minutes_window } : {}),
    };
  }

  private async send(link: string, window: number | null): Promise<PricingRecord> {
    const { calls, caller, business, callSid, log } = this.opts;
    const text = !caller
      ? 'unsent: the caller’s number is unknown'
      : !business
        ? 'unsent: the called number is unknown'
        : await calls.text(caller, business, `Our prices: ${link}`);
    const by = window === null ? null : new Date(Date.now() + window * 60_000).toISOString();
    log[text === 'sent' ? 'info' : 'warn'](
      `call ${callSid}: pricing link text ${text}${by ? `; callback offered within ${window} min (until ${by})` : ''}`,
    );
    return { link, text, callback_offered: window !== null, callback_minutes_window: window, callback_by: by };
  }
}

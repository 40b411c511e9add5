/**
 * Consent: the opening line is the first thing the caller hears, and the caller's answer decides
 * whether the call goes on. Acknowledgement is decided by the bridge, not the model, so it is the
 * same on every call and testable: the caller's transcribed words after the line are classified
 * by keyword lists (below, English, Portuguese, Spanish, French, German), first match wins:
 *
 *   declined   an opt-out phrase ("don't record", "opt out", "no thanks", "não quero", …), or an
 *              answer that starts with a plain no ("no", "nope", "não", "non", "nein", …)
 *   yes        an agreement ("yes", "ok", "sure", "go ahead", "no problem" and its like in each
 *              language, "no hay problema", "não faz mal", though they start with a no, "sim", …), or
 *              a request that names an intent's trigger ("I want to book …"): going on with the
 *              call after hearing the line is agreeing to it
 *   unclear    anything else ("hello?", "what?"), or silence: nothing transcribed within
 *              `waitMs` (8 s) of the line's end, the caller's own speech restarting the wait
 *              (never while the line or its repeat is still being said)
 *
 * Only words said after the line was heard to its end answer it, except a refusal, which counts
 * whenever it comes, and an agreement said over its repeat (the caller heard it once); words that
 * are neither, said over the repeat, are no answer: it is heard to its end.
 * Unclear: with `consent.retry_if_no_ack` the line is said again, at most `max_retries` times;
 * after that (or without retries) the call ends politely (`no_consent`, not an opt-out). Declined:
 * the caller is told, the call ends (`opted_out`) and the contact is tagged in the back office.
 * Why keywords rather than a model's function call: the answer to a yes/no question is short and
 * its words are few; a keyword decision cannot be talked out of by the caller, costs no model
 * turn, and is the same in tests as on the line.
 */

export type Ack = 'yes' | 'declined' | 'unclear';

const DECLINE_PHRASES = [
  "don't record",
  'do not record',
  "don't want",
  'do not want',
  "don't agree",
  'do not agree',
  "don't consent",
  'do not consent',
  'not ok',
  'not okay',
  'not fine',
  'opt out',
  'remove me',
  'no thanks',
  'no thank you',
  'rather not',
  'i decline',
  'i refuse',
  'não quero',
  'não aceito',
  'não concordo',
  'nao quero',
  'no quiero',
  'no acepto',
  'je refuse',
  'nicht einverstanden',
];
const YES_PHRASES = [
  'yes',
  'yeah',
  'yep',
  'yup',
  'ok',
  'okay',
  'sure',
  'fine',
  'alright',
  'all right',
  'of course',
  'go ahead',
  // "No problem" in each language: it starts with a plain no, and is an agreement.
  'no problem',
  'no worries',
  "don't mind",
  'do not mind',
  'no hay problema',
  'no pasa nada',
  'no me importa',
  'sin problema',
  'não tem problema',
  'não há problema',
  'nao tem problema',
  'nao ha problema',
  'sem problema',
  'não faz mal',
  'nao faz mal',
  'não me importo',
  'nao me importo',
  'pas de problème',
  'pas de probleme',
  'pas de souci',
  'kein problem',
  'i agree',
  'agreed',
  'sim',
  'claro',
  'pode ser',
  'está bem',
  'esta bem',
  'tudo bem',
  'concordo',
  'sí',
  'si',
  'vale',
  'de acuerdo',
  'oui',
  "d'accord",
  'ja',
  'einverstanden',
];
const PLAIN_NO = new Set(['no', 'nope', 'nah', 'não', 'nao', 'non', 'nein']);

/** Lower case, curly quotes straight, punctuation as spaces, single spaces. */
function words(text: string): string {
  return ` ${text
    .toLowerCase()
    .replace(/[\u2018\u2019]/g, "'")
    .replace(/[^\p{L}\p{N}' ]+/gu, ' ')
    .replace(/\s+/g, ' ')
    .trim()} `;
}

const has = (w: string, phrase: string) => w.includes(` ${phrase} `);

/** The caller's answer to the opening line. `triggers`: the intents' trigger words and phrases. */
export function classifyAck(text: string, triggers: string[]): Ack {
  const w = words(text);
  if (DECLINE_PHRASES.some((p) => has(w, p))) return 'declined';
  if (YES_PHRASES.some((p) => has(w, p))) return 'yes';
  if (PLAIN_NO.has(w.trim().split(' ')[0])) return 'declined';
  if (triggers.some((t) => has(w, words(t).trim()))) return 'yes';
  return 'unclear';
}

export interface ConsentActions {
  /** Say the opening line again. */
  repeat(): void;
  /** The caller declined: tell them, end the call, tag the contact. */
  declined(text: string): void;
  /** No acknowledgement after the retries: end the call politely. */
  noAck(): void;
}

/** The consent state of one call: waiting for an answer to the line, then settled. */
export class ConsentGate {
  private state: 'waiting' | 'settled' = 'waiting';
  /** Agreement counts only once the line was heard; a refusal counts at any time. */
  private lineWasHeard = false;
  /**
   * The line (or its repeat) is being said: silence is not timed until it is heard to its end, or
   * a caller who spoke as it began would be "unanswered" while it still plays (and it cut off).
   */
  private lineDue = true;
  private retries = 0;
  private timer: NodeJS.Timeout | null = null;

  constructor(
    private readonly opts: {
      retryIfNoAck: boolean;
      maxRetries: number;
      triggers: string[];
      waitMs: number;
      actions: ConsentActions;
    },
  ) {}

  get settled(): boolean {
    return this.state === 'settled';
  }

  /** The line (or its repeat) has been heard to the end: the wait for an answer starts. */
  lineHeard(): void {
    this.lineWasHeard = true;
    this.lineDue = false;
    if (this.state === 'waiting') this.arm();
  }

  /** The caller is speaking: no silence timeout while they do. */
  speechStarted(): void {
    this.disarm();
  }

  /** The caller stopped speaking: the transcript is coming; if it never does, that is silence. */
  speechStopped(): void {
    if (this.state === 'waiting' && !this.lineDue) this.arm();
  }

  /** A transcript of the caller; what the classification decides. */
  heard(text: string): Ack | null {
    if (this.state !== 'waiting') return null;
    const ack = classifyAck(text, this.opts.triggers);
    if (ack !== 'declined' && !this.lineWasHeard) return null; // said before the line: not an answer to it
    // Said over the line being said again ("what?"): the caller has not heard it yet, the line goes on.
    if (ack === 'unclear' && this.lineDue) return null;
    if (ack === 'yes') this.settle();
    else if (ack === 'declined') {
      this.settle();
      this.opts.actions.declined(text);
    } else this.unanswered();
    return ack;
  }

  /** The call is over: no timer left behind. */
  close(): void {
    this.settle();
  }

  private unanswered(): void {
    this.disarm();
    if (this.opts.retryIfNoAck && this.retries < this.opts.maxRetries) {
      this.retries++;
      this.lineDue = true;
      return this.opts.actions.repeat();
    }
    this.settle();
    this.opts.actions.noAck();
  }

  private arm(): void {
    this.disarm();
    this.timer = setTimeout(() => this.unanswered(), this.opts.waitMs);
    this.timer.unref();
  }

  private disarm(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
  }

  private settle(): void {
    this.disarm();
    this.state = 'settled';
  }
}

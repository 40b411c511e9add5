/**
 * Intent matching by the configured triggers: case-insensitive, whole words and phrases ("book"
 * matches "I'd like to book a table" but not "booking"... nor "notebook"). The first intent, in
 * configuration order, with a trigger in the caller's words wins; none → `unknown`.
 */
import type { IntentId } from './config';

/**
 * Words as they are compared: lower case, a typographic apostrophe as a plain one, any other
 * punctuation and runs of spaces as one space. The configured phrase goes through it too, so a
 * trigger or marker typed with punctuation ("no, no, no", "this is ridiculous!") still matches.
 */
export const normalise = (text: string) =>
  ` ${text
    .toLowerCase()
    .replace(/[\u2018\u2019]/g, "'")
    .replace(/[^\p{L}\p{N}_' ]+/gu, ' ')
    .replace(/\s+/g, ' ')
    .trim()} `;

export function matchIntent(text: string, intents: Array<{ id: IntentId; triggers: string[] }>): IntentId | 'unknown' {
  const words = normalise(text);
  for (const intent of intents) {
    if (intent.triggers.some((t) => words.includes(normalise(t)))) return intent.id;
  }
  return 'unknown';
}

/**
 * The triggers that can never match, each as a sentence: an earlier intent's trigger is in them
 * ("move appointment" after book's "appointment"), so the earlier intent wins every time. A file
 * made from a template that listed book first still has it; logged at start, as a warning (the
 * lint refusing it would stop a running deployment at its upgrade).
 */
export function shadowedTriggers(intents: Array<{ id: IntentId; triggers: string[] }>): string[] {
  const out: string[] = [];
  intents.forEach((intent, i) =>
    intent.triggers.forEach((trigger, j) => {
      const earlier = intents.slice(0, i).find((e) => e.triggers.some((t) => normalise(trigger).includes(normalise(t))));
      if (!earlier) return;
      const by = earlier.triggers.find((t) => normalise(trigger).includes(normalise(t)))!;
      out.push(
        `$.intents[${i}].triggers[${j}]: "${trigger}" never matches: the ${earlier.id} intent, before it, matches its "${by}" first, so such callers are recorded as ${earlier.id}; put ${intent.id} before ${earlier.id}`,
      );
    }),
  );
  return out;
}

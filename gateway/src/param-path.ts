/**
 * A request body's field as OpenAI names it in an error's `param` and message:
 * `messages[3].content`, `input[1]`, `tools[0].function.name`. One form on every endpoint, so a
 * client that reads `param` finds the field the same way whichever endpoint refused it.
 */
import type { z } from 'zod';
import type { Refused } from './endpoint';

/** `['messages', 3, 'content']` → `messages[3].content`. */
export function paramOf(path: ReadonlyArray<PropertyKey>): string {
  return path.reduce<string>((name, key) => {
    if (typeof key === 'number') return `${name}[${key}]`;
    return name ? `${name}.${String(key)}` : String(key);
  }, '');
}

/** The refusal of a body zod did not accept: its first issue, the field named as `param` (null: the body itself). */
export function bodyRefusal(error: z.ZodError): Refused {
  const issue = error.issues[0];
  const param = issue.path.length ? paramOf(issue.path) : null;
  return { ok: false, message: `${param ?? 'body'}: ${issue.message}`, param };
}

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

/** The value at `path` in `body`: undefined for a field left out. */
function valueAt(body: unknown, path: ReadonlyArray<PropertyKey>): unknown {
  return path.reduce<unknown>((v, key) => (v as Record<PropertyKey, unknown> | null | undefined)?.[key], body);
}

/**
 * OpenAI's code for an issue. A custom check names it as `params.code`, or says the JS type it
 * takes as `params.type`: a value of that type failed a range, any other the type. Unions are of
 * types here (a string or an array).
 */
function codeOf(issue: z.core.$ZodIssue, value: unknown): string {
  if (value === undefined && issue.path.length) return 'missing_required_parameter';
  if (issue.code === 'unrecognized_keys') return 'unknown_parameter';
  if (issue.code === 'invalid_type' || issue.code === 'invalid_union') return 'invalid_type';
  if (issue.code === 'custom' && typeof issue.params?.code === 'string') return issue.params.code;
  const type: unknown = issue.code === 'custom' ? issue.params?.type : undefined;
  return type === undefined || isOfType(value, type) ? 'invalid_value' : 'invalid_type';
}

/** Whether `value` is of the JS `type` a field takes; 'integer' too: a decimal there is of the wrong type, as OpenAI says. */
export function isOfType(value: unknown, type: unknown): boolean {
  if (type === 'array') return Array.isArray(value);
  return type === 'integer' ? Number.isInteger(value) : typeof value === type;
}

/** The refusal of a body zod did not accept: its first issue, the field named as `param` (null: the body itself). */
export function bodyRefusal(error: z.ZodError, body: unknown): Refused {
  const issue = error.issues[0];
  const param = issue.path.length ? paramOf(issue.path) : null;
  const code = codeOf(issue, valueAt(body, issue.path));
  return { ok: false, message: `${param ?? 'body'}: ${issue.message}`, param, code };
}

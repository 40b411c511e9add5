/**
 * An embeddings request's `input`, checked with plain loops: a body of 2048 arrays of token ids
 * holds millions of numbers, which a zod union walks slowly enough to stall the event loop for
 * every other request. OpenAI's limits are checked on the arrays' lengths first, so a body past
 * them is refused before any number in it is looked at.
 */

/** What is wrong with an input: the message and where (`[1, 0]`: `input[1][0]`); `wrongType`: no form fits it. */
export interface InputIssue {
  message: string;
  path: number[];
  wrongType?: true;
}

/** OpenAI's limits: inputs in one request, token ids summed across them, and per input of its own models. */
const MAX_INPUTS = 2048;
const MAX_TOKENS = 300_000;
const MAX_INPUT_TOKENS = 8192;
const OPENAI_MODEL = /^text-embedding-(3-small|3-large|ada-002)$/;

const ANY_OF = 'expected a non-empty string, an array of strings, an array of token ids or an array of token-id arrays';
const NOT_A_TOKEN = 'expected a token id (an integer from 0)';
const shape = (path: number[] = []): InputIssue => ({ message: ANY_OF, path, wrongType: true });

/** The first token id that is not one (an issue at `path`), or null; a value of another type is `shape`. */
function tokenIssue(ids: unknown[], path: number[]): InputIssue | null {
  if (ids.length === 0) return { message: 'expected at least one token id', path };
  let bad = -1;
  for (let i = 0; i < ids.length; i++) {
    const id = ids[i];
    if (typeof id !== 'number') return shape();
    if (bad < 0 && !(Number.isInteger(id) && id >= 0)) bad = i;
  }
  return bad < 0 ? null : { message: NOT_A_TOKEN, path: [...path, bad] };
}

function stringsIssue(texts: unknown[]): InputIssue | null {
  if (!texts.every((t) => typeof t === 'string')) return shape();
  const empty = texts.findIndex((t) => t === '');
  return empty < 0 ? null : { message: 'expected a non-empty string', path: [empty] };
}

/** Token ids summed across the inputs given as tokens (strings are not counted: that takes a tokenizer). */
function tokenCount(input: unknown[]): number {
  if (typeof input[0] === 'number') return input.length;
  let count = 0;
  for (const item of input) if (Array.isArray(item)) count += item.length;
  return count;
}

function arraysIssue(arrays: unknown[]): InputIssue | null {
  if (!arrays.every(Array.isArray)) return shape();
  let first: InputIssue | null = null;
  for (let i = 0; i < arrays.length; i++) {
    const issue = tokenIssue(arrays[i] as unknown[], [i]);
    if (issue?.wrongType) return issue; // a value of another type anywhere: no form fits
    first ??= issue;
  }
  return first;
}

/** Whether `input` is one of OpenAI's four forms within its limits; null when it is. */
export function inputIssue(input: unknown): InputIssue | null {
  if (typeof input === 'string') return input ? null : { message: 'expected a non-empty string', path: [] };
  if (!Array.isArray(input) || input.length === 0) return shape();
  // One array of token ids is one input, however long; else each item is one.
  const tokens = typeof input[0] === 'number';
  if (!tokens && input.length > MAX_INPUTS) return { message: `expected at most ${MAX_INPUTS} inputs`, path: [] };
  const count = tokenCount(input);
  if (count > MAX_TOKENS) return { message: `expected at most ${MAX_TOKENS} tokens in all inputs (got ${count})`, path: [] };
  if (tokens) return tokenIssue(input, []);
  if (typeof input[0] === 'string') return stringsIssue(input);
  return Array.isArray(input[0]) ? arraysIssue(input) : shape();
}

/** An input of token ids longer than OpenAI's own embeddings model takes; null for any other model. */
export function inputTooLong(model: string, input: unknown): InputIssue | null {
  if (!OPENAI_MODEL.test(model) || !Array.isArray(input)) return null;
  const over = (length: number, path: number[]) =>
    length > MAX_INPUT_TOKENS
      ? { message: `expected at most ${MAX_INPUT_TOKENS} tokens per input for ${model} (got ${length})`, path }
      : null;
  if (typeof input[0] === 'number') return over(input.length, []);
  for (let i = 0; i < input.length; i++) {
    const issue = Array.isArray(input[i]) ? over((input[i] as unknown[]).length, [i]) : null;
    if (issue) return issue;
  }
  return null;
}

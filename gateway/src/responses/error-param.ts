/**
 * A provider's refusal of a translated request names chat's parameters (`max_tokens`,
 * `messages[3].content`, `tools[0].function.parameters`), which the client never sent. Where a
 * chat parameter came from one Responses parameter, the error names that one instead
 * (`max_output_tokens`, `input[2].content`, `tools[0].parameters`), in `param` and wherever the
 * message quotes it; any other error is left as the provider wrote it, status and all.
 */
import { isObject } from '../json-object';
import { paramOf } from '../param-path';
import { messageSources, responsesToChat, type MessageSource } from './request';

type Json = Record<string, unknown>;
type Path = Array<string | number>;

/** `messages[3].content`, `messages.[3].content` (OpenAI's older form) or `messages.3.content`, as keys and indexes. */
function pathOf(param: string): Path | null {
  if (!/^[A-Za-z_][\w.[\]]*$/.test(param)) return null;
  return param
    .split(/[.[\]]+/)
    .filter(Boolean)
    .map((key) => (/^\d+$/.test(key) ? Number(key) : key));
}

const TOP_LEVEL: Record<string, string> = {
  max_tokens: 'max_output_tokens',
  max_completion_tokens: 'max_output_tokens',
  reasoning_effort: 'reasoning.effort',
  verbosity: 'text.verbosity',
  logprobs: 'include', // asked for there (request.ts)
};

/** The Responses parameter a chat parameter came from, or null when it is not one alone. */
function responsesParam(chatParam: string, request: Json): string | null {
  const path = pathOf(chatParam);
  if (!path) return null;
  const [head, ...rest] = path;
  if (typeof head === 'string' && Object.hasOwn(TOP_LEVEL, head)) return rest.length ? null : TOP_LEVEL[head];
  if (head === 'response_format') return formatParam(rest);
  if (head === 'tools' && typeof rest[0] === 'number') return toolParam(rest[0], rest.slice(1), request);
  if (head === 'tool_choice' && rest[0] === 'function') return 'tool_choice.name';
  if (head === 'messages' && typeof rest[0] === 'number') {
    const source = messageSources(request)?.[rest[0]];
    return source ? messageParam(source, rest.slice(1)) : null;
  }
  return null;
}

/** `response_format.json_schema.schema` → `text.format.schema`: the schema's fields are flat in text.format. */
function formatParam(rest: Path): string {
  const inner = rest[0] === 'json_schema' ? rest.slice(1) : rest;
  return paramOf(['text', 'format', ...inner]);
}

/** `tools[i].function.name` → `tools[j].name`, j the request's tool of that name (allowed_tools may send fewer). */
function toolParam(index: number, rest: Path, request: Json): string | null {
  const translated = responsesToChat(request);
  const chatTool = translated.ok && Array.isArray(translated.chat.tools) ? (translated.chat.tools[index] as Json | undefined) : undefined;
  const name = isObject(chatTool?.function) ? chatTool.function.name : undefined;
  const tools = Array.isArray(request.tools) ? request.tools : [];
  const matches = tools.flatMap((tool, j) => (isObject(tool) && tool.type === 'function' && tool.name === name ? [j] : []));
  if (matches.length !== 1) return null;
  return paramOf(['tools', matches[0], ...(rest[0] === 'function' ? rest.slice(1) : rest)]);
}

/** A chat tool call's fields as the `function_call` item names them. */
const CALL_FIELDS: Record<string, string> = { id: 'call_id', 'function.name': 'name', 'function.arguments': 'arguments' };

/** `messages[i]…` as the input item (or `instructions`) it came from; within it, only what reads the same. */
function messageParam(source: MessageSource, rest: Path): string | null {
  if (rest[0] === 'tool_calls') {
    const call = typeof rest[1] === 'number' ? source.calls[rest[1]] : undefined;
    const field = CALL_FIELDS[rest.slice(2).join('.')];
    return call && field ? `${call}.${field}` : (call ?? null);
  }
  if (source.content.length !== 1) return null; // none (a call's message) or two joined
  const item = source.content[0];
  if (!item.startsWith('input[')) return item; // `instructions`, or `input` as text
  if (source.output && rest[0] === 'tool_call_id') return `${item}.call_id`;
  if (rest[0] === 'role' && !source.output) return `${item}.role`;
  if (rest[0] !== 'content') return item;
  // Content parts keep their order; the fields inside a part are named differently.
  const part = typeof rest[1] === 'number' ? `[${rest[1]}]` : '';
  return `${item}.${source.output ? 'output' : 'content'}${part}`;
}

/**
 * The provider's error body with the Responses names, or null to send it as it came. Only
 * `error.param` and its mentions in `error.message` change.
 */
export function renameErrorParam(body: Buffer, request: Json): string | null {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body.toString('utf8'));
  } catch {
    return null;
  }
  const error = isObject(parsed) ? parsed.error : undefined;
  if (!isObject(error) || typeof error.param !== 'string') return null;
  const name = responsesParam(error.param, request);
  if (!name || name === error.param) return null;
  const message = typeof error.message === 'string' ? error.message.split(error.param).join(name) : error.message;
  return JSON.stringify({ ...(parsed as Json), error: { ...error, param: name, message } });
}

/**
 * (Over 300 lines: one translation, kept whole so each field's rule sits beside the others.)
 *
 * A Responses API request (`POST /v1/responses`) as a chat-completions request, for routes whose
 * provider offers only chat completions. What chat cannot express is refused, naming the
 * parameter, so the client gets a clear 400 instead of an answer to another question.
 *
 * Translated:
 * - `input`: a string (one user message) or items: `message` (roles user, assistant, system,
 *   developer; content a string or parts `input_text`, `output_text`, `refusal`, `input_image`,
 *   `input_file` with inline data), `function_call` (an assistant message's `tool_calls`; calls
 *   in a row, and a call right after an assistant message, share one assistant message, as chat
 *   gives them; so does an assistant message right after calls, text a provider streamed after
 *   calling), `function_call_output` (a `tool` message).
 * - `instructions` → a leading system message. `developer` messages become `system` messages
 *   (the same thing in chat, and the role every chat provider knows).
 * - `tools` of type `function` (flat) → chat's nested `{type: 'function', function: {…}}`.
 * - `tool_choice`: `auto`/`none`/`required`, `{type: 'function', name}`, and `allowed_tools`
 *   (function tools only: chat gets just those tools and the mode as its tool_choice).
 * - `max_output_tokens` → `max_completion_tokens` (OpenAI's name; call-plan.ts gives other
 *   provider kinds `max_tokens`);
 *   `temperature`, `top_p`, `parallel_tool_calls` (with tools only: chat refuses it without),
 *   `user`, `safety_identifier` as they are; `reasoning.effort` → `reasoning_effort`;
 *   `text.format` json_schema / json_object → `response_format`; `text.verbosity` → `verbosity`;
 *   `include` asking for `message.output_text.logprobs` → `logprobs: true` and `top_logprobs`
 *   (answer.ts and stream.ts give them back in the output text).
 * - `stream: true` → `stream: true` with `stream_options.include_usage` (the usage is needed for
 *   `response.completed` and the meter).
 *
 * Refused (they need OpenAI's state or tools, or change what the answer would be):
 * `previous_response_id`, `conversation`, `prompt` (stored prompts), `background: true`,
 * `context_management` (server-side compaction), `moderation`, `reasoning.mode` other than
 * `standard`; built-in and other non-function tools (`web_search`, `file_search`,
 * `code_interpreter`, `computer_use_preview`, `image_generation`, `mcp`, `custom`, `namespace`, …)
 * and a `tool_choice` naming one; input items other than the three above (built-in tool calls and
 * their outputs, `item_reference`, `compaction`, …); files and images given by `file_id` or
 * `file_url` (stored at OpenAI); images and files in system messages or tool outputs (chat takes
 * text only there); an unknown top-level parameter (OpenAI refuses those too).
 *
 * Ignored (no effect a chat provider could honour, and nothing the client would miss):
 * - `store`: nothing is stored here either way; `include`'s other output data (encrypted
 *   reasoning, tool results) that a chat answer has none of; `top_logprobs` without logprobs
 *   asked for (only returned through `include`); `stream_options` (obfuscation padding);
 * - `prompt_cache_key`, `prompt_cache_retention`, `prompt_cache_options`, `service_tier`:
 *   provider-side caching and capacity hints (OpenAI's chat API takes `service_tier`, other chat
 *   providers do not: the call runs at the standard tier); `truncation`: matters only past the context window;
 * - `max_tool_calls`: bounds calls to built-in tools, which a chat route refuses (above);
 * - `metadata`: kept on the Response object only (chat's `metadata` needs `store` at OpenAI and
 *   is unknown to other providers);
 * - `reasoning.summary` / `generate_summary` / `context`: no reasoning items come back;
 * - `model`: the route sets it;
 * - in items: `id`, `status`, `phase`, the SDK's `parsed`/`parsed_arguments`, and on function
 *   tools `defer_loading`, `allowed_callers`, `output_schema`;
 * - `reasoning` input items: a chat model cannot read another model's reasoning (encrypted or
 *   not), and dropping it leaves the visible conversation whole. Refusing them would break every
 *   stateless conversation (`store: false`, reasoning passed back) that fails over from a route
 *   offering the Responses API.
 */
import { isObject } from '../json-object';
import { isOfType } from '../param-path';

export type Refusal = {
  ok: false;
  message: string;
  param: string | null;
  code: 'unsupported_parameter' | 'invalid_value' | 'invalid_type' | 'missing_required_parameter';
  /** A value no route takes (a parameter of the wrong type): refused, not passed to a native route. */
  everywhere?: true;
};

export type ChatTranslation = { ok: true; chat: Record<string, unknown> } | Refusal;

type Json = Record<string, unknown>;
type ChatMessage = Json & { role: string };

class Refused extends Error {
  constructor(readonly refusal: Refusal) {
    super(refusal.message);
  }
}

const refuse = (code: Refusal['code'], param: string | null, message: string, everywhere?: true): never => {
  throw new Refused({ ok: false, message, param, code, ...(everywhere ? { everywhere } : {}) });
};
const unsupported = (param: string, message: string) => refuse('unsupported_parameter', param, message);
const invalid = (param: string, message: string) => refuse('invalid_value', param, message);

const isSet = (v: unknown) => v !== undefined && v !== null;

/**
 * Checks an optional field: absent or null passes; anything else must satisfy `ok` (OpenAI refuses it
 * too): `invalid_type` for a value not of `type`, `invalid_value` for one of it out of range.
 */
function optional(
  body: Json,
  key: string,
  ok: (v: unknown) => boolean,
  what: string,
  type: 'string' | 'number' | 'integer' | 'boolean' | 'object' | 'array',
): void {
  const v = body[key];
  if (isSet(v) && !ok(v)) refuse(isOfType(v, type) ? 'invalid_value' : 'invalid_type', key, `'${key}' must be ${what}.`, true);
}
const isString = (v: unknown): v is string => typeof v === 'string';
const isNumber = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v);
const isBoolean = (v: unknown): v is boolean => typeof v === 'boolean';

/** Parameters translated below, and those ignored (see the header); any other is refused. */
const TRANSLATED = new Set([
  'model',
  'input',
  'instructions',
  'tools',
  'tool_choice',
  'parallel_tool_calls',
  'max_output_tokens',
  'temperature',
  'top_p',
  'user',
  'safety_identifier',
  'stream',
  'text',
  'reasoning',
  'metadata',
  'background',
]);
const IGNORED = new Set([
  'store',
  'include',
  'top_logprobs',
  'stream_options',
  'prompt_cache_key',
  'prompt_cache_retention',
  'prompt_cache_options',
  'service_tier',
  'truncation',
  'max_tool_calls',
]);
/** Refused whenever set (not null): what they ask for needs the provider's own state or machinery. */
const REFUSED_WHEN_SET: Record<string, string> = {
  previous_response_id: 'continuing a stored response needs the provider that stored it; send the whole conversation in `input` instead',
  conversation: 'conversations are stored by the provider that created them; send the whole conversation in `input` instead',
  prompt: 'stored prompts live at the provider that stored them; send the prompt in `instructions` and `input` instead',
  context_management: 'a chat provider does not compact the context on its side',
  moderation: 'a chat provider gives no moderation results',
};

/** Where one chat message came from in the Responses request, to name it back in a provider's error. */
export interface MessageSource {
  /** The parameters its content came from: `instructions`, `input`, `input[i]` (two when joined). */
  content: string[];
  /** A function call output's `tool` message: its content is the item's `output`. */
  output: boolean;
  /** The `function_call` items its `tool_calls` came from, in order. */
  calls: string[];
}

/** Each chat message's source, for a request responsesToChat translates (null for one it refuses). */
export function messageSources(body: Record<string, unknown>): MessageSource[] | null {
  const sources: MessageSource[] = [];
  try {
    messages(body, sources);
    return sources;
  } catch (error) {
    if (error instanceof Refused) return null;
    throw error;
  }
}

export function responsesToChat(body: Record<string, unknown>): ChatTranslation {
  try {
    return { ok: true, chat: translate(body) };
  } catch (error) {
    if (error instanceof Refused) return error.refusal;
    throw error;
  }
}

function translate(body: Json): Json {
  if (!isObject(body)) return invalid('body', 'The request body must be a JSON object.');
  for (const key of Object.keys(body)) {
    // Its own keys only: `constructor` or `toString` is what every object has, an unknown parameter.
    if (Object.hasOwn(REFUSED_WHEN_SET, key)) {
      if (isSet(body[key])) unsupported(key, `'${key}' is not supported on this route: ${REFUSED_WHEN_SET[key]}.`);
    } else if (!TRANSLATED.has(key) && !IGNORED.has(key)) {
      unsupported(key, `Unknown parameter: '${key}'.`);
    }
  }
  if (body.background === true)
    unsupported('background', "'background' is not supported on this route: the answer is given on this connection.");
  optional(body, 'background', isBoolean, 'a boolean', 'boolean');
  optional(body, 'instructions', isString, 'a string', 'string');
  // The ranges OpenAI's Responses API (and the chat endpoint, chat-request.ts) takes.
  optional(body, 'temperature', (v) => isNumber(v) && v >= 0 && v <= 2, 'a number from 0 to 2', 'number');
  optional(body, 'top_p', (v) => isNumber(v) && v >= 0 && v <= 1, 'a number from 0 to 1', 'number');
  optional(
    body,
    'top_logprobs',
    (v) => Number.isInteger(v) && (v as number) >= 0 && (v as number) <= 20,
    'an integer from 0 to 20',
    'integer',
  );
  optional(body, 'max_output_tokens', (v) => Number.isInteger(v) && (v as number) >= 1, 'a positive integer', 'integer');
  optional(body, 'parallel_tool_calls', isBoolean, 'a boolean', 'boolean');
  optional(body, 'stream', isBoolean, 'a boolean', 'boolean');
  optional(body, 'user', isString, 'a string', 'string');
  optional(body, 'safety_identifier', isString, 'a string', 'string');
  optional(body, 'metadata', isObject, 'an object', 'object');
  // Checked though mostly ignored: a string for the list would drop the logprobs it asks for unsaid.
  optional(body, 'include', (v) => Array.isArray(v) && v.every(isString), 'an array of strings', 'array');

  const chat: Json = { messages: messages(body) };
  const tools = chatTools(body);
  if (tools.tools.length) {
    chat.tools = tools.tools;
    if (tools.choice !== undefined) chat.tool_choice = tools.choice;
    if (isSet(body.parallel_tool_calls)) chat.parallel_tool_calls = body.parallel_tool_calls;
  }
  if (isSet(body.max_output_tokens)) chat.max_completion_tokens = body.max_output_tokens;
  for (const key of ['temperature', 'top_p', 'user', 'safety_identifier'] as const) if (isSet(body[key])) chat[key] = body[key];
  Object.assign(chat, reasoning(body.reasoning), text(body.text), logprobs(body));
  if (body.stream === true) {
    chat.stream = true;
    chat.stream_options = { include_usage: true };
  }
  return chat;
}

// ---- input ---------------------------------------------------------------------------------

function messages(body: Json, sources: MessageSource[] = []): ChatMessage[] {
  const chat = new ChatMessages(sources);
  if (isString(body.instructions) && body.instructions) chat.push({ role: 'system', content: body.instructions }, ['instructions']);
  const input = body.input;
  if (input === undefined || input === null) refuse('missing_required_parameter', 'input', "Missing required parameter: 'input'.");
  if (isString(input)) {
    chat.push({ role: 'user', content: input }, ['input']);
    return chat.list;
  }
  if (!Array.isArray(input)) return invalid('input', "'input' must be a string or a list of items.");
  for (const [i, item] of input.entries()) chat.item(item, `input[${i}]`);
  if (!chat.list.length) invalid('input', "'input' must hold at least one message.");
  return chat.list;
}

/** The chat messages a Responses input becomes, item by item, with where each came from. */
class ChatMessages {
  readonly list: ChatMessage[] = [];
  /** The assistant message the previous item made, which a function call right after joins. */
  private assistant: ChatMessage | null = null;

  constructor(private readonly sources: MessageSource[]) {}

  push(message: ChatMessage, from: string[], output = false): void {
    this.list.push(message);
    this.sources.push({ content: from, output, calls: [] });
  }

  item(item: unknown, at: string): void {
    if (!isObject(item)) return invalid(at, `${at} must be an object.`);
    // Without a type, an item is a message by its role, else a reference by its id (OpenAI's item_reference leaves `type` out).
    const type = item.type ?? (isSet(item.role) ? 'message' : isString(item.id) ? 'item_reference' : undefined);
    if (type === 'message') return this.message(inputMessage(item, at), at);
    if (type === 'function_call') return this.call(toolCall(item, at), at);
    if (type === 'function_call_output') {
      this.push(toolOutput(item, at), [at], true);
      this.assistant = null;
      return;
    }
    // A reasoning item is dropped (see the header); it does not end the assistant turn it belongs to.
    if (type !== 'reasoning') refuseItem(type, at);
  }

  private message(message: ChatMessage, at: string): void {
    if (message.role === 'assistant' && this.assistant?.tool_calls) {
      // What the assistant said after its calls: chat wants the tool messages right after the calls.
      this.assistant.content = joinContent(this.assistant.content, message.content);
      this.sources.at(-1)?.content.push(at);
      return;
    }
    this.push(message, [at]);
    this.assistant = message.role === 'assistant' ? message : null;
  }

  private call(call: Json, at: string): void {
    if (!this.assistant) this.push((this.assistant = { role: 'assistant', content: null }), []);
    this.assistant.tool_calls = [...((this.assistant.tool_calls as Json[] | undefined) ?? []), call];
    this.sources.at(-1)?.calls.push(at);
  }
}

/** An input item this route cannot translate, or one without a type. */
function refuseItem(type: unknown, at: string): never {
  if (type === undefined) return invalid(`${at}.type`, `${at} must have a type (or a role, for a message).`);
  if (type === 'item_reference') {
    return unsupported(
      at,
      `${at}: 'item_reference' is not supported on this route: items are stored by the provider that made them; send the item itself.`,
    );
  }
  return unsupported(
    `${at}.type`,
    `${at}: input items of type '${String(type)}' are not supported on this route (only message, function_call and function_call_output).`,
  );
}

const ROLES = new Set(['user', 'assistant', 'system', 'developer']);

function inputMessage(item: Json, at: string): ChatMessage {
  const role = item.role;
  if (!isString(role) || !ROLES.has(role)) return invalid(`${at}.role`, `${at}.role must be one of user, assistant, system, developer.`);
  const chatRole = role === 'developer' ? 'system' : role;
  const content = item.content;
  if (isString(content)) return { role: chatRole, content };
  if (!Array.isArray(content)) return invalid(`${at}.content`, `${at}.content must be a string or a list of content parts.`);
  const parts = content.map((part: unknown, j) => contentPart(part, `${at}.content[${j}]`, chatRole));
  return { role: chatRole, content: collapse(parts) };
}

/** Two pieces of one assistant turn's content as one (absent content is none). */
function joinContent(a: unknown, b: unknown): unknown {
  if (a === null || a === undefined || a === '') return b;
  // Both are a string or text parts (inputMessage), an assistant's content being text only.
  const parts = (c: unknown): Json[] => (isString(c) ? [{ type: 'text', text: c }] : (c as Json[]));
  return [...parts(a), ...parts(b)];
}

/** One text part is the same as its text, and a plain string is what every chat provider reads. */
function collapse(parts: Json[]): string | Json[] {
  return parts.length === 1 && parts[0].type === 'text' ? (parts[0].text as string) : parts;
}

function contentPart(part: unknown, at: string, role: string): Json {
  if (!isObject(part)) return invalid(at, `${at} must be an object.`);
  const textOnly = role !== 'user';
  switch (part.type) {
    case 'input_text':
    case 'output_text':
      if (!isString(part.text)) invalid(`${at}.text`, `${at}.text must be a string.`);
      return { type: 'text', text: part.text };
    case 'refusal':
      // An earlier refusal, kept as what the assistant said (chat's `refusal` field is OpenAI's alone).
      if (!isString(part.refusal)) invalid(`${at}.refusal`, `${at}.refusal must be a string.`);
      return { type: 'text', text: part.refusal };
    case 'input_image': {
      if (textOnly) return invalid(`${at}.type`, `${at}: a ${role} message takes text only on this route.`);
      if (!isString(part.image_url)) {
        return isSet(part.file_id)
          ? unsupported(
              `${at}.file_id`,
              `${at}: images given by file_id are stored at OpenAI and not available on this route; send image_url (a URL or a data URL).`,
            )
          : invalid(`${at}.image_url`, `${at}.image_url must be a URL or a data URL.`);
      }
      // Chat knows low, high and auto; `original` (no downscaling) is nearest to high.
      const detail = part.detail === 'original' ? 'high' : part.detail;
      return { type: 'image_url', image_url: isString(detail) ? { url: part.image_url, detail } : { url: part.image_url } };
    }
    case 'input_file': {
      if (textOnly) return invalid(`${at}.type`, `${at}: a ${role} message takes text only on this route.`);
      if (isSet(part.file_id) || isSet(part.file_url) || !isString(part.file_data)) {
        const param = isSet(part.file_id) ? 'file_id' : isSet(part.file_url) ? 'file_url' : 'file_data';
        return param === 'file_data'
          ? invalid(`${at}.file_data`, `${at}.file_data must be the file's content (a data URL).`)
          : unsupported(`${at}.${param}`, `${at}: files given by ${param} are not available on this route; send file_data.`);
      }
      return {
        type: 'file',
        file: isString(part.filename) ? { file_data: part.file_data, filename: part.filename } : { file_data: part.file_data },
      };
    }
    default:
      return unsupported(`${at}.type`, `${at}: content parts of type '${String(part.type)}' are not supported on this route.`);
  }
}

function toolCall(item: Json, at: string): Json {
  for (const key of ['call_id', 'name', 'arguments']) if (!isString(item[key])) invalid(`${at}.${key}`, `${at}.${key} must be a string.`);
  if (isSet(item.namespace)) unsupported(`${at}.namespace`, `${at}: namespaced function calls are not supported on this route.`);
  return { id: item.call_id, type: 'function', function: { name: item.name, arguments: item.arguments } };
}

function toolOutput(item: Json, at: string): ChatMessage {
  if (!isString(item.call_id)) invalid(`${at}.call_id`, `${at}.call_id must be a string.`);
  const output = item.output;
  if (isString(output)) return { role: 'tool', tool_call_id: item.call_id, content: output };
  if (!Array.isArray(output)) return invalid(`${at}.output`, `${at}.output must be a string or a list of content parts.`);
  const parts = output.map((part: unknown, j) => {
    const p = `${at}.output[${j}]`;
    if (!isObject(part)) return invalid(p, `${p} must be an object.`);
    if (part.type !== 'input_text') return unsupported(`${p}.type`, `${p}: a function call output takes text only on this route.`);
    if (!isString(part.text)) return invalid(`${p}.text`, `${p}.text must be a string.`);
    return { type: 'text', text: part.text };
  });
  return { role: 'tool', tool_call_id: item.call_id, content: collapse(parts) };
}

// ---- tools ---------------------------------------------------------------------------------

function chatTools(body: Json): { tools: Json[]; choice?: unknown } {
  if (!isSet(body.tools)) return { tools: [], choice: noTools(body.tool_choice) };
  if (!Array.isArray(body.tools)) return invalid('tools', "'tools' must be a list.");
  const tools = body.tools.map((tool: unknown, i) => chatTool(tool, `tools[${i}]`));
  if (!tools.length) return { tools, choice: noTools(body.tool_choice) };
  const choice = body.tool_choice;
  if (!isSet(choice)) return { tools };
  if (choice === 'auto' || choice === 'none' || choice === 'required') return { tools, choice };
  if (!isObject(choice)) return invalid('tool_choice', "'tool_choice' must be auto, none, required or an object.");
  const names = new Set(tools.map((t) => (t.function as Json).name));
  if (choice.type === 'function') {
    if (!isString(choice.name) || !names.has(choice.name))
      return invalid('tool_choice.name', "'tool_choice.name' must name one of the function tools.");
    return { tools, choice: { type: 'function', function: { name: choice.name } } };
  }
  if (choice.type === 'allowed_tools') return allowedTools(choice, tools, names);
  return unsupported(
    'tool_choice',
    `'tool_choice' of type '${String(choice.type)}' is not supported on this route; only function tools are.`,
  );
}

/** One Responses function tool as chat's (`{type: 'function', function: {...}}`). */
function chatTool(tool: unknown, at: string): Json {
  if (!isObject(tool)) return invalid(at, `${at} must be an object.`);
  if (tool.type !== 'function') {
    return unsupported(
      `${at}.type`,
      `${at}: the tool type '${String(tool.type)}' is not supported on this route; only function tools are.`,
    );
  }
  if (!isString(tool.name) || !tool.name) return invalid(`${at}.name`, `${at}.name must be a non-empty string.`);
  if (isSet(tool.parameters) && !isObject(tool.parameters)) invalid(`${at}.parameters`, `${at}.parameters must be a JSON schema object.`);
  const fn: Json = { name: tool.name };
  if (isString(tool.description)) fn.description = tool.description;
  if (isObject(tool.parameters)) fn.parameters = tool.parameters;
  if (isBoolean(tool.strict)) fn.strict = tool.strict;
  return { type: 'function', function: fn };
}

/** Chat's own allowed_tools is OpenAI's alone; sending only the allowed tools means the same. */
function allowedTools(choice: Json, tools: Json[], names: Set<unknown>): { tools: Json[]; choice: unknown } {
  if (choice.mode !== 'auto' && choice.mode !== 'required')
    return invalid('tool_choice.mode', "'tool_choice.mode' must be auto or required.");
  if (!Array.isArray(choice.tools)) return invalid('tool_choice.tools', "'tool_choice.tools' must be a list.");
  const allowed = new Set(
    choice.tools.map((t: unknown, i) => {
      const at = `tool_choice.tools[${i}]`;
      if (!isObject(t) || t.type !== 'function')
        return unsupported(`${at}.type`, `${at}: only function tools are supported on this route.`);
      if (!isString(t.name) || !names.has(t.name)) return invalid(`${at}.name`, `${at}.name must name one of the function tools.`);
      return t.name;
    }),
  );
  return { tools: tools.filter((t) => allowed.has((t.function as Json).name as string)), choice: choice.mode };
}

/** A tool_choice without tools: harmless ones are dropped (chat refuses tool_choice without tools). */
function noTools(choice: unknown): undefined {
  if (isSet(choice) && choice !== 'auto' && choice !== 'none') invalid('tool_choice', "'tool_choice' requires 'tools'.");
  return undefined;
}

// ---- reasoning, text and logprobs ----------------------------------------------------------

/** Logprobs of the output text, asked for in `include`: chat's `logprobs`, with `top_logprobs` alternatives. */
function logprobs(body: Json): Json {
  if (!Array.isArray(body.include) || !body.include.includes('message.output_text.logprobs')) return {};
  return isSet(body.top_logprobs) ? { logprobs: true, top_logprobs: body.top_logprobs } : { logprobs: true };
}

function reasoning(value: unknown): Json {
  if (!isSet(value)) return {};
  if (!isObject(value)) return invalid('reasoning', "'reasoning' must be an object.");
  if (isSet(value.mode) && value.mode !== 'standard')
    unsupported('reasoning.mode', `'reasoning.mode' ${JSON.stringify(value.mode)} is not supported on this route.`);
  if (!isSet(value.effort)) return {};
  if (!isString(value.effort)) return invalid('reasoning.effort', "'reasoning.effort' must be a string.");
  return { reasoning_effort: value.effort };
}

function text(value: unknown): Json {
  if (!isSet(value)) return {};
  if (!isObject(value)) return invalid('text', "'text' must be an object.");
  const out: Json = {};
  if (isSet(value.verbosity)) {
    if (!isString(value.verbosity)) invalid('text.verbosity', "'text.verbosity' must be a string.");
    out.verbosity = value.verbosity;
  }
  const format = value.format;
  if (!isSet(format)) return out;
  if (!isObject(format)) return invalid('text.format', "'text.format' must be an object.");
  if (format.type === 'text') return out;
  if (format.type === 'json_object') return { ...out, response_format: { type: 'json_object' } };
  if (format.type !== 'json_schema') return invalid('text.format.type', "'text.format.type' must be text, json_schema or json_object.");
  if (!isString(format.name) || !format.name) return invalid('text.format.name', "'text.format.name' must be a non-empty string.");
  if (!isObject(format.schema)) return invalid('text.format.schema', "'text.format.schema' must be a JSON schema object.");
  const schema: Json = { name: format.name, schema: format.schema };
  if (isString(format.description)) schema.description = format.description;
  if (isBoolean(format.strict)) schema.strict = format.strict;
  return { ...out, response_format: { type: 'json_schema', json_schema: schema } };
}

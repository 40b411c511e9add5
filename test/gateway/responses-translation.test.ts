// The translation between OpenAI's Responses API and chat completions (gateway/src/responses/), for
// routes whose provider offers only chat: each function on its own, then the events and answers it
// makes through the official `openai` client (a loopback server that translates as a route would),
// so that a client using `responses.create()` cannot tell it is talking to a chat provider; last,
// what only the gateway shows (a provider's stream failing, the Cold worker) against a FakeProvider.
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import type { ChatCompletion, ChatCompletionChunk, ChatCompletionMessageParam } from 'openai/resources/chat/completions';
import type {
  Response,
  ResponseCreateParams,
  ResponseInputItem,
  ResponseStreamEvent,
  ResponseUsage,
} from 'openai/resources/responses/responses';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { CallPlanner } from '../../gateway/src/call-plan';
import type { RequestContext } from '../../gateway/src/request-context';
import type { Route } from '../../gateway/src/route';
import { chatToResponse } from '../../gateway/src/responses/answer';
import { newResponseId } from '../../gateway/src/responses/ids';
import { responsesToChat, type Refusal } from '../../gateway/src/responses/request';
import { ChatToResponsesStream, sseEvent } from '../../gateway/src/responses/stream';
import { asMistral, FakeProvider } from './fake-provider';
import { listenStack, mapOf, startGateway, type TestGateway } from './harness';

// ---- chat answers, whole and streamed, from one script ------------------------------------------

interface Script {
  text?: string;
  refusal?: string;
  calls?: Array<{ id: string; name: string; arguments: string }>;
  finish?: 'stop' | 'length' | 'tool_calls' | 'content_filter';
  usage?: { prompt: number; completion: number; cached?: number; reasoning?: number } | null;
}

const PROVIDER_MODEL = 'mistral-small-latest';

function chatUsage(s: Script): ChatCompletion['usage'] {
  const u = s.usage === undefined ? { prompt: 12, completion: 5 } : s.usage;
  if (!u) return undefined;
  return {
    prompt_tokens: u.prompt,
    completion_tokens: u.completion,
    total_tokens: u.prompt + u.completion,
    prompt_tokens_details: { cached_tokens: u.cached ?? 0 },
    completion_tokens_details: { reasoning_tokens: u.reasoning ?? 0 },
  };
}

function whole(s: Script): ChatCompletion {
  const calls = s.calls ?? [];
  return {
    id: 'chatcmpl-1',
    object: 'chat.completion',
    created: 1_700_000_000,
    model: PROVIDER_MODEL,
    choices: [
      {
        index: 0,
        logprobs: null,
        finish_reason: s.finish ?? (calls.length ? 'tool_calls' : 'stop'),
        message: {
          role: 'assistant',
          content: s.text ?? null,
          refusal: s.refusal ?? null,
          ...(calls.length
            ? {
                tool_calls: calls.map((c) => ({ id: c.id, type: 'function' as const, function: { name: c.name, arguments: c.arguments } })),
              }
            : {}),
        },
      },
    ],
    usage: chatUsage(s),
  };
}

const pieces = (text: string, size = 4) =>
  Array.from({ length: Math.ceil(text.length / size) }, (_, i) => text.slice(i * size, i * size + size));

/** A tool call's first piece in a chat stream: its index, id, name and arguments so far. */
const toolCallHead = (index: number, id: string, name = 'get_weather', text = '') => ({
  index,
  id,
  type: 'function',
  function: { name, arguments: text },
});
/** A later piece of the call at `index`: more of its arguments. */
const toolCallArgs = (index: number, text: string) => ({ index, function: { arguments: text } });

/** The chunks a chat provider streams for the script: role, text pieces, each call's deltas, finish, usage. */
function chunked(s: Script): ChatCompletionChunk[] {
  const base = { id: 'chatcmpl-1', object: 'chat.completion.chunk' as const, created: 1_700_000_000, model: PROVIDER_MODEL };
  const chunk = (
    delta: ChatCompletionChunk.Choice.Delta,
    finish: ChatCompletionChunk.Choice['finish_reason'] = null,
  ): ChatCompletionChunk => ({
    ...base,
    choices: [{ index: 0, delta, finish_reason: finish, logprobs: null }],
  });
  const out = [chunk({ role: 'assistant', content: '' })];
  for (const piece of pieces(s.text ?? '')) out.push(chunk({ content: piece }));
  if (s.refusal) out.push(chunk({ refusal: s.refusal }));
  (s.calls ?? []).forEach((c, index) => {
    out.push(chunk({ tool_calls: [{ index, id: c.id, type: 'function', function: { name: c.name, arguments: '' } }] }));
    for (const piece of pieces(c.arguments, 7)) out.push(chunk({ tool_calls: [{ index, function: { arguments: piece } }] }));
  });
  out.push(chunk({}, s.finish ?? (s.calls?.length ? 'tool_calls' : 'stop')));
  const usage = chatUsage(s);
  if (usage) out.push({ ...base, choices: [], usage });
  return out;
}

/** All the events of a streamed script, as a route would produce them. */
function streamed(s: Script, request: Record<string, unknown> = REQUEST, ids = IDS) {
  const stream = new ChatToResponsesStream(request, ids);
  const events: ResponseStreamEvent[] = []; // the first push starts it, as the gateway does
  for (const c of chunked(s)) events.push(...stream.push(c));
  events.push(...stream.end());
  return { events, stream };
}

const IDS = { responseId: 'resp_abc', now: 1_750_000_000 };
const REQUEST: Record<string, unknown> = { model: 'gpt-4o-mini', input: 'Hi' };
const WEATHER_TOOL = {
  type: 'function' as const,
  name: 'get_weather',
  description: 'The weather in a city',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'], additionalProperties: false },
  strict: true,
};

const translate = (body: Record<string, unknown>) => {
  const result = responsesToChat(body);
  if (!result.ok) throw new Error(`refused: ${result.message}`);
  return result.chat;
};

// ---- the request ----------------------------------------------------------------------------

describe('responsesToChat', () => {
  it('translates text input, instructions, sampling, the token limit and streaming', () => {
    const body: ResponseCreateParams = {
      model: 'gpt-4o-mini',
      instructions: 'Answer in French.',
      input: 'Hello',
      max_output_tokens: 300,
      temperature: 0.2,
      top_p: 0.9,
      user: 'u-1',
      safety_identifier: 'hash-1',
      stream: true,
    };
    expect(responsesToChat(body as unknown as Record<string, unknown>)).toEqual({
      ok: true,
      chat: {
        messages: [
          { role: 'system', content: 'Answer in French.' },
          { role: 'user', content: 'Hello' },
        ],
        max_completion_tokens: 300,
        temperature: 0.2,
        top_p: 0.9,
        user: 'u-1',
        safety_identifier: 'hash-1',
        stream: true,
        stream_options: { include_usage: true },
      },
    });
  });

  it('translates message items: roles, text and image parts, and assistant output messages', () => {
    const input: ResponseInputItem[] = [
      { role: 'developer', content: 'Be brief.' },
      { type: 'message', role: 'system', content: [{ type: 'input_text', text: 'Use metric units.' }] },
      {
        type: 'message',
        role: 'user',
        content: [
          { type: 'input_text', text: 'What is in this picture?' },
          { type: 'input_image', image_url: 'https://example.com/cat.png', detail: 'low' },
          { type: 'input_image', image_url: 'data:image/png;base64,AAAA', detail: 'original' },
        ],
      },
      // an earlier answer passed back as it came (response.output)
      {
        id: 'msg_1',
        type: 'message',
        role: 'assistant',
        status: 'completed',
        content: [{ type: 'output_text', text: 'A cat.', annotations: [], logprobs: [] }],
      },
      { role: 'user', content: 'And its colour?' },
    ];
    expect(translate({ input })).toEqual({
      messages: [
        { role: 'system', content: 'Be brief.' },
        { role: 'system', content: 'Use metric units.' },
        {
          role: 'user',
          content: [
            { type: 'text', text: 'What is in this picture?' },
            { type: 'image_url', image_url: { url: 'https://example.com/cat.png', detail: 'low' } },
            { type: 'image_url', image_url: { url: 'data:image/png;base64,AAAA', detail: 'high' } },
          ],
        },
        { role: 'assistant', content: 'A cat.' },
        { role: 'user', content: 'And its colour?' },
      ],
    });
  });

  it('translates function calls (merged into one assistant message) and their outputs (tool messages)', () => {
    const input: ResponseInputItem[] = [
      { role: 'user', content: 'Weather in Paris and Oslo?' },
      { id: 'rs_1', type: 'reasoning', summary: [], encrypted_content: 'gAAAA…' },
      {
        type: 'message',
        role: 'assistant',
        content: [{ type: 'output_text', text: 'Let me check.', annotations: [] }],
        id: 'msg_1',
        status: 'completed',
      },
      { type: 'function_call', id: 'fc_1', call_id: 'call_1', name: 'get_weather', arguments: '{"city":"Paris"}', status: 'completed' },
      { type: 'function_call', id: 'fc_2', call_id: 'call_2', name: 'get_weather', arguments: '{"city":"Oslo"}', status: 'completed' },
      { type: 'function_call_output', call_id: 'call_1', output: '18°C' },
      { type: 'function_call_output', call_id: 'call_2', output: [{ type: 'input_text', text: '4°C' }] },
      { type: 'function_call', call_id: 'call_3', name: 'get_weather', arguments: '{"city":"Rome"}' },
      {
        type: 'function_call_output',
        call_id: 'call_3',
        output: [
          { type: 'input_text', text: 'sunny, ' },
          { type: 'input_text', text: '25°C' },
        ],
      },
    ];
    expect(translate({ input, tools: [WEATHER_TOOL] }).messages).toEqual([
      { role: 'user', content: 'Weather in Paris and Oslo?' },
      {
        role: 'assistant',
        content: 'Let me check.',
        tool_calls: [
          { id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } },
          { id: 'call_2', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } },
        ],
      },
      { role: 'tool', tool_call_id: 'call_1', content: '18°C' },
      { role: 'tool', tool_call_id: 'call_2', content: '4°C' },
      {
        role: 'assistant',
        content: null,
        tool_calls: [{ id: 'call_3', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Rome"}' } }],
      },
      {
        role: 'tool',
        tool_call_id: 'call_3',
        content: [
          { type: 'text', text: 'sunny, ' },
          { type: 'text', text: '25°C' },
        ],
      },
    ] satisfies ChatCompletionMessageParam[]);
  });

  it('translates function tools, tool_choice, parallel_tool_calls, text.format and reasoning effort', () => {
    const chatTool = {
      type: 'function',
      function: { name: 'get_weather', description: 'The weather in a city', parameters: WEATHER_TOOL.parameters, strict: true },
    };
    const bare = { type: 'function', name: 'now', parameters: null, strict: null };
    expect(translate({ input: 'Hi', tools: [WEATHER_TOOL, bare], tool_choice: 'required', parallel_tool_calls: false })).toEqual({
      messages: [{ role: 'user', content: 'Hi' }],
      tools: [chatTool, { type: 'function', function: { name: 'now' } }],
      tool_choice: 'required',
      parallel_tool_calls: false,
    });
    expect(translate({ input: 'Hi', tools: [WEATHER_TOOL], tool_choice: { type: 'function', name: 'get_weather' } }).tool_choice).toEqual({
      type: 'function',
      function: { name: 'get_weather' },
    });
    // allowed_tools: chat gets only the allowed tools, and the mode
    const allowed = translate({
      input: 'Hi',
      tools: [WEATHER_TOOL, bare],
      tool_choice: { type: 'allowed_tools', mode: 'auto', tools: [{ type: 'function', name: 'now' }] },
    });
    expect(allowed.tools).toEqual([{ type: 'function', function: { name: 'now' } }]);
    expect(allowed.tool_choice).toBe('auto');
    // without tools, chat refuses tool_choice and parallel_tool_calls: harmless ones are dropped
    expect(translate({ input: 'Hi', tools: [], tool_choice: 'auto', parallel_tool_calls: true })).toEqual({
      messages: [{ role: 'user', content: 'Hi' }],
    });

    const schema = { type: 'object', properties: { n: { type: 'number' } }, required: ['n'], additionalProperties: false };
    expect(
      translate({ input: 'Hi', text: { format: { type: 'json_schema', name: 'n', schema, strict: true }, verbosity: 'low' } }),
    ).toMatchObject({
      response_format: { type: 'json_schema', json_schema: { name: 'n', schema, strict: true } },
      verbosity: 'low',
    });
    expect(translate({ input: 'Hi', text: { format: { type: 'json_object' } } }).response_format).toEqual({ type: 'json_object' });
    expect(translate({ input: 'Hi', text: { format: { type: 'text' } } })).not.toHaveProperty('response_format');
    expect(translate({ input: 'Hi', reasoning: { effort: 'low', summary: 'auto' } })).toMatchObject({ reasoning_effort: 'low' });
  });

  it('ignores what has no effect a chat provider could honour', () => {
    const chat = translate({
      input: 'Hi',
      store: false,
      include: ['reasoning.encrypted_content', 'web_search_call.action.sources'],
      truncation: 'auto',
      service_tier: 'flex',
      prompt_cache_key: 'k',
      prompt_cache_retention: '24h',
      metadata: { team: 'a' },
      top_logprobs: 3, // without the logprobs asked for in include
      stream_options: { include_obfuscation: false },
      background: false,
      previous_response_id: null,
      conversation: null,
    });
    expect(chat).toEqual({ messages: [{ role: 'user', content: 'Hi' }] });
  });

  const refusals: Array<[string, Record<string, unknown>, string, Refusal['code']]> = [
    ['web_search', { tools: [{ type: 'web_search' }] }, 'tools[0].type', 'unsupported_parameter'],
    [
      'file_search',
      { tools: [WEATHER_TOOL, { type: 'file_search', vector_store_ids: ['vs_1'] }] },
      'tools[1].type',
      'unsupported_parameter',
    ],
    ['code_interpreter', { tools: [{ type: 'code_interpreter', container: { type: 'auto' } }] }, 'tools[0].type', 'unsupported_parameter'],
    [
      'computer use',
      { tools: [{ type: 'computer_use_preview', display_width: 1, display_height: 1, environment: 'linux' }] },
      'tools[0].type',
      'unsupported_parameter',
    ],
    ['image_generation', { tools: [{ type: 'image_generation' }] }, 'tools[0].type', 'unsupported_parameter'],
    ['mcp', { tools: [{ type: 'mcp', server_label: 'x', server_url: 'https://x' }] }, 'tools[0].type', 'unsupported_parameter'],
    ['custom tools', { tools: [{ type: 'custom', name: 'x' }] }, 'tools[0].type', 'unsupported_parameter'],
    [
      'a built-in tool_choice',
      { tools: [WEATHER_TOOL], tool_choice: { type: 'web_search_preview' } },
      'tool_choice',
      'unsupported_parameter',
    ],
    [
      'a tool_choice naming no tool',
      { tools: [WEATHER_TOOL], tool_choice: { type: 'function', name: 'nope' } },
      'tool_choice.name',
      'invalid_value',
    ],
    ['tool_choice required without tools', { tool_choice: 'required' }, 'tool_choice', 'invalid_value'],
    ['previous_response_id', { previous_response_id: 'resp_1' }, 'previous_response_id', 'unsupported_parameter'],
    ['conversation', { conversation: 'conv_1' }, 'conversation', 'unsupported_parameter'],
    ['a stored prompt', { prompt: { id: 'pmpt_1' } }, 'prompt', 'unsupported_parameter'],
    ['background', { background: true }, 'background', 'unsupported_parameter'],
    ['context_management', { context_management: [{ type: 'compaction' }] }, 'context_management', 'unsupported_parameter'],
    ['reasoning.mode pro', { reasoning: { mode: 'pro' } }, 'reasoning.mode', 'unsupported_parameter'],
    ['an unknown parameter', { frequency_penalty: 1 }, 'frequency_penalty', 'unsupported_parameter'],
    [
      'a built-in tool call item',
      { input: [{ type: 'web_search_call', id: 'ws_1', status: 'completed' }] },
      'input[0].type',
      'unsupported_parameter',
    ],
    ['an item_reference', { input: [{ type: 'item_reference', id: 'msg_1' }] }, 'input[0]', 'unsupported_parameter'],
    // The SDK's ItemReference: its type may be left out (or null); the id alone names the stored item.
    [
      'an item_reference without its type',
      { input: [{ role: 'user', content: 'Hi' }, { id: 'msg_1' }] },
      'input[1]',
      'unsupported_parameter',
    ],
    ['an item_reference whose type is null', { input: [{ id: 'msg_1', type: null }] }, 'input[0]', 'unsupported_parameter'],
    [
      'an image by file_id',
      { input: [{ role: 'user', content: [{ type: 'input_image', file_id: 'file-1', detail: 'auto' }] }] },
      'input[0].content[0].file_id',
      'unsupported_parameter',
    ],
    [
      'an image in a tool output',
      { input: [{ type: 'function_call_output', call_id: 'c', output: [{ type: 'input_image', image_url: 'https://x' }] }] },
      'input[0].output[0].type',
      'unsupported_parameter',
    ],
    [
      'an image in a system message',
      { input: [{ role: 'system', content: [{ type: 'input_image', image_url: 'https://x', detail: 'auto' }] }] },
      'input[0].content[0].type',
      'invalid_value',
    ],
    ['an unknown role', { input: [{ role: 'tool', content: 'x' }] }, 'input[0].role', 'invalid_value'],
    ['an item with neither type nor role', { input: [{ content: 'x' }] }, 'input[0].type', 'invalid_value'],
    [
      'a function call without arguments',
      { input: [{ type: 'function_call', call_id: 'c', name: 'f' }] },
      'input[0].arguments',
      'invalid_value',
    ],
    ['a temperature that is not a number', { temperature: 'hot' }, 'temperature', 'invalid_type'],
    ['include given as one string, not a list', { include: 'message.output_text.logprobs' }, 'include', 'invalid_type'],
    ['include with an entry that is not a string', { include: [1] }, 'include', 'invalid_value'],
    [
      'a json_schema format without a schema',
      { text: { format: { type: 'json_schema', name: 'x' } } },
      'text.format.schema',
      'invalid_value',
    ],
  ];
  it.each(refusals)('refuses %s, naming the parameter', (_, fields, param, code) => {
    const result = responsesToChat({ model: 'gpt-4o-mini', input: 'Hi', ...fields });
    expect(result).toMatchObject({ ok: false, param, code });
    if (!result.ok) expect(result.message).toContain(param.split('.')[0]);
  });

  it('refuses a parameter named like what every object has (constructor, toString) as unknown, whatever its value', () => {
    for (const fields of [{ constructor: 1 }, { toString: null }, { hasOwnProperty: 'x' }]) {
      const [key] = Object.keys(fields);
      expect(responsesToChat({ model: 'gpt-4o-mini', input: 'Hi', ...fields })).toEqual({
        ok: false,
        param: key,
        code: 'unsupported_parameter',
        message: `Unknown parameter: '${key}'.`,
      });
    }
  });

  it('refuses a request without input', () => {
    expect(responsesToChat({ model: 'gpt-4o-mini', instructions: 'x' })).toMatchObject({
      ok: false,
      param: 'input',
      code: 'missing_required_parameter',
    });
    expect(responsesToChat({ input: [] })).toMatchObject({ ok: false, param: 'input', code: 'invalid_value' });
  });
});

// ---- the whole answer -----------------------------------------------------------------------

describe('chatToResponse', () => {
  it('makes a completed Response: a message item, the usage, and the request echoed', () => {
    const request = {
      model: 'gpt-4o-mini',
      input: 'Hi',
      instructions: 'Be nice.',
      temperature: 0.3,
      tools: [WEATHER_TOOL],
      metadata: { a: '1' },
    };
    const response = chatToResponse(
      whole({ text: 'Hello there!', usage: { prompt: 20, completion: 4, cached: 8, reasoning: 1 } }),
      request,
      {
        responseId: 'resp_abc',
        now: 1_750_000_000_123, // milliseconds work too
      },
    ) as unknown as Response;
    expect(response).toMatchObject({
      id: 'resp_abc',
      object: 'response',
      created_at: 1_750_000_000,
      status: 'completed',
      error: null,
      incomplete_details: null,
      model: PROVIDER_MODEL,
      instructions: 'Be nice.',
      temperature: 0.3,
      top_p: 1,
      tools: [WEATHER_TOOL],
      tool_choice: 'auto',
      parallel_tool_calls: true,
      metadata: { a: '1' },
      text: { format: { type: 'text' } },
    });
    expect(response.output).toEqual([
      {
        id: 'msg_abc_0',
        type: 'message',
        status: 'completed',
        role: 'assistant',
        content: [{ type: 'output_text', text: 'Hello there!', annotations: [], logprobs: [] }],
      },
    ]);
    expect(response.usage).toEqual({
      input_tokens: 20,
      input_tokens_details: { cached_tokens: 8, cache_write_tokens: 0 },
      output_tokens: 4,
      output_tokens_details: { reasoning_tokens: 1 },
      total_tokens: 24,
    } satisfies ResponseUsage);
    expect(response).not.toHaveProperty('output_text'); // the SDK computes it
  });

  it('gives each tool call as a function_call item whose call_id is the chat tool call id', () => {
    const calls = [
      { id: 'call_A', name: 'get_weather', arguments: '{"city":"Paris"}' },
      { id: 'call_B', name: 'get_weather', arguments: '{"city":"Oslo"}' },
    ];
    const response = chatToResponse(whole({ calls }), REQUEST, IDS) as unknown as Response;
    expect(response.status).toBe('completed');
    expect(response.output).toEqual([
      { id: 'fc_abc_0', type: 'function_call', status: 'completed', call_id: 'call_A', name: 'get_weather', arguments: '{"city":"Paris"}' },
      { id: 'fc_abc_1', type: 'function_call', status: 'completed', call_id: 'call_B', name: 'get_weather', arguments: '{"city":"Oslo"}' },
    ]);
    // text and a call: the message first, as chat gives them
    const both = chatToResponse(whole({ text: 'Checking.', calls: calls.slice(0, 1) }), REQUEST, IDS) as unknown as Response;
    expect(both.output.map((i) => `${i.type}:${i.id}`)).toEqual(['message:msg_abc_0', 'function_call:fc_abc_1']);
  });

  it('is incomplete when the provider stopped at the token limit or its content filter', () => {
    const cut = chatToResponse(
      whole({ text: 'Once upon a', finish: 'length' }),
      { ...REQUEST, max_output_tokens: 3 },
      IDS,
    ) as unknown as Response;
    expect(cut).toMatchObject({ status: 'incomplete', incomplete_details: { reason: 'max_output_tokens' }, max_output_tokens: 3 });
    expect(cut.output[0]).toMatchObject({ type: 'message', status: 'incomplete' });
    const filtered = chatToResponse(whole({ text: '', finish: 'content_filter' }), REQUEST, IDS) as unknown as Response;
    expect(filtered).toMatchObject({ status: 'incomplete', incomplete_details: { reason: 'content_filter' } });
  });

  it('keeps a refusal as a refusal part, gives no usage when the provider sent none, fails without a message', () => {
    const refused = chatToResponse(whole({ refusal: 'I cannot help with that.', usage: null }), REQUEST, IDS) as unknown as Response;
    expect(refused.output[0]).toMatchObject({ type: 'message', content: [{ type: 'refusal', refusal: 'I cannot help with that.' }] });
    expect(refused).not.toHaveProperty('usage');
    const empty = chatToResponse({ id: 'x', choices: [] }, REQUEST, IDS) as unknown as Response;
    expect(empty).toMatchObject({ status: 'failed', error: { code: 'server_error' }, output: [], model: 'gpt-4o-mini' });
  });
});

// ---- the stream -----------------------------------------------------------------------------

describe('ChatToResponsesStream', () => {
  /** Checks what every Responses stream must hold, and returns the event types in order. */
  function checkSequence(events: ResponseStreamEvent[]): string[] {
    expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
    const open = new Map<number, string>(); // output_index → item id, while the item is open
    const added: number[] = [];
    for (const e of events) {
      if (e.type === 'response.output_item.added') {
        expect(e.output_index).toBe(added.length); // items begin in order
        added.push(e.output_index);
        open.set(e.output_index, e.item.id!);
      } else if ('item_id' in e && 'output_index' in e) {
        expect(open.get(e.output_index)).toBe(e.item_id);
      }
      if (e.type === 'response.output_item.done') {
        expect(open.get(e.output_index)).toBe(e.item.id);
        open.delete(e.output_index);
      }
    }
    expect(open.size).toBe(0);
    return events.map((e) => e.type);
  }

  it('streams text as OpenAI does, and ends with the whole response and its usage', () => {
    const { events, stream } = streamed({ text: 'Hello there, friend!', usage: { prompt: 9, completion: 6 } });
    const types = checkSequence(events);
    const deltas = events.filter((e) => e.type === 'response.output_text.delta');
    expect(types).toEqual([
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.content_part.added',
      ...deltas.map(() => 'response.output_text.delta'),
      'response.output_text.done',
      'response.content_part.done',
      'response.output_item.done',
      'response.completed',
    ]);
    expect(deltas.map((e) => (e.type === 'response.output_text.delta' ? e.delta : '')).join('')).toBe('Hello there, friend!');
    expect(deltas[0]).toMatchObject({ item_id: 'msg_abc_0', output_index: 0, content_index: 0 });
    expect(events[0]).toMatchObject({
      type: 'response.created',
      response: { id: 'resp_abc', status: 'in_progress', output: [], usage: null },
    });
    const last = events.at(-1)!;
    expect(last.type).toBe('response.completed');
    // the streamed response is the one a whole answer gives
    const completed = (last as { response: Response }).response;
    const wholeAnswer = chatToResponse(
      whole({ text: 'Hello there, friend!', usage: { prompt: 9, completion: 6 } }),
      REQUEST,
      IDS,
    ) as unknown as Response;
    expect({ ...completed, completed_at: 0 }).toEqual({ ...wholeAnswer, completed_at: 0 });
    expect(stream.usage).toMatchObject({ prompt_tokens: 9, completion_tokens: 6 });
  });

  it('streams tool calls one item each, by the chat tool call index', () => {
    const calls = [
      { id: 'call_A', name: 'get_weather', arguments: '{"city":"Paris","unit":"c"}' },
      { id: 'call_B', name: 'get_weather', arguments: '{"city":"Oslo"}' },
    ];
    const { events } = streamed({ text: 'Checking.', calls });
    const types = checkSequence(events);
    const call = (n: number) => [
      'response.output_item.added',
      ...Array(Math.ceil(calls[n].arguments.length / 7)).fill('response.function_call_arguments.delta'),
      'response.function_call_arguments.done',
      'response.output_item.done',
    ];
    expect(types.slice(2, 4)).toEqual(['response.output_item.added', 'response.content_part.added']);
    expect(types.slice(types.indexOf('response.output_item.done') + 1)).toEqual([...call(0), ...call(1), 'response.completed']);
    const added = events.filter((e) => e.type === 'response.output_item.added');
    expect(added.map((e) => e.item)).toEqual([
      { id: 'msg_abc_0', type: 'message', status: 'in_progress', role: 'assistant', content: [] },
      { id: 'fc_abc_1', type: 'function_call', status: 'in_progress', call_id: 'call_A', name: 'get_weather', arguments: '' },
      { id: 'fc_abc_2', type: 'function_call', status: 'in_progress', call_id: 'call_B', name: 'get_weather', arguments: '' },
    ]);
    const done = events.filter((e) => e.type === 'response.function_call_arguments.done');
    expect(done).toMatchObject([
      { item_id: 'fc_abc_1', output_index: 1, name: 'get_weather', arguments: calls[0].arguments },
      { item_id: 'fc_abc_2', output_index: 2, name: 'get_weather', arguments: calls[1].arguments },
    ]);
    const completed = (events.at(-1) as { response: Response }).response;
    expect(completed.output.map((i) => (i as { status?: string }).status)).toEqual(['completed', 'completed', 'completed']);
  });

  it('reads tool calls however providers chunk them: whole, several in one chunk, or without an index', () => {
    const base = { id: 'c', object: 'chat.completion.chunk' as const, created: 1, model: PROVIDER_MODEL };
    const chunk = (delta: Record<string, unknown>, finish: string | null = null) => ({
      ...base,
      choices: [{ index: 0, delta, finish_reason: finish }],
    });
    const fn = (name: string, args: string) => ({ type: 'function', function: { name, arguments: args } });
    const variants = {
      'two whole calls in one chunk': [
        chunk({
          tool_calls: [
            { index: 0, id: 'call_1', ...fn('a', '{"x":1}') },
            { index: 1, id: 'call_2', ...fn('b', '{}') },
          ],
        }),
      ],
      'no index: a call per id, then its continuation': [
        chunk({ tool_calls: [{ id: 'call_1', ...fn('a', '{"x"') }] }),
        chunk({ tool_calls: [{ function: { arguments: ':1}' } }] }),
        chunk({ tool_calls: [{ id: 'call_2', ...fn('b', '{}') }] }),
      ],
    };
    for (const [name, chunks] of Object.entries(variants)) {
      const stream = new ChatToResponsesStream(REQUEST, IDS);
      const events = [
        ...stream.start(),
        ...chunks.flatMap((c) => stream.push(c)),
        ...stream.push(chunk({}, 'tool_calls')),
        ...stream.end(),
      ];
      checkSequence(events);
      const output = (events.at(-1) as { response: Response }).response.output;
      expect(output, name).toMatchObject([
        { type: 'function_call', id: 'fc_abc_0', call_id: 'call_1', name: 'a', arguments: '{"x":1}' },
        { type: 'function_call', id: 'fc_abc_1', call_id: 'call_2', name: 'b', arguments: '{}' },
      ]);
    }
  });

  it("holds a call begun before the open one's arguments came: each call's done events carry its own arguments", () => {
    const base = { id: 'c', object: 'chat.completion.chunk' as const, created: 1, model: PROVIDER_MODEL };
    const chunk = (delta: Record<string, unknown>, finish: string | null = null) => ({
      ...base,
      choices: [{ index: 0, delta, finish_reason: finish }],
    });
    const stream = new ChatToResponsesStream(REQUEST, IDS);
    const events = [
      ...stream.push(chunk({ tool_calls: [toolCallHead(0, 'call_1', 'a'), toolCallHead(1, 'call_2', 'b')] })),
      ...stream.push(chunk({ tool_calls: [toolCallArgs(0, '{"x":1}'), toolCallArgs(1, '{"y":2}')] })),
      ...stream.push(chunk({}, 'tool_calls')),
      ...stream.end(),
    ];
    checkSequence(events);
    const calls = [
      { type: 'function_call', call_id: 'call_1', arguments: '{"x":1}', status: 'completed' },
      { type: 'function_call', call_id: 'call_2', arguments: '{"y":2}', status: 'completed' },
    ];
    expect((events.at(-1) as { response: Response }).response.output).toMatchObject(calls);
    expect(events.flatMap((e) => (e.type === 'response.output_item.done' ? [e.item] : []))).toMatchObject(calls);
    expect(events.flatMap((e) => (e.type === 'response.function_call_arguments.done' ? [e.arguments] : []))).toEqual([
      '{"x":1}',
      '{"y":2}',
    ]);
    // the deltas of each call make its arguments, and the second is added with none (the SDK appends them)
    for (const [i, call] of calls.entries()) {
      const deltas = events.flatMap((e) => (e.type === 'response.function_call_arguments.delta' && e.output_index === i ? [e.delta] : []));
      expect(deltas.join('')).toBe(call.arguments);
    }
    expect(events.filter((e) => e.type === 'response.output_item.added').map((e) => e.item)).toMatchObject([
      { arguments: '' },
      { arguments: '' },
    ]);
  });

  it('ends with response.incomplete when the provider stopped at the token limit', () => {
    const { events } = streamed({ text: 'Once upon a', finish: 'length' }, { ...REQUEST, max_output_tokens: 3 });
    checkSequence(events);
    const last = events.at(-1)!;
    expect(last).toMatchObject({
      type: 'response.incomplete',
      response: { status: 'incomplete', incomplete_details: { reason: 'max_output_tokens' }, max_output_tokens: 3 },
    });
    expect(events.find((e) => e.type === 'response.output_item.done')).toMatchObject({ item: { status: 'incomplete' } });
  });

  it('streams a refusal as a refusal part, and an empty answer as an empty message', () => {
    const refused = checkSequence(streamed({ refusal: 'No.' }).events);
    expect(refused).toContain('response.refusal.delta');
    expect(refused).toContain('response.refusal.done');
    const { events } = streamed({ text: '' });
    checkSequence(events);
    expect((events.at(-1) as { response: Response }).response.output).toEqual([
      {
        id: 'msg_abc_0',
        type: 'message',
        status: 'completed',
        role: 'assistant',
        content: [{ type: 'output_text', text: '', annotations: [], logprobs: [] }],
      },
    ]);
  });

  it('starts once (push and end start it if the caller did not), absorbs the usage chunk, and can fail', () => {
    const stream = new ChatToResponsesStream(REQUEST, IDS);
    const first = stream.push(chunked({ text: 'Hi' })[1]);
    expect(first.map((e) => e.type)).toEqual([
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.content_part.added',
      'response.output_text.delta',
    ]);
    expect(stream.start()).toEqual([]);
    const usageChunk = chunked({ text: 'Hi', usage: { prompt: 3, completion: 1 } }).at(-1)!;
    expect(stream.push(usageChunk)).toEqual([]);
    expect(stream.usage).toMatchObject({ prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 });
    const failed = stream.fail('the provider stream ended before it finished');
    expect(failed).toMatchObject([
      {
        type: 'response.failed',
        sequence_number: 5,
        response: { status: 'failed', error: { code: 'server_error' }, usage: { input_tokens: 3 } },
      },
    ]);
    expect(stream.end()).toEqual([]);
    expect(stream.push(chunked({ text: 'more' })[1])).toEqual([]);
  });

  it('fails once the output it keeps passes its limit, calls without arguments counted too', () => {
    const base = { id: 'c', object: 'chat.completion.chunk', created: 1, model: PROVIDER_MODEL };
    const call = (index: number) => ({ ...base, choices: [{ index: 0, delta: { tool_calls: [{ index }] }, finish_reason: null }] });
    const stream = new ChatToResponsesStream(REQUEST, IDS, undefined, 4096);
    const events: ResponseStreamEvent[] = [];
    for (let i = 0; i < 1000 && !stream.failed; i++) events.push(...stream.push(call(i)));
    expect(stream.tooLarge).toBe(true);
    expect(events.filter((e) => e.type === 'response.output_item.added').length).toBeLessThan(100);
    expect(events.at(-1)).toMatchObject({
      type: 'response.failed',
      response: { error: { message: 'the answer is larger than 4096 bytes' } },
    });
    expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
    expect(stream.end()).toEqual([]);
    // Under the limit, an answer completes as ever.
    const small = new ChatToResponsesStream(REQUEST, IDS, undefined, 4096);
    const done = [...chunked({ text: 'Hello there' }).flatMap((c) => small.push(c)), ...small.end()];
    expect([small.tooLarge, done.at(-1)!.type]).toEqual([false, 'response.completed']);
  });

  it('writes each event as a named SSE event', () => {
    const [created] = new ChatToResponsesStream(REQUEST, IDS).start();
    const text = sseEvent(created);
    expect(text).toMatch(/^event: response\.created\ndata: \{.*\}\n\n$/);
    expect(JSON.parse(text.split('\n')[1].slice('data: '.length))).toEqual(created);
  });
});

// ---- through the official openai client -----------------------------------------------------

/**
 * A route as the gateway will run one: the client's Responses request translated for a chat
 * provider (the next scripted answer), and the chat answer translated back, streamed or whole.
 */
describe('through the official openai client', () => {
  let server: Server;
  let client: OpenAI;
  const answers: Script[] = [];
  const chatRequests: Record<string, any>[] = [];

  const readBody = async (req: IncomingMessage) => {
    const parts: Buffer[] = [];
    for await (const part of req) parts.push(part as Buffer);
    return JSON.parse(Buffer.concat(parts).toString('utf8')) as Record<string, unknown>;
  };

  beforeAll(async () => {
    server = createServer(async (req, res) => {
      const request = await readBody(req);
      const translated = responsesToChat(request);
      if (!translated.ok) {
        const error = { message: translated.message, type: 'invalid_request_error', param: translated.param, code: translated.code };
        res.writeHead(400, { 'content-type': 'application/json' }).end(JSON.stringify({ error }));
        return;
      }
      chatRequests.push(translated.chat);
      const script = answers.shift() ?? { text: 'no answer scripted' };
      const ids = { responseId: newResponseId(), now: Date.now() };
      if (translated.chat.stream !== true) {
        res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(chatToResponse(whole(script), request, ids)));
        return;
      }
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
      const stream = new ChatToResponsesStream(request, ids);
      const write = (events: ResponseStreamEvent[]) => events.forEach((e) => res.write(sseEvent(e)));
      for (const c of chunked(script)) write(stream.push(c));
      write(stream.end());
      res.end();
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    client = new OpenAI({ baseURL: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`, apiKey: 'sk-test', maxRetries: 0 });
  });
  afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));
  beforeEach(() => {
    answers.length = 0;
    chatRequests.length = 0;
  });

  const TEXT = 'The capital of France is Paris. It has about 2.1 million inhabitants.';

  it('responses.create({stream: true}): the SDK reads every event, and the deltas make the chat text', async () => {
    answers.push({ text: TEXT, usage: { prompt: 14, completion: 17 } });
    const stream = await client.responses.create({
      model: 'gpt-4o-mini',
      instructions: 'Be factual.',
      input: 'Capital of France?',
      stream: true,
    });
    const events: ResponseStreamEvent[] = [];
    for await (const event of stream) events.push(event);
    expect(events[0].type).toBe('response.created');
    expect(events.at(-1)!.type).toBe('response.completed');
    const text = events.map((e) => (e.type === 'response.output_text.delta' ? e.delta : '')).join('');
    expect(text).toBe(TEXT);
    const completed = events.at(-1) as { response: Response };
    expect(completed.response.usage).toMatchObject({ input_tokens: 14, output_tokens: 17, total_tokens: 31 });
    expect(chatRequests[0]).toMatchObject({
      messages: [
        { role: 'system', content: 'Be factual.' },
        { role: 'user', content: 'Capital of France?' },
      ],
      stream: true,
      stream_options: { include_usage: true },
    });
  });

  it('responses.stream(): the SDK accumulates the events, and finalResponse().output_text is the chat text', async () => {
    answers.push({ text: TEXT });
    const runner = client.responses.stream({ model: 'gpt-4o-mini', input: 'Capital of France?' });
    const snapshots: string[] = [];
    runner.on('response.output_text.delta', (e) => snapshots.push(e.snapshot));
    const final = await runner.finalResponse();
    expect(final.output_text).toBe(TEXT);
    expect(final.status).toBe('completed');
    expect(snapshots.at(-1)).toBe(TEXT);
    expect(final.usage).toMatchObject({ input_tokens: 12, output_tokens: 5 });
  });

  it('responses.create() without streaming: response.output_text is the chat text', async () => {
    answers.push({ text: TEXT });
    const response = await client.responses.create({ model: 'gpt-4o-mini', input: 'Capital of France?', max_output_tokens: 100 });
    expect(response.output_text).toBe(TEXT);
    expect(response).toMatchObject({ object: 'response', status: 'completed', model: PROVIDER_MODEL, max_output_tokens: 100 });
    expect(response.id).toMatch(/^resp_[0-9a-f]{48}$/);
    expect(chatRequests[0]).toEqual({ messages: [{ role: 'user', content: 'Capital of France?' }], max_completion_tokens: 100 });
  });

  it('a function-calling round trip: the call comes back as function_call items, its output goes on as a tool message', async () => {
    const call = { id: 'call_w1', name: 'get_weather', arguments: '{"city":"Paris"}' };
    answers.push({ calls: [call] }, { text: 'It is 18°C in Paris.' });
    const input: ResponseInputItem[] = [{ role: 'user', content: 'Weather in Paris?' }];
    const first = await client.responses.create({ model: 'gpt-4o-mini', input, tools: [WEATHER_TOOL] });
    expect(first.output).toEqual([
      expect.objectContaining({ type: 'function_call', call_id: 'call_w1', name: 'get_weather', arguments: '{"city":"Paris"}' }),
    ]);
    const fc = first.output[0];
    if (fc.type !== 'function_call') throw new Error('expected a function call');

    const second = await client.responses.create({
      model: 'gpt-4o-mini',
      tools: [WEATHER_TOOL],
      input: [
        ...input,
        ...(first.output as ResponseInputItem[]),
        { type: 'function_call_output', call_id: fc.call_id, output: JSON.stringify({ celsius: 18 }) },
      ],
    });
    expect(second.output_text).toBe('It is 18°C in Paris.');
    expect(chatRequests[1].messages).toEqual([
      { role: 'user', content: 'Weather in Paris?' },
      {
        role: 'assistant',
        content: null,
        tool_calls: [{ id: 'call_w1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }],
      },
      { role: 'tool', tool_call_id: 'call_w1', content: '{"celsius":18}' },
    ]);
    expect(chatRequests[1].tools).toEqual([
      {
        type: 'function',
        function: { name: 'get_weather', description: WEATHER_TOOL.description, parameters: WEATHER_TOOL.parameters, strict: true },
      },
    ]);
  });

  it('a streamed function call: finalResponse() has the call with its whole arguments (and the SDK parses strict ones)', async () => {
    const calls = [
      { id: 'call_s1', name: 'get_weather', arguments: '{"city":"Paris"}' },
      { id: 'call_s2', name: 'get_weather', arguments: '{"city":"Oslo"}' },
    ];
    answers.push({ text: 'Checking both.', calls }, { text: 'Paris 18°C, Oslo 4°C.' });
    const input: ResponseInputItem[] = [{ role: 'user', content: 'Weather in Paris and Oslo?' }];
    const final = await client.responses.stream({ model: 'gpt-4o-mini', input, tools: [WEATHER_TOOL] }).finalResponse();
    expect(final.output_text).toBe('Checking both.');
    const fcs = final.output.filter((i) => i.type === 'function_call');
    expect(fcs).toMatchObject([
      { call_id: 'call_s1', arguments: calls[0].arguments, parsed_arguments: { city: 'Paris' } },
      { call_id: 'call_s2', arguments: calls[1].arguments, parsed_arguments: { city: 'Oslo' } },
    ]);
    // the output passed back as it came (with the SDK's parsed fields), then both outputs
    const outputs = fcs.map((f) => ({
      type: 'function_call_output' as const,
      call_id: f.call_id,
      output: f.call_id === 'call_s1' ? '18' : '4',
    }));
    const next = await client.responses
      .stream({ model: 'gpt-4o-mini', tools: [WEATHER_TOOL], input: [...input, ...(final.output as ResponseInputItem[]), ...outputs] })
      .finalResponse();
    expect(next.output_text).toBe('Paris 18°C, Oslo 4°C.');
    expect(chatRequests[1].messages).toEqual([
      { role: 'user', content: 'Weather in Paris and Oslo?' },
      {
        role: 'assistant',
        content: 'Checking both.',
        tool_calls: calls.map((c) => ({ id: c.id, type: 'function', function: { name: c.name, arguments: c.arguments } })),
      },
      { role: 'tool', tool_call_id: 'call_s1', content: '18' },
      { role: 'tool', tool_call_id: 'call_s2', content: '4' },
    ]);
  });

  it('a stream cut at the token limit: finalResponse() is incomplete', async () => {
    answers.push({ text: 'Once upon a', finish: 'length' });
    const final = await client.responses.stream({ model: 'gpt-4o-mini', input: 'A story', max_output_tokens: 3 }).finalResponse();
    expect(final).toMatchObject({ status: 'incomplete', incomplete_details: { reason: 'max_output_tokens' }, output_text: 'Once upon a' });
  });

  it('an answer cut at the token limit after a finished call: only the last item is incomplete, whole as streamed', async () => {
    const script: Script = {
      text: 'Checking.',
      calls: [
        { id: 'call_t', name: 'get_time', arguments: '' }, // finished, without arguments
        { id: 'call_w', name: 'get_weather', arguments: '{"city":"Pa' }, // cut
      ],
      finish: 'length',
    };
    answers.push(script, script);
    const tools = [WEATHER_TOOL, { type: 'function' as const, name: 'get_time', parameters: null, strict: false }];
    const body = { model: 'gpt-4o-mini', input: 'Time, and weather in Paris?', tools, max_output_tokens: 20 };
    const whole = await client.responses.create(body);
    const streamed = await client.responses.stream(body).finalResponse();
    const items = (r: Response) =>
      r.output.map((i) => ({
        type: i.type,
        status: 'status' in i ? i.status : undefined,
        ...('arguments' in i ? { arguments: i.arguments } : {}),
      }));
    expect(items(whole)).toEqual([
      { type: 'message', status: 'completed' },
      { type: 'function_call', status: 'completed', arguments: '{}' },
      { type: 'function_call', status: 'incomplete', arguments: '{"city":"Pa' },
    ]);
    expect(items(streamed)).toEqual(items(whole));
    expect([whole.status, streamed.status]).toEqual(['incomplete', 'incomplete']);
  });

  it('max_tool_calls, a bound on built-in tool calls, is answered: a chat route makes none', async () => {
    answers.push({ text: TEXT });
    // In the API reference and the SDK's websocket `response.create`, not yet in its REST params type.
    const body = { model: 'gpt-4o-mini', input: 'Capital of France?', max_tool_calls: 2 };
    const response = await client.responses.create(body as ResponseCreateParams & { stream?: false });
    expect(response.output_text).toBe(TEXT);
    expect(chatRequests[0]).toEqual({ messages: [{ role: 'user', content: 'Capital of France?' }] });
  });

  it('a refused request: the SDK raises a 400 that names the parameter', async () => {
    const error = await client.responses.create({ model: 'gpt-4o-mini', input: 'Search the web', tools: [{ type: 'web_search' }] }).then(
      () => null,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(OpenAI.BadRequestError);
    expect(error).toMatchObject({ status: 400, param: 'tools[0].type', code: 'unsupported_parameter' });
    expect((error as Error).message).toContain("'web_search'");
  });
});

// ---- through the gateway, on a chat-only route ------------------------------------------------

/** The gateway with one chat-only route (the provider's chat stream is translated), read by the official client. */
describe('through the gateway, translated for a chat-only route', () => {
  let provider: FakeProvider;
  let gw: TestGateway;
  beforeEach(async () => {
    provider = await new FakeProvider().start();
    gw = await startGateway({ ...mapOf([]), hot: [{ provider: 'anthropic', model: 'claude-3-5-haiku-latest', baseUrl: provider.url }] });
  });
  afterEach(async () => {
    await gw.close();
    await provider.stop();
  });
  const client = () => new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  const base = { id: 'c', object: 'chat.completion.chunk', created: 1, model: PROVIDER_MODEL };
  const chunk = (delta: object, finish: string | null = null) => ({ ...base, choices: [{ index: 0, delta, finish_reason: finish }] });
  const sse = (chunks: unknown[], done = true) =>
    Buffer.from(chunks.map((c) => `data: ${JSON.stringify(c)}\n\n`).join('') + (done ? 'data: [DONE]\n\n' : ''));

  /** Every event of one streamed request, as the SDK iterates them. */
  async function events(): Promise<ResponseStreamEvent[]> {
    const out: ResponseStreamEvent[] = [];
    for await (const e of await client().responses.create({ model: 'gpt-4o-mini', input: 'hi', stream: true })) out.push(e);
    return out;
  }
  const lastMeterEvent = async () => {
    await gw.meter.flush();
    return gw.events().at(-1)!;
  };

  it('the output limit is max_tokens for a chat provider of another kind, max_completion_tokens for an OpenAI chat-only route', async () => {
    await client().responses.create({ model: 'gpt-4o-mini', input: 'hi', max_output_tokens: 50 });
    expect(provider.received[0].body).toMatchObject({ max_tokens: 50 });
    expect(provider.received[0].body).not.toHaveProperty('max_completion_tokens');

    const openAiChat = await startGateway({
      ...mapOf([]),
      hot: [{ provider: 'openai', model: 'gpt-4o-mini', baseUrl: provider.url, apis: ['chat'] }],
    });
    try {
      const viaOpenAi = new OpenAI({ baseURL: `${openAiChat.url}/v1`, apiKey: 'unused', maxRetries: 0 });
      await viaOpenAi.responses.create({ model: 'gpt-4o-mini', input: 'hi', max_output_tokens: 50 });
      expect(provider.received[1]).toMatchObject({ path: '/v1/chat/completions', body: { max_completion_tokens: 50 } });
      expect(provider.received[1].body).not.toHaveProperty('max_tokens');
    } finally {
      await openAiChat.close();
    }
  });

  it('an error inside the chat stream ends the response as failed with the provider message, metered as a failure', async () => {
    const errorChunk = { error: { message: 'Upstream overloaded', type: 'server_error', code: 503 } };
    const openRouter = {
      ...base,
      error: { message: 'Provider disconnected', code: 502 },
      choices: [{ index: 0, delta: { content: '' }, finish_reason: 'error' }],
    };
    for (const [last, message] of [
      [errorChunk, 'Upstream overloaded'],
      [openRouter, 'Provider disconnected'],
    ] as const) {
      const usage = { ...base, choices: [], usage: { prompt_tokens: 9, completion_tokens: 1 } };
      provider.next({
        kind: 'raw-stream',
        pieces: [sse([chunk({ role: 'assistant', content: 'Hel' }), last, chunk({ content: 'lo' }), usage])],
      });
      const seen = await events();
      expect(seen.map((e) => e.sequence_number)).toEqual(seen.map((_, i) => i));
      expect(seen.at(-1)).toMatchObject({ type: 'response.failed', response: { status: 'failed', error: { message } } });
      expect(seen.filter((e) => e.type === 'response.failed' || e.type === 'response.completed')).toHaveLength(1);
      expect(await lastMeterEvent()).toMatchObject({ input_tokens: '9', error_code: 'STREAM_INTERRUPTED' }); // the usage after the error kept

      provider.next({ kind: 'raw-stream', pieces: [sse([chunk({ role: 'assistant', content: 'Hel' }), last])] });
      const final = await client().responses.stream({ model: 'gpt-4o-mini', input: 'hi' }).finalResponse();
      expect(final).toMatchObject({ status: 'failed', error: { message }, output_text: 'Hel' });
    }
  });

  it('a whole chat answer after a byte-order mark (an answer, as the client reads it) is translated and metered as any other', async () => {
    const answer = whole({ text: 'marked', usage: { prompt: 9, completion: 2 } });
    provider.next({ kind: 'raw-stream', type: 'application/json', pieces: [Buffer.from(`\uFEFF${JSON.stringify(answer)}`)] });
    const response = await client().responses.create({ model: 'gpt-4o-mini', input: 'hi' });
    expect(response).toMatchObject({ object: 'response', status: 'completed', output_text: 'marked' });
    expect(await lastMeterEvent()).toMatchObject({ input_tokens: '9', output_tokens: '2', error_code: '' });
  });

  it("a whole chat answer reporting an error (OpenRouter's 200 once generation began) is a failure of the route: tried again, the client gets the answer that followed", async () => {
    const error = { message: 'Provider returned error', code: 502 };
    const cut = { index: 0, message: { role: 'assistant', content: 'Hel' }, finish_reason: 'error' };
    provider.next({ kind: 'status', status: 200, body: { ...base, object: 'chat.completion', choices: [cut], error } });
    const before = provider.received.length;
    const answer = await client().responses.create({ model: 'gpt-4o-mini', input: 'hi' });
    expect(answer.status).toBe('completed');
    expect(answer.output_text).not.toBe('Hel');
    expect(provider.received.length - before).toBe(2);
  });

  it("an answer the provider's engine aborted (vLLM's finish_reason abort, then [DONE]) is failed, not completed, whole or streamed", async () => {
    const usage = { ...base, choices: [], usage: { prompt_tokens: 9, completion_tokens: 1 } };
    provider.next({
      kind: 'raw-stream',
      pieces: [sse([chunk({ role: 'assistant', content: 'Hel' }), chunk({}, 'abort'), usage])],
    });
    const seen = await events();
    expect(seen.map((e) => e.sequence_number)).toEqual(seen.map((_, i) => i));
    expect(seen.at(-1)).toMatchObject({ type: 'response.failed', response: { status: 'failed', error: { code: 'server_error' } } });
    expect(seen.some((e) => e.type === 'response.completed')).toBe(false);
    expect(await lastMeterEvent()).toMatchObject({ input_tokens: '9', error_code: 'STREAM_INTERRUPTED' });

    // Whole, it is a failure of the route, as an error in the body is: tried again, the client gets the answer that followed.
    const cut = { index: 0, message: { role: 'assistant', content: 'Hel' }, finish_reason: 'abort' };
    provider.next({ kind: 'status', status: 200, body: { ...base, object: 'chat.completion', choices: [cut] } });
    const before = provider.received.length;
    const answer = await client().responses.create({ model: 'gpt-4o-mini', input: 'hi' });
    expect(answer.status).toBe('completed');
    expect(answer.output_text).not.toBe('Hel');
    expect(provider.received.length - before).toBe(2);
  });

  it("every event of a stream, and a whole answer, name one model: the provider's, else the one called (x-route-model)", async () => {
    const models = (seen: ResponseStreamEvent[]) => seen.flatMap((e) => ('response' in e ? [e.response.model] : []));
    provider.next({ kind: 'raw-stream', pieces: [sse([chunk({ role: 'assistant', content: 'Hi' }), chunk({}, 'stop')])] });
    const named = await events();
    expect(models(named)).toEqual([PROVIDER_MODEL, PROVIDER_MODEL, PROVIDER_MODEL]); // created, in_progress, completed

    const { model: _, ...unnamed } = base; // a provider whose chunks name no model
    const bare = (delta: object, finish: string | null = null) => ({ ...unnamed, choices: [{ index: 0, delta, finish_reason: finish }] });
    provider.next({ kind: 'raw-stream', pieces: [sse([bare({ role: 'assistant', content: 'Hi' }), bare({}, 'stop')])] });
    const { data, response } = await client().responses.create({ model: 'gpt-4o-mini', input: 'hi', stream: true }).withResponse();
    const seen: ResponseStreamEvent[] = [];
    for await (const e of data) seen.push(e);
    expect(response.headers.get('x-route-model')).toBe('claude-3-5-haiku-latest');
    expect(models(seen)).toEqual(Array(3).fill('claude-3-5-haiku-latest'));

    const message = { role: 'assistant', content: 'ok' };
    provider.next({
      kind: 'status',
      status: 200,
      body: { ...unnamed, object: 'chat.completion', choices: [{ index: 0, message, finish_reason: 'stop' }] },
    });
    const whole = await client().responses.create({ model: 'gpt-4o-mini', input: 'hi' });
    expect(whole.model).toBe('claude-3-5-haiku-latest');
  });

  it('a provider refusing the translated request names the parameters the client sent; status, type and code stay its own', async () => {
    const tool = (name: string) => ({ type: 'function' as const, name, parameters: { type: 'object' }, strict: false });
    const request: ResponseCreateParams = {
      model: 'gpt-4o-mini',
      instructions: 'be brief',
      input: [
        { role: 'user', content: 'weather?' },
        { type: 'function_call', call_id: 'call_1', name: 'b', arguments: '{"city":"Lisbon"}' },
        { type: 'function_call_output', call_id: 'call_1', output: 'sunny' },
        {
          role: 'user',
          content: [
            { type: 'input_text', text: 'and this?' },
            { type: 'input_image', image_url: 'data:image/png;base64,AA', detail: 'auto' },
          ],
        },
      ],
      tools: [tool('a'), tool('b')],
      tool_choice: { type: 'allowed_tools', mode: 'auto', tools: [{ type: 'function', name: 'b' }] }, // chat gets b alone, as tools[0]
      text: { format: { type: 'json_schema', name: 'answer', schema: { type: 'object' } } },
      max_output_tokens: 100_000,
    };
    const refused = async (param: string, message: string) => {
      const error = { message, type: 'invalid_request_error', param, code: 'invalid_value' };
      provider.next({ kind: 'status', status: 400, body: { error } });
      return (await client()
        .responses.create(request)
        .catch((e: unknown) => e)) as InstanceType<typeof OpenAI.BadRequestError>;
    };
    const tooMany = await refused('max_tokens', 'max_tokens is too large: 100000. This model supports at most 8192 completion tokens.');
    expect(tooMany).toBeInstanceOf(OpenAI.BadRequestError);
    expect(tooMany).toMatchObject({ status: 400, param: 'max_output_tokens', type: 'invalid_request_error', code: 'invalid_value' });
    expect(tooMany.error).toMatchObject({
      message: 'max_output_tokens is too large: 100000. This model supports at most 8192 completion tokens.',
    });
    const renamed: Array<[string, string]> = [
      ['messages[0].content', 'instructions'],
      ['messages[1].content', 'input[0].content'],
      ['messages[2].tool_calls[0].function.arguments', 'input[1].arguments'],
      ['messages.[3].content', 'input[2].output'],
      ['messages[4].content[1].image_url.url', 'input[3].content[1]'],
      ['tools[0].function.parameters', 'tools[1].parameters'],
      ['response_format.json_schema.schema', 'text.format.schema'],
      ['frequency_penalty', 'frequency_penalty'], // no Responses name: as the provider wrote it
    ];
    for (const [chat, responses] of renamed) {
      const error = await refused(chat, `Invalid '${chat}': refused.`);
      expect([error.status, error.param, error.error]).toEqual([
        400,
        responses,
        expect.objectContaining({ message: `Invalid '${responses}': refused.` }),
      ]);
    }
  });

  it('a provider that reports no usage, whole or streamed: the Response has none (the SDK types it optional, not null), the meter says UNPRICED', async () => {
    provider.next({ kind: 'ok', content: 'no usage here', usage: null });
    const whole = await client().responses.create({ model: 'gpt-4o-mini', input: 'hi' });
    expect(whole.output_text).toBe('no usage here');
    expect(whole).not.toHaveProperty('usage');

    provider.next({ kind: 'stream', chunks: 2, noUsage: true });
    const seen = await events();
    expect(seen.at(-1)!.type).toBe('response.completed');
    expect((seen.at(-1) as { response: Response }).response).not.toHaveProperty('usage');
    await gw.meter.flush();
    expect(gw.events().map((e) => [e.input_tokens, e.output_tokens, e.cost_usd, e.error_code])).toEqual([
      ['0', '0', '', 'UNPRICED'],
      ['0', '0', '', 'UNPRICED'],
    ]);
  });

  it('parallel tool calls that share index 0 but carry their own ids come back as separate function calls', async () => {
    const call = (id: string, name: string, args: string) => ({ index: 0, id, type: 'function', function: { name, arguments: args } });
    provider.next({
      kind: 'raw-stream',
      pieces: [
        sse([
          chunk({ role: 'assistant', content: null }),
          chunk({ tool_calls: [call('call_a', 'f', '{"x":')] }),
          chunk({ tool_calls: [{ index: 0, function: { arguments: '1}' } }] }),
          chunk({ tool_calls: [call('call_b', 'g', '{"y":2}')] }),
          chunk({}, 'tool_calls'),
        ]),
      ],
    });
    const final = await client().responses.stream({ model: 'gpt-4o-mini', input: 'hi' }).finalResponse();
    expect(final.output).toMatchObject([
      { type: 'function_call', call_id: 'call_a', name: 'f', arguments: '{"x":1}' },
      { type: 'function_call', call_id: 'call_b', name: 'g', arguments: '{"y":2}' },
    ]);
  });

  it("calls whose heads a provider streams first, their arguments after: each call's done events carry its whole arguments", async () => {
    const weather = [WEATHER_TOOL];
    for (const [name, deltas] of Object.entries({
      'one call after the other': [
        [toolCallArgs(0, '{"city":')],
        [toolCallArgs(0, '"Paris"}')],
        [toolCallArgs(1, '{"city":')],
        [toolCallArgs(1, '"Oslo"}')],
      ],
      interleaved: [
        [toolCallArgs(0, '{"city":'), toolCallArgs(1, '{"city":')],
        [toolCallArgs(1, '"Oslo"}')],
        [toolCallArgs(0, '"Paris"}')],
      ],
    })) {
      provider.next({
        kind: 'raw-stream',
        pieces: [
          sse([
            chunk({ role: 'assistant', content: null }),
            chunk({ tool_calls: [toolCallHead(0, 'call_p', 'get_weather'), toolCallHead(1, 'call_o', 'get_weather')] }),
            ...deltas.map((d) => chunk({ tool_calls: d })),
            chunk({}, 'tool_calls'),
          ]),
        ],
      });
      const stream = client().responses.stream({ model: 'gpt-4o-mini', input: 'Paris and Oslo?', tools: weather });
      const argumentsDone: string[] = [];
      const itemsDone: unknown[] = [];
      stream.on('response.function_call_arguments.done', (e) => argumentsDone.push(e.arguments));
      stream.on('response.output_item.done', (e) => itemsDone.push(e.item));
      const final = await stream.finalResponse();
      const calls = [
        { type: 'function_call', call_id: 'call_p', arguments: '{"city":"Paris"}', parsed_arguments: { city: 'Paris' } },
        { type: 'function_call', call_id: 'call_o', arguments: '{"city":"Oslo"}', parsed_arguments: { city: 'Oslo' } },
      ];
      expect(final.output, name).toMatchObject(calls);
      expect(argumentsDone, name).toEqual(['{"city":"Paris"}', '{"city":"Oslo"}']);
      expect(itemsDone, name).toMatchObject(calls.map(({ parsed_arguments: _, ...call }) => ({ ...call, status: 'completed' })));
    }
  });

  /**
   * Two weather calls whose pieces a provider interleaves: both heads with `{"city":`, then the rest
   * of Paris's arguments and of Oslo's, then the finish; the Response and its events as the SDK reads them.
   */
  async function interleavedCalls(paris: string, oslo: string, finish: string) {
    provider.next({
      kind: 'raw-stream',
      pieces: [
        sse([
          chunk({ role: 'assistant', content: null }),
          chunk({ tool_calls: [toolCallHead(0, 'call_p', 'get_weather', '{"city":')] }),
          chunk({ tool_calls: [toolCallHead(1, 'call_o', 'get_weather', '{"city":')] }),
          chunk({ tool_calls: [toolCallArgs(0, paris)] }),
          chunk({ tool_calls: [toolCallArgs(1, oslo)] }),
          chunk({}, finish),
        ]),
      ],
    });
    const stream = client().responses.stream({ model: 'gpt-4o-mini', input: 'Paris and Oslo?', tools: [WEATHER_TOOL] });
    const events: ResponseStreamEvent[] = [];
    stream.on('event', (e) => events.push(e));
    return { final: await stream.finalResponse(), events };
  }

  it("calls whose argument pieces a provider interleaves, the next begun before the first's arguments were whole: each call's done events carry its whole arguments", async () => {
    const { final, events } = await interleavedCalls('"Paris"}', '"Oslo"}', 'tool_calls');
    const calls = [
      { type: 'function_call', status: 'completed', call_id: 'call_p', arguments: '{"city":"Paris"}' },
      { type: 'function_call', status: 'completed', call_id: 'call_o', arguments: '{"city":"Oslo"}' },
    ];
    expect(final.output).toMatchObject(calls);
    const done = events.flatMap((e) => (e.type === 'response.output_item.done' ? [e.item] : []));
    expect(done).toMatchObject(calls);
    expect(events.flatMap((e) => (e.type === 'response.function_call_arguments.done' ? [e.arguments] : []))).toEqual(
      calls.map((c) => c.arguments),
    );
    // Each call's deltas, sent while it was open, make its arguments.
    const deltas = calls.map((_, i) =>
      events.map((e) => (e.type === 'response.function_call_arguments.delta' && e.output_index === i ? e.delta : '')).join(''),
    );
    expect(deltas).toEqual(calls.map((c) => c.arguments));
  });

  it('interleaved calls cut at the token limit: every call whose arguments are not whole JSON is incomplete, not only the one fed last', async () => {
    const { final, events } = await interleavedCalls('"Paris"', '"Os', 'length');
    const done = events.flatMap((e) => (e.type === 'response.output_item.done' ? [e.item] : []));
    const calls = [
      { type: 'function_call', status: 'incomplete', call_id: 'call_p', arguments: '{"city":"Paris"' },
      { type: 'function_call', status: 'incomplete', call_id: 'call_o', arguments: '{"city":"Os' },
    ];
    expect(final).toMatchObject({ status: 'incomplete', incomplete_details: { reason: 'max_output_tokens' } });
    expect(final.output).toMatchObject(calls);
    expect(done).toMatchObject(calls);
  });

  it('parallel calls under one index, heads first, each argument piece naming its call by id: each call once, whole as streamed', async () => {
    const head = (id: string) => ({ index: 0, id, type: 'function', function: { name: 'get_weather', arguments: '' } });
    const args = (id: string, text: string) => ({ index: 0, id, function: { arguments: text } });
    const calls = [
      { id: 'call_p', name: 'get_weather', arguments: '{"city":"Paris"}' },
      { id: 'call_o', name: 'get_weather', arguments: '{"city":"Oslo"}' },
    ];
    provider.next({
      kind: 'raw-stream',
      pieces: [
        sse([
          chunk({ role: 'assistant', content: null }),
          chunk({ tool_calls: [head('call_p'), head('call_o')] }),
          chunk({ tool_calls: [args('call_p', '{"city":')] }),
          chunk({ tool_calls: [args('call_p', '"Paris"}')] }),
          chunk({ tool_calls: [args('call_o', '{"city":"Oslo"}')] }),
          chunk({}, 'tool_calls'),
        ]),
      ],
    });
    const body = { model: 'gpt-4o-mini', input: 'Paris and Oslo?', tools: [WEATHER_TOOL] };
    const stream = client().responses.stream(body);
    const added: unknown[] = [];
    const done: unknown[] = [];
    stream.on('response.output_item.added', (e) => added.push(e.item));
    stream.on('response.output_item.done', (e) => done.push(e.item));
    const streamed = await stream.finalResponse();
    const message = {
      role: 'assistant',
      content: null,
      tool_calls: calls.map(({ id, ...fn }) => ({ id, type: 'function', function: fn })),
    };
    provider.next({
      kind: 'status',
      status: 200,
      body: { ...base, object: 'chat.completion', choices: [{ index: 0, message, finish_reason: 'tool_calls' }] },
    });
    const whole = await client().responses.create(body);
    const items = calls.map(({ id, ...call }) => ({ type: 'function_call', status: 'completed', call_id: id, ...call }));
    expect(streamed.output).toMatchObject(items);
    expect(streamed.output).toHaveLength(2);
    expect(whole.output).toMatchObject(items);
    expect(whole.output).toHaveLength(2);
    expect(added.map((i) => (i as { call_id: string }).call_id)).toEqual(['call_p', 'call_o']);
    expect(done).toMatchObject(items);
  });

  it('calls whose heads came first, cut at the token limit: the call cut, and those whose arguments had not come, are incomplete', async () => {
    for (const [name, deltas, expected] of [
      // the first call's arguments cut: the second's never came
      [
        'the first cut',
        [[toolCallArgs(0, '{"city":')], [toolCallArgs(0, '"Pa')]],
        [
          { status: 'incomplete', arguments: '{"city":"Pa' },
          { status: 'incomplete', arguments: '' },
        ],
      ],
      // the second's came first, whole; the first's were cut
      [
        'the second whole, the first cut',
        [[toolCallArgs(1, '{"city":"Oslo"}')], [toolCallArgs(0, '{"city":"Pa')]],
        [
          { status: 'incomplete', arguments: '{"city":"Pa' },
          { status: 'completed', arguments: '{"city":"Oslo"}' },
        ],
      ],
      // cut before any arguments came: neither call's came
      [
        'cut before any arguments',
        [],
        [
          { status: 'incomplete', arguments: '' },
          { status: 'incomplete', arguments: '' },
        ],
      ],
      // one after the other, the second's cut: as a whole answer marks it
      [
        'the second cut',
        [[toolCallArgs(0, '{"city":"Paris"}')], [toolCallArgs(1, '{"city":"Os')]],
        [
          { status: 'completed', arguments: '{"city":"Paris"}' },
          { status: 'incomplete', arguments: '{"city":"Os' },
        ],
      ],
    ] as const) {
      provider.next({
        kind: 'raw-stream',
        pieces: [
          sse([
            chunk({ role: 'assistant', content: null }),
            chunk({ tool_calls: [toolCallHead(0, 'call_p'), toolCallHead(1, 'call_o')] }),
            ...deltas.map((d) => chunk({ tool_calls: d })),
            chunk({}, 'length'),
          ]),
        ],
      });
      const tools = [{ ...WEATHER_TOOL, strict: false }];
      const stream = client().responses.stream({ model: 'gpt-4o-mini', input: 'Paris and Oslo?', tools, max_output_tokens: 9 });
      const done: unknown[] = [];
      stream.on('response.output_item.done', (e) => done.push(e.item));
      const final = await stream.finalResponse();
      const items = expected.map((item, i) => ({ type: 'function_call', call_id: ['call_p', 'call_o'][i], ...item }));
      expect(final.status, name).toBe('incomplete');
      expect(final.output, name).toMatchObject(items);
      expect(done, name).toMatchObject(items);
    }
  });

  it('a stream that breaks while calls are held: response.failed lists only the items the client saw added', async () => {
    const breaks = [
      chunk({ role: 'assistant', content: null }),
      chunk({ tool_calls: [toolCallHead(0, 'call_p'), toolCallHead(1, 'call_o')] }),
      chunk({ tool_calls: [{ index: 0, function: { arguments: '{"city":' } }] }),
    ];
    for (const [name, pieces] of [
      ['cut', [sse(breaks, false)]],
      ['an error in the stream', [sse([...breaks, { error: { message: 'overloaded' } }])]],
    ] as const) {
      provider.next({ kind: 'raw-stream', pieces: [...pieces] });
      const stream = client().responses.stream({ model: 'gpt-4o-mini', input: 'Paris and Oslo?', tools: [WEATHER_TOOL] });
      const added: string[] = [];
      stream.on('response.output_item.added', (e) => added.push(e.item.id!));
      const final = await stream.finalResponse();
      expect(final.status, name).toBe('failed');
      expect(final.output, name).toMatchObject([{ type: 'function_call', call_id: 'call_p', status: 'incomplete', arguments: '{"city":' }]);
      expect(
        final.output.map((i) => i.id),
        name,
      ).toEqual(added);
    }
  });

  it("a provider that streams its content as parts (Mistral's reasoning models): the text streams as a whole answer reads it", async () => {
    const thinking = { type: 'thinking', thinking: [{ type: 'text', text: 'The user greets me.' }] };
    const parts = [
      chunk({ role: 'assistant', content: '' }),
      chunk({ content: [thinking] }),
      chunk({ content: [{ type: 'text', text: 'Hello' }] }),
      chunk({
        content: [
          { type: 'text', text: ', ' },
          { type: 'text', text: 'world' },
        ],
      }),
      chunk({ content: '!' }),
      chunk({}, 'stop'),
    ];
    provider.next({ kind: 'raw-stream', pieces: [sse(parts)] });
    const seen = await events();
    const deltas = seen.flatMap((e) => (e.type === 'response.output_text.delta' ? [e.delta] : []));
    expect(deltas.join('')).toBe('Hello, world!');
    expect(seen.at(-1)).toMatchObject({ type: 'response.completed', response: { output: [{ content: [{ text: 'Hello, world!' }] }] } });

    const message = { role: 'assistant', content: [thinking, { type: 'text', text: 'Hello, world!' }] };
    provider.next({
      kind: 'status',
      status: 200,
      body: { ...base, object: 'chat.completion', choices: [{ index: 0, message, finish_reason: 'stop' }] },
    });
    expect((await client().responses.create({ model: 'gpt-4o-mini', input: 'hi' })).output_text).toBe('Hello, world!');
  });

  it("an answer Mistral cut at the model's context length (finish_reason model_length) is incomplete, whole or streamed", async () => {
    const message = { role: 'assistant', content: 'Once upon a' };
    provider.next({
      kind: 'status',
      status: 200,
      body: { ...base, object: 'chat.completion', choices: [{ index: 0, message, finish_reason: 'model_length' }] },
    });
    const whole = await client().responses.create({ model: 'gpt-4o-mini', input: 'A long story' });
    expect(whole).toMatchObject({ status: 'incomplete', incomplete_details: { reason: 'max_output_tokens' }, output_text: 'Once upon a' });

    provider.next({ kind: 'raw-stream', pieces: [sse([chunk({ role: 'assistant', content: 'Once upon a' }), chunk({}, 'model_length')])] });
    const final = await client().responses.stream({ model: 'gpt-4o-mini', input: 'A long story' }).finalResponse();
    expect(final).toMatchObject({ status: 'incomplete', incomplete_details: { reason: 'max_output_tokens' }, output_text: 'Once upon a' });
    expect(final.output[0]).toMatchObject({ type: 'message', status: 'incomplete' });
  });

  it('a call of a function without parameters that came without arguments has the arguments {}, whole or streamed (the SDK parses them)', async () => {
    const now = { type: 'function' as const, name: 'now', parameters: { type: 'object', properties: {} }, strict: true };
    // No argument deltas at all, as Anthropic's models give a call without input.
    const call = { index: 0, id: 'call_n', type: 'function', function: { name: 'now' } };
    provider.next({
      kind: 'raw-stream',
      pieces: [sse([chunk({ role: 'assistant', content: null }), chunk({ tool_calls: [call] }), chunk({}, 'tool_calls')])],
    });
    const seen: ResponseStreamEvent[] = [];
    const stream = client().responses.stream({ model: 'gpt-4o-mini', input: 'time?', tools: [now] });
    stream.on('event', (e) => seen.push(e));
    const final = await stream.finalResponse();
    expect(final.output).toMatchObject([{ type: 'function_call', call_id: 'call_n', arguments: '{}', parsed_arguments: {} }]);
    const deltas = seen.flatMap((e) => (e.type === 'response.function_call_arguments.delta' ? [e.delta] : []));
    expect(deltas.join('')).toBe('{}'); // the deltas make the arguments the done event gives

    const message = {
      role: 'assistant',
      content: null,
      tool_calls: [{ id: 'call_n', type: 'function', function: { name: 'now', arguments: '' } }],
    };
    provider.next({
      kind: 'status',
      status: 200,
      body: { ...base, object: 'chat.completion', choices: [{ index: 0, message, finish_reason: 'tool_calls' }] },
    });
    const whole = await client().responses.parse({ model: 'gpt-4o-mini', input: 'time?', tools: [now] });
    expect(whole.output).toMatchObject([{ type: 'function_call', arguments: '{}', parsed_arguments: {} }]);
  });

  it('a call whose arguments a provider gives as a JSON object (not a string) keeps them, whole or streamed', async () => {
    // llama.cpp's server, TGI and Venice have given them so; the client's function needs them as OpenAI's string.
    const call = { index: 0, id: 'call_o', type: 'function', function: { name: 'get_weather', arguments: { city: 'Paris' } } };
    provider.next({
      kind: 'raw-stream',
      pieces: [sse([chunk({ role: 'assistant', content: null }), chunk({ tool_calls: [call] }), chunk({}, 'tool_calls')])],
    });
    const seen: ResponseStreamEvent[] = [];
    const stream = client().responses.stream({ model: 'gpt-4o-mini', input: 'weather?', tools: [WEATHER_TOOL] });
    stream.on('event', (e) => seen.push(e));
    const final = await stream.finalResponse();
    expect(final.output).toMatchObject([
      { type: 'function_call', call_id: 'call_o', arguments: '{"city":"Paris"}', parsed_arguments: { city: 'Paris' } },
    ]);
    const deltas = seen.flatMap((e) => (e.type === 'response.function_call_arguments.delta' ? [e.delta] : []));
    expect(deltas.join('')).toBe('{"city":"Paris"}');

    const { index: _, ...whole } = call;
    const message = { role: 'assistant', content: null, tool_calls: [whole] };
    provider.next({
      kind: 'status',
      status: 200,
      body: { ...base, object: 'chat.completion', choices: [{ index: 0, message, finish_reason: 'tool_calls' }] },
    });
    const answer = await client().responses.create({ model: 'gpt-4o-mini', input: 'weather?', tools: [WEATHER_TOOL] });
    expect(answer.output).toMatchObject([{ type: 'function_call', arguments: '{"city":"Paris"}' }]);
  });

  it('a call whose arguments object is nested too deep to be written again is a call without arguments, not a 500 or an empty stream', async () => {
    const deep = '['.repeat(100_000) + ']'.repeat(100_000);
    const fn = `{"name":"get_weather","arguments":{"city":${deep}}}`;
    const message = `{"role":"assistant","content":null,"tool_calls":[{"id":"call_d","type":"function","function":${fn}}]}`;
    const answer = `{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":${message},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":9,"completion_tokens":1}}`;
    provider.next({ kind: 'raw-stream', type: 'application/json', pieces: [Buffer.from(answer)] });
    const whole = await client().responses.create({ model: 'gpt-4o-mini', input: 'weather?', tools: [WEATHER_TOOL] });
    expect(whole.output).toMatchObject([{ type: 'function_call', call_id: 'call_d', name: 'get_weather', arguments: '{}' }]);
    expect(await lastMeterEvent()).toMatchObject({ input_tokens: '9', error_code: '' });

    const delta = `{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_d","type":"function","function":${fn}}]},"finish_reason":null}]}`;
    const usage = { ...base, choices: [], usage: { prompt_tokens: 9, completion_tokens: 1 } };
    provider.next({
      kind: 'raw-stream',
      pieces: [Buffer.concat([Buffer.from(`data: ${delta}\n\n`), sse([chunk({}, 'tool_calls'), usage])])],
    });
    const final = await client()
      .responses.stream({ model: 'gpt-4o-mini', input: 'weather?', tools: [WEATHER_TOOL] })
      .finalResponse();
    expect(final).toMatchObject({ status: 'completed', output: [{ type: 'function_call', call_id: 'call_d', arguments: '{}' }] });
    expect(await lastMeterEvent()).toMatchObject({ input_tokens: '9', error_code: '' });
  });

  it('a provider that names its usage as the Responses API does: the Response keeps its cached and reasoning tokens', async () => {
    const usage = {
      input_tokens: 100,
      output_tokens: 6,
      input_tokens_details: { cached_tokens: 80 },
      output_tokens_details: { reasoning_tokens: 2 },
    };
    const message = { role: 'assistant', content: 'ok' };
    provider.next({
      kind: 'status',
      status: 200,
      body: { ...base, object: 'chat.completion', choices: [{ index: 0, message, finish_reason: 'stop' }], usage },
    });
    const response = await client().responses.create({ model: 'gpt-4o-mini', input: 'hi' });
    expect(response.usage).toMatchObject({
      input_tokens: 100,
      input_tokens_details: { cached_tokens: 80 },
      output_tokens: 6,
      output_tokens_details: { reasoning_tokens: 2 },
    });
  });

  it('logprobs asked for (include message.output_text.logprobs, top_logprobs) are asked of the chat provider and given back, whole or streamed', async () => {
    // As chat gives them (bytes left out by some providers), and as the Responses API gives them.
    const top = (token: string, logprob: number) => ({ token, logprob, bytes: [...Buffer.from(token)] });
    const chatLogprob = (token: string, logprob: number) => ({ ...top(token, logprob), top_logprobs: [top(token, logprob), top('x', -3)] });
    const [hi, bang] = [chatLogprob('Hi', -0.1), chatLogprob('!', -0.5)];
    const asked = { model: 'gpt-4o-mini', input: 'hi', include: ['message.output_text.logprobs' as const], top_logprobs: 2 };

    const message = { role: 'assistant', content: 'Hi!' };
    const choice = { index: 0, message, finish_reason: 'stop', logprobs: { content: [hi, bang], refusal: null } };
    provider.next({ kind: 'status', status: 200, body: { ...base, object: 'chat.completion', choices: [choice] } });
    const whole = await client().responses.create(asked);
    expect(provider.received[0].body).toMatchObject({ logprobs: true, top_logprobs: 2 });
    expect(whole.output).toMatchObject([{ type: 'message', content: [{ type: 'output_text', text: 'Hi!', logprobs: [hi, bang] }] }]);

    const withLogprobs = (delta: object, logprob: object) => ({
      ...base,
      choices: [{ index: 0, delta, finish_reason: null, logprobs: { content: [logprob] } }],
    });
    provider.next({
      kind: 'raw-stream',
      pieces: [sse([withLogprobs({ role: 'assistant', content: 'Hi' }, hi), withLogprobs({ content: '!' }, bang), chunk({}, 'stop')])],
    });
    const seen: ResponseStreamEvent[] = [];
    const stream = client().responses.stream(asked);
    stream.on('event', (e) => seen.push(e));
    const final = await stream.finalResponse();
    expect(provider.received[1].body).toMatchObject({ logprobs: true, top_logprobs: 2, stream: true });
    expect(seen.flatMap((e) => (e.type === 'response.output_text.delta' ? [e.logprobs] : []))).toEqual([[hi], [bang]]);
    expect(seen.find((e) => e.type === 'response.output_text.done')).toMatchObject({ text: 'Hi!', logprobs: [hi, bang] });
    expect(final.output).toMatchObject([{ type: 'message', content: [{ type: 'output_text', text: 'Hi!', logprobs: [hi, bang] }] }]);

    await client().responses.create({ model: 'gpt-4o-mini', input: 'hi', top_logprobs: 2 }); // not asked for: not asked of the provider
    expect(provider.received[2].body).not.toHaveProperty('logprobs');
    expect(provider.received[2].body).not.toHaveProperty('top_logprobs');

    // A provider that gives none refuses them: the client is told the parameter it sent.
    const error = { message: "Unsupported parameter: 'logprobs' is not supported with this model.", type: 'invalid_request_error' };
    provider.next({ kind: 'status', status: 400, body: { error: { ...error, param: 'logprobs', code: 'unsupported_parameter' } } });
    const refused = await client()
      .responses.create(asked)
      .catch((e: unknown) => e);
    expect(refused).toMatchObject({ status: 400, param: 'include', message: expect.stringContaining("'include' is not supported") });
  });

  it("logprobs a provider streams on a chunk without text (a character split across tokens, its text sent with the next) are the output text's too", async () => {
    const asked = { model: 'gpt-4o-mini', input: 'hi', include: ['message.output_text.logprobs' as const] };
    const token = (t: string, bytes: number[]) => ({ token: t, logprob: -0.1, bytes, top_logprobs: [] });
    const [first, second, bang] = [token('\\xf0\\x9f', [240, 159]), token('\\x98\\x80', [152, 128]), token('!', [33])];
    const withLogprobs = (delta: object, ...content: object[]) => ({
      ...base,
      choices: [{ index: 0, delta, finish_reason: null, logprobs: { content } }],
    });
    provider.next({
      kind: 'raw-stream',
      pieces: [
        sse([
          withLogprobs({ role: 'assistant', content: '' }, first),
          withLogprobs({ content: '😀' }, second),
          withLogprobs({ content: '!' }, bang),
          chunk({}, 'stop'),
        ]),
      ],
    });
    const seen: ResponseStreamEvent[] = [];
    const stream = client().responses.stream(asked);
    stream.on('event', (e) => seen.push(e));
    const final = await stream.finalResponse();
    expect(seen.flatMap((e) => (e.type === 'response.output_text.delta' ? [[e.delta, e.logprobs]] : []))).toEqual([
      ['😀', [first, second]],
      ['!', [bang]],
    ]);
    expect(final.output).toMatchObject([
      { type: 'message', content: [{ type: 'output_text', text: '😀!', logprobs: [first, second, bang] }] },
    ]);
  });

  it('a chunk with more logprobs than a function takes arguments (150,000) is translated whole, not a stream broken before its first event', async () => {
    const asked = { model: 'gpt-4o-mini', input: 'hi', include: ['message.output_text.logprobs'], stream: true };
    const many = Array.from({ length: 150_000 }, () => ({ token: 'a', logprob: 0 })); // 4 MB: within a chat event's 8 MiB
    const withLogprobs = (delta: object, content: object[]) => ({
      ...base,
      choices: [{ index: 0, delta, finish_reason: null, logprobs: { content } }],
    });
    for (const chunks of [
      [withLogprobs({ role: 'assistant', content: 'a' }, many)],
      [withLogprobs({ role: 'assistant', content: '' }, many), withLogprobs({ content: 'a' }, [])], // held for the text that follows
    ]) {
      provider.next({ kind: 'raw-stream', pieces: [sse([...chunks, chunk({}, 'stop')])] });
      // Read as SSE here: the SDK's own reading of 40 MB of events takes longer than the test may.
      const res = await fetch(`${gw.url}/v1/responses`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(asked),
      });
      const seen = (await res.text())
        .split('\n')
        .flatMap((line) => (line.startsWith('data: ') ? [JSON.parse(line.slice(6)) as ResponseStreamEvent] : []));
      expect(seen[0].type).toBe('response.created');
      const last = seen.at(-1)!;
      expect(last.type).toBe('response.completed');
      const [text] =
        last.type === 'response.completed' ? last.response.output.flatMap((item) => (item.type === 'message' ? item.content : [])) : [];
      expect(text.type === 'output_text' && text.logprobs?.length).toBe(150_000);
    }
  });

  it("a token's bytes a provider gives as something else than bytes are its text's UTF-8 bytes: the answer still translated, whole or streamed", async () => {
    const asked = { model: 'gpt-4o-mini', input: 'hi', include: ['message.output_text.logprobs' as const] };
    const deep = '['.repeat(100_000) + ']'.repeat(100_000); // valid JSON, too deep to serialize again
    const hostile = [`["x",{"a":1},300,-1,1.5]`, `"SGk="`, deep];
    const expected = [{ token: 'Hi', logprob: -0.1, bytes: [72, 105], top_logprobs: [{ token: 'Hi', logprob: -0.1, bytes: [72, 105] }] }];
    for (const bytes of hostile) {
      const logprob = `{"token":"Hi","logprob":-0.1,"bytes":${bytes}}`;
      const logprobs = `{"content":[{"token":"Hi","logprob":-0.1,"bytes":${bytes},"top_logprobs":[${logprob}]}]}`;
      const answer = `{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Hi"},"finish_reason":"stop","logprobs":${logprobs}}]}`;
      provider.next({ kind: 'raw-stream', type: 'application/json', pieces: [Buffer.from(answer)] });
      const whole = await client().responses.create(asked);
      expect(whole.output).toMatchObject([{ type: 'message', content: [{ type: 'output_text', text: 'Hi', logprobs: expected }] }]);

      const delta = `{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null,"logprobs":${logprobs}}]}`;
      provider.next({ kind: 'raw-stream', pieces: [Buffer.concat([Buffer.from(`data: ${delta}\n\n`), sse([chunk({}, 'stop')])])] });
      const final = await client().responses.stream(asked).finalResponse();
      expect(final).toMatchObject({ status: 'completed', output: [{ content: [{ text: 'Hi', logprobs: expected }] }] });
    }
  });

  it("a provider's URL citations (chat annotations: OpenAI's search-preview models, OpenRouter's web plugin) are the output text's annotations, whole or streamed", async () => {
    const text = 'Paris is the capital of France [1][2].';
    const cite = (url: string, title: string, start: number, end: number) => ({
      chat: { type: 'url_citation', url_citation: { url, title, start_index: start, end_index: end } },
      responses: { type: 'url_citation', url, title, start_index: start, end_index: end },
    });
    const [wiki, news] = [cite('https://en.wikipedia.org/wiki/Paris', 'Paris', 0, 34), cite('https://example.org/france', 'France', 0, 38)];
    const unknownKind = { type: 'file_citation', file_citation: { file_id: 'f' } }; // no Responses equivalent: left out

    const answer = { role: 'assistant', content: text, annotations: [wiki.chat, unknownKind, news.chat] };
    const choices = [{ index: 0, message: answer, finish_reason: 'stop' }];
    provider.next({ kind: 'status', status: 200, body: { ...base, object: 'chat.completion', choices } });
    const whole = await client().responses.create({ model: 'gpt-4o-mini', input: 'hi' });
    expect(whole.output).toMatchObject([
      { type: 'message', content: [{ type: 'output_text', text, annotations: [wiki.responses, news.responses] }] },
    ]);

    // Cited on the chunk with the text, then again (a provider repeating what it gave) with the next citation, on a chunk of its own.
    provider.next({
      kind: 'raw-stream',
      pieces: [
        sse([
          chunk({ role: 'assistant', content: 'Paris is the capital ' }),
          chunk({ content: 'of France [1][2].', annotations: [wiki.chat] }),
          chunk({ annotations: [wiki.chat, unknownKind, news.chat] }),
          chunk({}, 'stop'),
        ]),
      ],
    });
    const seen = await events();
    const added = seen.filter((e) => e.type === 'response.output_text.annotation.added');
    const message = seen.find((e) => e.type === 'response.output_item.added')!;
    const at = { item_id: message.type === 'response.output_item.added' && message.item.id, output_index: 0, content_index: 0 };
    expect(added).toMatchObject([
      { ...at, annotation_index: 0, annotation: wiki.responses },
      { ...at, annotation_index: 1, annotation: news.responses },
    ]);
    // Each after the text it cites arrived, before the text is done.
    const order = seen.map((e) => e.type);
    expect(order.lastIndexOf('response.output_text.delta')).toBeLessThan(order.indexOf('response.output_text.annotation.added'));
    expect(order.lastIndexOf('response.output_text.annotation.added')).toBeLessThan(order.indexOf('response.output_text.done'));
    const annotated = { type: 'output_text', text, annotations: [wiki.responses, news.responses] };
    expect(seen.find((e) => e.type === 'response.content_part.done')).toMatchObject({ part: annotated });
    expect(seen.find((e) => e.type === 'response.output_item.done')).toMatchObject({ item: { content: [annotated] } });
    expect(seen.at(-1)).toMatchObject({ type: 'response.completed', response: { output: [{ type: 'message', content: [annotated] }] } });
  });

  it('10,000 citations in a stream come back each once and in order (one given again is found at once, not compared with each before it)', async () => {
    // Each compared with every one before it took minutes of the event loop for 10,000 (every client of the instance stalled).
    const cited = Array.from({ length: 10_000 }, (_, i) => ({
      type: 'url_citation',
      url_citation: { url: `https://example.org/${i}`, title: `${i}`, start_index: 0, end_index: 5 },
    }));
    const batches = Array.from({ length: 10 }, (_, i) => chunk({ annotations: cited.slice(i * 1000, (i + 1) * 1000) }));
    provider.next({ kind: 'raw-stream', pieces: [sse([chunk({ role: 'assistant', content: 'Paris' }), ...batches, chunk({}, 'stop')])] });
    const final = await client().responses.stream({ model: 'gpt-4o-mini', input: 'hi' }).finalResponse();
    const [text] = final.output.flatMap((item) => (item.type === 'message' ? item.content : []));
    expect(text.type === 'output_text' && text.annotations.map((a) => a.type === 'url_citation' && a.url)).toEqual(
      cited.map((c) => c.url_citation.url),
    );
  }, 30_000);

  it('text a provider streams after its tool call goes back with the call: the tool output still follows the call', async () => {
    const call = { index: 0, id: 'call_a', type: 'function', function: { name: 'f', arguments: '{"x":1}' } };
    provider.next({
      kind: 'raw-stream',
      pieces: [
        sse([
          chunk({ role: 'assistant', content: null }),
          chunk({ tool_calls: [call] }),
          chunk({ content: 'Calling f.' }),
          chunk({}, 'tool_calls'),
        ]),
      ],
    });
    const input: ResponseInputItem[] = [{ role: 'user', content: 'hi' }];
    const first = await client().responses.stream({ model: 'gpt-4o-mini', input }).finalResponse();
    expect(first.output.map((i) => i.type)).toEqual(['function_call', 'message']);

    const output = { type: 'function_call_output' as const, call_id: 'call_a', output: '2' };
    await client().responses.create({ model: 'gpt-4o-mini', input: [...input, ...(first.output as ResponseInputItem[]), output] });
    // chat wants an assistant message's tool calls answered by the tool messages right after it
    expect(provider.received[1].body.messages).toEqual([
      { role: 'user', content: 'hi' },
      {
        role: 'assistant',
        content: 'Calling f.',
        tool_calls: [{ id: 'call_a', type: 'function', function: { name: 'f', arguments: '{"x":1}' } }],
      },
      { role: 'tool', tool_call_id: 'call_a', content: '2' },
    ]);
  });

  it("an agent loop with OpenAI's call ids, Hot down, is answered by a Mistral route: each call_id it refuses goes as 9 letters and digits, a call and its output alike", async () => {
    const hot = await new FakeProvider().start();
    const failover = await startGateway({
      ...mapOf([hot.url]),
      warm: [{ provider: 'mistral', model: PROVIDER_MODEL, baseUrl: asMistral(provider).url }],
    });
    try {
      hot.always({ kind: 'status', status: 503 });
      const via = new OpenAI({ baseURL: `${failover.url}/v1`, apiKey: 'unused', maxRetries: 0 });
      const callId = 'call_Qm3kX9vPzR2tLwY8nB4cJ7hD';
      const input: ResponseInputItem[] = [
        { role: 'user', content: 'Weather in Paris?' },
        { type: 'function_call', call_id: callId, name: 'weather', arguments: '{"city":"Paris"}' },
        { type: 'function_call_output', call_id: callId, output: '18C' },
      ];
      const whole = await via.responses.create({ model: 'gpt-4o-mini', input });
      expect(whole).toMatchObject({ status: 'completed', output_text: `hello from ${PROVIDER_MODEL}` });
      provider.next({ kind: 'stream', contents: ['18C in Paris'] });
      const streamed = await via.responses.stream({ model: 'gpt-4o-mini', input }).finalResponse();
      expect(streamed).toMatchObject({ status: 'completed', output_text: '18C in Paris' });

      expect(hot.received[0]).toMatchObject({ path: '/v1/responses', body: { input } }); // the OpenAI route got the ids as sent
      const [first, second] = provider.received.map((r) => r.body.messages);
      const [, assistant, tool] = first;
      expect(assistant.tool_calls[0].id).toMatch(/^[a-zA-Z0-9]{9}$/);
      expect(tool).toEqual({ role: 'tool', tool_call_id: assistant.tool_calls[0].id, content: '18C' });
      expect(second).toEqual(first); // the same id each time
    } finally {
      await failover.close();
      await hot.stop();
    }
  });

  it('a chat stream cut mid-way ends with a numbered response.failed that keeps what arrived', async () => {
    provider.next({ kind: 'stream', chunks: 5, cutAfter: 2, delayMs: 20 }); // its first bytes surely arrive before the cut
    const seen = await events();
    expect(seen.map((e) => e.sequence_number)).toEqual(seen.map((_, i) => i));
    expect(seen.at(-1)).toMatchObject({ type: 'response.failed', response: { status: 'failed', error: { code: 'server_error' } } });
    expect((await lastMeterEvent()).error_code).toBe('STREAM_INTERRUPTED');

    // The chunks that arrived before the end (without [DONE]) stay in the output.
    provider.next({ kind: 'raw-stream', pieces: [sse([chunk({ role: 'assistant', content: 'Hel' }), chunk({ content: 'lo' })], false)] });
    const final = await client().responses.stream({ model: 'gpt-4o-mini', input: 'hi' }).finalResponse();
    expect(final).toMatchObject({ status: 'failed', output_text: 'Hello', output: [{ type: 'message', status: 'incomplete' }] });
  });

  it('a chat event that is not JSON ends the response as failed, not completed with a hole where its text was', async () => {
    const usage = { ...base, choices: [], usage: { prompt_tokens: 9, completion_tokens: 3 } };
    const broken = Buffer.from(`data: ${JSON.stringify(chunk({ content: 'NOT ' })).slice(0, -3)}\n\n`);
    const after = [chunk({ content: '42' }, 'stop'), usage];
    provider.next({ kind: 'raw-stream', pieces: [sse([chunk({ role: 'assistant', content: 'It is ' })], false), broken, sse(after)] });
    const final = await client().responses.stream({ model: 'gpt-4o-mini', input: 'hi' }).finalResponse();
    expect(final).toMatchObject({ status: 'failed', output_text: 'It is ', error: { code: 'server_error' } });
    expect(await lastMeterEvent()).toMatchObject({ input_tokens: '9', output_tokens: '3', error_code: 'STREAM_INTERRUPTED' });
    expect(gw.gateway.path.failover.routes[0].health.lastTwenty()).toEqual([0]);
    // A data line with nothing in it (a keep-alive) says nothing: the answer completes.
    provider.next({
      kind: 'raw-stream',
      pieces: [sse([chunk({ role: 'assistant', content: 'It is ' })], false), Buffer.from('data:\n\n'), sse(after)],
    });
    const whole = await client().responses.stream({ model: 'gpt-4o-mini', input: 'hi' }).finalResponse();
    expect(whole).toMatchObject({ status: 'completed', output_text: 'It is 42' });
  });

  it('a chat stream the provider ends normally after its finish_reason, without [DONE]: response.completed, metered a success', async () => {
    const usage = { ...base, choices: [], usage: { prompt_tokens: 9, completion_tokens: 2 } };
    const answer = [chunk({ role: 'assistant', content: 'Hel' }), chunk({ content: 'lo' }, 'stop'), usage];
    provider.next({ kind: 'raw-stream', pieces: [sse(answer, false)] });
    const seen = await events();
    expect(seen.map((e) => e.sequence_number)).toEqual(seen.map((_, i) => i));
    expect(seen.at(-1)).toMatchObject({ type: 'response.completed', response: { status: 'completed', usage: { input_tokens: 9 } } });
    expect(seen.some((e) => e.type === 'response.failed' || e.type === 'error')).toBe(false);
    expect(await lastMeterEvent()).toMatchObject({ input_tokens: '9', output_tokens: '2', error_code: '' });
    expect(gw.gateway.path.failover.routes[0].health.lastTwenty()).toEqual([1]);

    // Cut after the finish_reason, by a reset or in the middle of the usage chunk: broken, as before.
    const halfUsage = Buffer.from(`data: ${JSON.stringify(usage).slice(0, 30)}`);
    for (const cut of [
      { kind: 'raw-stream', pieces: [sse(answer, false)], reset: true },
      { kind: 'raw-stream', pieces: [sse(answer.slice(0, 2), false), halfUsage] },
    ] as const) {
      provider.next({ ...cut, pieces: [...cut.pieces] });
      const final = await client().responses.stream({ model: 'gpt-4o-mini', input: 'hi' }).finalResponse();
      expect(final).toMatchObject({ status: 'failed', output_text: 'Hello' });
      expect((await lastMeterEvent()).error_code).toBe('STREAM_INTERRUPTED');
    }
  });
});

describe('a streamed Responses request run by the Cold worker', () => {
  const route = { apis: new Set(['chat']), config: { model: 'claude-3-5-haiku-latest' } } as unknown as Route;
  const context = (stream: boolean): RequestContext => {
    const translated = translate({ model: 'gpt-4o-mini', input: 'hi', stream: true });
    return { api: 'responses', body: { model: 'gpt-4o-mini' }, asChat: translated, stream } as RequestContext;
  };

  it('is sent to a chat route streamed only when the call itself streams', () => {
    expect(new CallPlanner(context(true)).planFor(route)!.body).toMatchObject({ stream: true, stream_options: { include_usage: true } });
    const whole = new CallPlanner(context(false)).planFor(route)!.body;
    expect(whole).not.toHaveProperty('stream');
    expect(whole).not.toHaveProperty('stream_options');
  });

  it('completes with a Response object and its usage metered', async () => {
    const provider = await new FakeProvider().start();
    const dir = mkdtempSync(join(tmpdir(), 'responses-cold-'));
    const routes = join(dir, 'routes.json');
    const hot = [{ provider: 'anthropic', model: 'claude-3-5-haiku-latest', baseUrl: provider.url }];
    writeFileSync(routes, JSON.stringify({ hot, warm: [], cold: { mode: 'graceful_degrade', queue: 'ai-tasks', notify: [] } }));
    const csv = join(dir, 'e.csv');
    const env = { ROUTES_FILE: routes, ADMIN_TOKEN: 'cold-admin', METER_CSV_FILE: csv, SCOPES_FILE: join(dir, 'none.yaml') };
    const h = await listenStack(env, { http: true, worker: true });
    try {
      provider.always({ kind: 'ok', content: 'late but here', usage: { prompt_tokens: 7, completion_tokens: 3 } });
      // A time-to-answer too short for any route: queued without a call.
      const queued = await fetch(`${h.url}/v1/responses`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-time-to-answer-ms': '10' },
        body: JSON.stringify({ model: 'gpt-4o-mini', input: 'hi', stream: true }),
      });
      expect(queued.status).toBe(202);
      // Streamed, the 202 is one Responses error event carrying the job: a client reading events by
      // their type sees it (code queued), and an openai SDK raises it.
      const [name, data] = (await queued.text()).split('\n');
      expect(name).toBe('event: error');
      const event = JSON.parse(data.replace(/^data: /, '')) as { jobId: string; error: { code: string } };
      expect(event).toMatchObject({ type: 'error', code: 'queued', sequence_number: 0, status: 'queued', error: { code: 'queued' } });
      const { jobId } = event;
      // The same request through the openai client: the same job, raised as an error it can read.
      const client = new OpenAI({ baseURL: `${h.url}/v1`, apiKey: 'unused', maxRetries: 0 });
      const stream = await client.responses.create(
        { model: 'gpt-4o-mini', input: 'hi', stream: true },
        { headers: { 'x-time-to-answer-ms': '10' } },
      );
      const raised = await (async () => {
        for await (const e of stream) void e;
      })().catch((e: unknown) => e);
      expect(raised).toBeInstanceOf(OpenAI.APIError);
      expect((raised as InstanceType<typeof OpenAI.APIError>).code).toBe('queued');
      expect((raised as Error).message).toContain(jobId);
      const job = async () => (await (await fetch(`${h.url}/v1/jobs/${jobId}`)).json()) as { state: string; result: { body: unknown } };
      await expect.poll(async () => (await job()).state, { timeout: 5000 }).toBe('completed'); // the worker runs it on its own
      expect((await job()).result.body).toMatchObject({
        object: 'response',
        status: 'completed',
        usage: { input_tokens: 7, output_tokens: 3 },
      });
      expect(provider.received.at(-1)!.body).not.toHaveProperty('stream');
      await h.stack.meter.flush();
      expect(readFileSync(csv, 'utf8')).toMatch(/,7,3,/);
    } finally {
      await h.stop();
      await provider.stop();
    }
  });
});

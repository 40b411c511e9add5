// The meter's token counts come from the provider's usage object, read without parsing the whole
// answer (adapter.ts): a wrong read would bill the wrong figures, so the awkward cases are here.
import { describe, expect, it } from 'vitest';
import { openAiCompatible } from '../../gateway/src/providers/openai-compatible';

const usageOf = (body: unknown) => openAiCompatible.usage(Buffer.from(typeof body === 'string' ? body : JSON.stringify(body)), 'chat');

describe('usage of a whole answer', () => {
  it('reads prompt and completion tokens, and a cost when the provider gives one', () => {
    const answer = {
      id: 'x',
      choices: [{ message: { role: 'assistant', content: 'hi' } }],
      usage: { prompt_tokens: 12, completion_tokens: 3, total_tokens: 15, prompt_tokens_details: { cached_tokens: 0 }, cost: 0.0002 },
    };
    expect(usageOf(answer)).toEqual({ input_tokens: 12, output_tokens: 3, cost_usd: 0.0002 });
  });

  it('reads the cached part of the input, chat and Responses alike', () => {
    const chat = { choices: [], usage: { prompt_tokens: 100, completion_tokens: 2, prompt_tokens_details: { cached_tokens: 64 } } };
    expect(usageOf(chat)).toEqual({ input_tokens: 100, output_tokens: 2, cached_input_tokens: 64 });
    const responses = {
      object: 'response',
      output: [],
      usage: { input_tokens: 100, output_tokens: 2, input_tokens_details: { cached_tokens: 32 } },
    };
    expect(usageOf(responses)).toEqual({ input_tokens: 100, output_tokens: 2, cached_input_tokens: 32 });
  });

  it('is not fooled by answer text that talks about usage', () => {
    const content = 'Here is JSON: {"usage": {"prompt_tokens": 999, "completion_tokens": 999}} and "usage" again';
    const answer = { choices: [{ message: { role: 'assistant', content } }], usage: { prompt_tokens: 7, completion_tokens: 40 } };
    expect(usageOf(answer)).toEqual({ input_tokens: 7, output_tokens: 40 });
    // usage before the choices (another provider's key order) and pretty-printed
    const reordered = JSON.stringify({ usage: { input_tokens: 5, output_tokens: 6 }, choices: [{ message: { content } }] }, null, 2);
    expect(usageOf(reordered)).toEqual({ input_tokens: 5, output_tokens: 6 });
  });

  it("reads the service tier the answer says served it, chat's after its usage, a response's before", () => {
    const content = 'a tier: "service_tier": "flex"';
    const chat = { choices: [{ message: { content } }], usage: { prompt_tokens: 7, completion_tokens: 4 }, service_tier: 'priority' };
    expect(usageOf(chat)).toEqual({ input_tokens: 7, output_tokens: 4, service_tier: 'priority' });
    expect(usageOf(JSON.stringify(chat, null, 2))).toEqual({ input_tokens: 7, output_tokens: 4, service_tier: 'priority' });
    expect(usageOf({ ...chat, service_tier: undefined })).toEqual({ input_tokens: 7, output_tokens: 4 });
    const response = { object: 'response', output: [], service_tier: 'flex', usage: { input_tokens: 9, output_tokens: 2 } };
    const body = Buffer.from(JSON.stringify(response));
    expect(openAiCompatible.usage(body, 'responses')).toEqual({ input_tokens: 9, output_tokens: 2, service_tier: 'flex' });
  });

  it('gives no usage (never zeros) when there is none or the body is not JSON', () => {
    expect(usageOf({ choices: [] })).toBeNull();
    expect(usageOf({ choices: [], usage: null })).toBeNull();
    expect(usageOf('upstream exploded')).toBeNull();
    expect(usageOf('{"usage": {"prompt_tokens": 3')).toBeNull();
  });

  it('reads a lone total_tokens as the input of embeddings only: for chat it mixes input and output', () => {
    const body = Buffer.from(JSON.stringify({ data: [], usage: { total_tokens: 9 } }));
    expect(openAiCompatible.usage(body, 'embeddings')).toEqual({ input_tokens: 9, output_tokens: 0 });
    expect(openAiCompatible.usage(body, 'chat')).toBeNull();
  });
});

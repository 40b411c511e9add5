// Objects stored on the operator's provider account (prompts, files, vector stores, containers) are
// no tenant's: the gateway creates none for them, and every request reaches the provider with the
// operator's one key. With client keys a request naming one is refused, nothing called or queued.
// Real Redis, a gateway stack, a loopback provider that speaks chat and the Responses API natively.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { keysWorld, type KeysWorld } from './keys-harness';

let w: KeysWorld;
beforeEach(async () => {
  w = await keysWorld('stored-objects');
});
afterEach(() => w.end());

/** A request to `path` with `key` and a 3 s time-to-answer (a request no route answers is queued in time). */
const post = (url: string, key: string, path: string, body: object) =>
  fetch(`${url}/v1/${path}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-time-to-answer-ms': '3000' },
    body: JSON.stringify({ model: 'gpt-4o-mini', ...body }),
  });

const user = (content: object[]) => ({ role: 'user', content });

/** Each way a request names a stored object: endpoint, body, the code and `param` of its refusal. */
const NAMED: Array<{ path: string; body: object; code: string; param: string }> = [
  { path: 'responses', body: { prompt: { id: 'pmpt_operator', version: '2' } }, code: 'prompt_not_found', param: 'prompt.id' },
  {
    path: 'responses',
    body: {
      input: [
        user([
          { type: 'input_text', text: 'read it' },
          { type: 'input_file', file_id: 'file-operator' },
        ]),
      ],
    },
    code: 'file_not_found',
    param: 'input[0].content[1].file_id',
  },
  {
    path: 'responses',
    body: { input: [user([{ type: 'input_image', file_id: 'file-operator', detail: 'auto' }])] },
    code: 'file_not_found',
    param: 'input[0].content[0].file_id',
  },
  {
    path: 'responses',
    body: { input: 'search', tools: [{ type: 'file_search', vector_store_ids: ['vs_operator'] }] },
    code: 'vector_store_not_found',
    param: 'tools[0].vector_store_ids[0]',
  },
  {
    path: 'responses',
    body: { input: 'run it', tools: [{ type: 'code_interpreter', container: 'cntr_operator' }] },
    code: 'container_not_found',
    param: 'tools[0].container',
  },
  {
    path: 'responses',
    body: { input: 'run it', tools: [{ type: 'code_interpreter', container: { type: 'auto', file_ids: ['file-operator'] } }] },
    code: 'file_not_found',
    param: 'tools[0].container.file_ids[0]',
  },
  {
    path: 'chat/completions',
    body: {
      messages: [
        user([
          { type: 'text', text: 'read it' },
          { type: 'file', file: { file_id: 'file-operator' } },
        ]),
      ],
    },
    code: 'file_not_found',
    param: 'messages[0].content[1].file.file_id',
  },
];

describe('stored objects on the provider account (GATEWAY_AUTH=keys)', () => {
  it('a prompt, file, vector store or container named by id is refused with 400 naming the field, and the provider is not called', async () => {
    const { url } = await w.up();
    const acme = (await w.makeKey('acme')).key;
    for (const { path, body, code, param } of NAMED) {
      const res = await post(url, acme, path, body);
      // Read whole: an answer that is not a refusal shows as itself (its status, no code).
      const error = ((await res.json()) as { error?: { code: string; param: string; message: string; type: string } }).error;
      expect({ status: res.status, code: error?.code, param: error?.param, type: error?.type }).toEqual({
        status: 400,
        code,
        param,
        type: 'invalid_request_error',
      });
      expect(error!.message).toMatch(/^(Prompt|File|Vector store|Container) with id '\w+[-_]operator' not found: this gateway keeps no /);
    }
    expect(w.hot.received).toEqual([]);
    // What names nothing stored is served: a new container, a file sent inline, a cited file.
    const fine = [
      { input: 'run it', tools: [{ type: 'code_interpreter', container: { type: 'auto' } }] },
      { input: [user([{ type: 'input_file', filename: 'a.txt', file_data: 'data:text/plain;base64,aGk=' }])] },
      {
        input: [
          {
            role: 'assistant',
            content: [{ type: 'output_text', text: 'see', annotations: [{ type: 'file_citation', file_id: 'file-x', index: 0 }] }],
          },
        ],
      },
    ];
    for (const body of fine) expect((await post(url, acme, 'responses', body)).status).toBe(200);
    expect(w.hot.received).toHaveLength(fine.length);
  });

  it('a request that would be queued (no route answers) is refused all the same, not queued', async () => {
    w.hot.always({ kind: 'status', status: 503 });
    w.warm.always({ kind: 'status', status: 503 });
    const { url } = await w.up();
    const acme = (await w.makeKey('acme')).key;
    const plain = await post(url, acme, 'chat/completions', { messages: [{ role: 'user', content: 'later is fine' }] });
    expect(plain.status).toBe(202);
    const named = await post(url, acme, 'chat/completions', { messages: [user([{ type: 'file', file: { file_id: 'file-operator' } }])] });
    expect(named.status).toBe(400);
  });

  it('without keys nothing proves a tenant: nothing is checked', async () => {
    const { url } = await w.up({ GATEWAY_AUTH: 'open' });
    const res = await post(url, 'unused', 'responses', {
      input: 'search',
      tools: [{ type: 'file_search', vector_store_ids: ['vs_operator'] }],
    });
    expect(res.status).toBe(200);
    expect(w.hot.received.at(-1)!.body.tools).toEqual([{ type: 'file_search', vector_store_ids: ['vs_operator'] }]);
  });
});

// Objects stored on the operator's provider account (prompts, files, vector stores, containers) are
// no tenant's: the gateway creates none for them, and every request reaches the provider with the
// operator's one key. With client keys a request naming one is refused, nothing called or queued.
// Real Redis, a gateway stack, a loopback provider that speaks chat and the Responses API natively.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ADMIN } from './harness';
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
  it('an id quoted in the refusal is cut to 100 characters between characters, never inside an emoji', async () => {
    const { url } = await w.up();
    const acme = (await w.makeKey('acme')).key;
    const res = await post(url, acme, 'responses', { prompt: { id: `p${'😀'.repeat(80)}` } }); // the 100th character: half an emoji
    const error = ((await res.json()) as { error: { message: string } }).error;
    expect(error.message.startsWith(`Prompt with id 'p${'😀'.repeat(49)}' not found`)).toBe(true);
    expect(w.hot.received).toEqual([]);
  });
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

  it("the shell tool's environment names a container, files and skills of the provider account: refused the same", async () => {
    const { url } = await w.up();
    const acme = (await w.makeKey('acme')).key;
    const shell = (environment: object) => ({ input: 'run it', tools: [{ type: 'shell', environment }] });
    const named = [
      {
        env: { type: 'container_reference', container_id: 'cntr_operator' },
        code: 'container_not_found',
        param: 'tools[0].environment.container_id',
      },
      { env: { type: 'container_auto', file_ids: ['file-operator'] }, code: 'file_not_found', param: 'tools[0].environment.file_ids[0]' },
      {
        env: { type: 'container_auto', skills: [{ type: 'skill_reference', skill_id: 'skill_operator' }] },
        code: 'skill_not_found',
        param: 'tools[0].environment.skills[0].skill_id',
      },
    ];
    for (const { env, code, param } of named) {
      const res = await post(url, acme, 'responses', shell(env));
      const error = ((await res.json()) as { error?: { code: string; param: string; message: string } }).error;
      expect({ status: res.status, code: error?.code, param: error?.param }).toEqual({ status: 400, code, param });
      expect(error!.message).toMatch(/^(Container|File|Skill) with id '\w+[-_]operator' not found: this gateway keeps no /);
    }
    expect(w.hot.received).toEqual([]);
    // A new container with a skill sent inline, and the caller's own machine, name nothing stored.
    const inline = { type: 'inline', name: 'n', description: 'd', source: { type: 'base64', media_type: 'application/zip', data: 'UEs=' } };
    for (const env of [{ type: 'container_auto', skills: [inline] }, { type: 'local' }])
      expect((await post(url, acme, 'responses', shell(env))).status).toBe(200);
    expect(w.hot.received).toHaveLength(2);
  });

  it('tools given in input items (additional_tools, tool_search_output) are read as those in `tools`: refused the same', async () => {
    const { url } = await w.up();
    const acme = (await w.makeKey('acme')).key;
    const named = [
      {
        item: { type: 'additional_tools', role: 'developer', tools: [{ type: 'file_search', vector_store_ids: ['vs_operator'] }] },
        code: 'vector_store_not_found',
        param: 'input[1].tools[0].vector_store_ids[0]',
      },
      {
        item: {
          type: 'tool_search_output',
          call_id: 'ts_1',
          tools: [
            { type: 'function', name: 'f' },
            { type: 'code_interpreter', container: 'cntr_operator' },
          ],
        },
        code: 'container_not_found',
        param: 'input[1].tools[1].container',
      },
    ];
    for (const { item, code, param } of named) {
      const res = await post(url, acme, 'responses', { input: [user([{ type: 'input_text', text: 'search' }]), item] });
      const error = ((await res.json()) as { error?: { code: string; param: string } }).error;
      expect({ status: res.status, code: error?.code, param: error?.param }).toEqual({ status: 400, code, param });
    }
    expect(w.hot.received).toEqual([]);
    const own = { type: 'additional_tools', role: 'developer', tools: [{ type: 'file_search', vector_store_ids: [] }] };
    expect((await post(url, acme, 'responses', { input: [own] })).status).toBe(200);
  });

  it('a chat message naming a previous audio response by id (the provider reads it from its store) is refused; its transcript is served', async () => {
    const { url } = await w.up();
    const acme = (await w.makeKey('acme')).key;
    const turns = (assistant: object) => ({
      messages: [
        { role: 'user', content: 'say it' },
        { role: 'assistant', ...assistant },
        { role: 'user', content: 'and again' },
      ],
    });
    const res = await post(url, acme, 'chat/completions', turns({ audio: { id: 'audio_operator' } }));
    const error = ((await res.json()) as { error?: { code: string; param: string; message: string } }).error;
    expect({ status: res.status, code: error?.code, param: error?.param }).toEqual({
      status: 400,
      code: 'audio_not_found',
      param: 'messages[1].audio.id',
    });
    expect(error!.message).toMatch(/^Audio response with id 'audio_operator' not found: /);
    expect(w.hot.received).toEqual([]);
    expect((await post(url, acme, 'chat/completions', turns({ content: 'what it said' }))).status).toBe(200);
  });

  it("a chat answer spoken in a custom voice given by id (the provider account's, made from a voice actor's consent) is refused; a built-in voice is served", async () => {
    const { url } = await w.up();
    const acme = (await w.makeKey('acme')).key;
    const spoken = (voice: unknown) => ({
      modalities: ['text', 'audio'],
      audio: { voice, format: 'wav' },
      messages: [{ role: 'user', content: 'say it' }],
    });
    // before: 200, the provider asked to speak in the operator's voice_operator for any key
    const res = await post(url, acme, 'chat/completions', spoken({ id: 'voice_operator' }));
    const error = ((await res.json()) as { error?: { code: string; param: string; message: string } }).error;
    expect({ status: res.status, code: error?.code, param: error?.param }).toEqual({
      status: 400,
      code: 'voice_not_found',
      param: 'audio.voice.id',
    });
    expect(error!.message).toMatch(/^Voice with id 'voice_operator' not found: this gateway keeps no custom voices for its clients/);
    expect(w.hot.received).toEqual([]);
    expect((await post(url, acme, 'chat/completions', spoken('alloy'))).status).toBe(200);
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

  it("the routing map's shared_objects are the operator's word that any key may name them; others stay refused", async () => {
    /** This world's map with `shared_objects`; returns the file. */
    const mapWith = (shared: unknown) => {
      const file = join(w.dir, 'shared.json');
      const map = {
        hot: [{ provider: 'openai', model: 'gpt-4o-mini', baseUrl: w.hot.url }],
        warm: [],
        cold: { mode: 'graceful_degrade', queue: 'ai-tasks', notify: [] },
        shared_objects: shared,
      };
      writeFileSync(file, JSON.stringify(map));
      return file;
    };
    await expect(w.up({ ROUTES_FILE: mapWith(['vs_handbook', 'file one']) })).rejects.toThrow(
      /shared\.json: shared_objects\[1\]: expected the id of a stored prompt, file, vector store, container, skill or custom voice/,
    );
    const { url } = await w.up({ ROUTES_FILE: mapWith(['vs_handbook', 'pmpt_house_style']), ADMIN_TOKEN: ADMIN });
    const acme = (await w.makeKey('acme')).key;
    const search = (ids: string[]) => ({ input: 'search', tools: [{ type: 'file_search', vector_store_ids: ids }] });
    expect((await post(url, acme, 'responses', { ...search(['vs_handbook']), prompt: { id: 'pmpt_house_style' } })).status).toBe(200);
    expect(w.hot.received.at(-1)!.body).toMatchObject({
      prompt: { id: 'pmpt_house_style' },
      tools: [{ vector_store_ids: ['vs_handbook'] }],
    });
    const other = await post(url, acme, 'responses', search(['vs_handbook', 'vs_payroll']));
    expect(other.status).toBe(400);
    expect(await other.json()).toMatchObject({ error: { code: 'vector_store_not_found', param: 'tools[0].vector_store_ids[1]' } });
    expect(w.hot.received).toHaveLength(1);
    // Read at start, as `limits` is: a reload that changes it says a restart is needed.
    mapWith(['vs_handbook', 'pmpt_house_style', 'vs_payroll']);
    const reloaded = await fetch(`${url}/admin/routes/reload`, { method: 'POST', headers: { authorization: `Bearer ${ADMIN}` } });
    expect(await reloaded.json()).toMatchObject({ restart_needed: ['shared_objects'] });
    expect((await post(url, acme, 'responses', search(['vs_payroll']))).status).toBe(400);
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

// Billing data the gateway writes, under faults and hostile input: a process killed right after
// its answers, caller text that a spreadsheet would run as a formula, headers longer than the event
// record allows.
import { spawn } from '../children';
import { existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { calcPrice } from '@pydantic/genai-prices';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { convert } from '../../archive/convert';
import { costUsd } from '../../gateway/src/pricing';
import { lit, openDuck } from '../../archive/duck';
import { formatRows, reportSql } from '../../archive/reports';
import { FakeMeterWebApp } from './fake-meter';
import { FakeProvider, type Behaviour } from './fake-provider';
import { ADMIN, chat, mapOf, startGateway, type TestGateway, writeOneRouteMap } from './harness';

const root = join(import.meta.dirname, '..', '..');
let hot: FakeProvider;
let gw: TestGateway | undefined;
beforeEach(async () => {
  hot = await new FakeProvider().start();
});
afterEach(async () => {
  await gw?.close();
  gw = undefined;
  await hot.stop();
});

async function query<T>(sql: string): Promise<T[]> {
  const duck = await openDuck();
  try {
    return await duck.all<T>(sql);
  } finally {
    duck.close();
  }
}

describe('formula text from callers', () => {
  // (A leading tab cannot reach us in a header: HTTP trims it.)
  const hostile = ['=HYPERLINK("https://evil.example","click")', '+1+2', '-2+3', '@SUM(A1)', "'quoted"];

  it('is written neutralised to .data/events.csv, and the archive and its CSV report give the exact text back', async () => {
    gw = await startGateway(mapOf([hot.url]));
    for (const [i, customer] of hostile.entries()) {
      const res = await chat(gw.url, undefined, { 'x-customer-id': customer, 'x-job-id': `job-${i}` });
      expect(res.status).toBe(200);
    }
    await gw.meter.flush();
    // What a spreadsheet opening the file sees: no cell starts with a formula character.
    const cells = await query<{ customer_id: string }>(
      `SELECT customer_id FROM read_csv(${lit(gw.csv)}, header = true, all_varchar = true) ORDER BY job_id`,
    );
    expect(cells.map((c) => c.customer_id)).toEqual(hostile.map((h) => `'${h}`));

    const out = join(mkdtempSync(join(tmpdir(), 'formula-archive-')), 'arch');
    await convert(gw.csv, { out });
    const archived = await query<{ customer_id: string }>(
      `SELECT customer_id FROM read_parquet(${lit(join(out, '*.parquet'))}) ORDER BY job_id`,
    );
    expect(archived.map((r) => r.customer_id)).toEqual(hostile);

    const asOf = new Date().toISOString().slice(0, 10);
    const duck = await openDuck();
    try {
      const { columns, rows } = await duck.query(reportSql('customers', out, asOf));
      const report = formatRows(rows, columns, 'csv').split('\n').slice(1);
      expect(report.some((line) => line.startsWith(`"'=HYPERLINK(""https://evil.example"",""click"")"`))).toBe(true);
      expect(report.filter((line) => /^[=+\-@\t\r]/.test(line))).toEqual([]);
    } finally {
      duck.close();
    }
  });
});

describe('headers longer than the event record allows', () => {
  it('are refused 400 at admission, naming the header, before any provider is called; at the limit they pass', async () => {
    gw = await startGateway(mapOf([hot.url]));
    for (const name of ['x-customer-id', 'x-job-id', 'x-user-id']) {
      const res = await chat(gw.url, undefined, { [name]: 'c'.repeat(1001) });
      expect(res.status).toBe(400);
      expect(res.json().error.message).toBe(`${name}: expected at most 1000 characters (the meter event's limit), got 1001`);
    }
    const model = await chat(gw.url, { model: 'm'.repeat(1001), messages: [{ role: 'user', content: 'hi' }] });
    expect(model.status).toBe(400);
    expect(model.json().error.message).toMatch(/^model: /);
    expect(hot.received).toHaveLength(0);
    const atLimit = await chat(gw.url, undefined, { 'x-customer-id': 'c'.repeat(1000) });
    expect(atLimit.status).toBe(200);
    await gw.meter.flush();
    expect(gw.events().map((e) => e.customer_id.length)).toEqual([1000]);
  });
});

/** Waits for a condition another process makes true; fails after `ms`. */
async function until<T>(what: string, probe: () => T | Promise<T>, ms = 10_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const value = await probe();
    if (value) return value;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** The built gateway as a child process; `kill -9` it right after the answers of `n` requests (30 at a time). */
async function answersThenKill(env: Record<string, string>, n: number): Promise<string[]> {
  const dir = mkdtempSync(join(tmpdir(), 'kill9-'));
  const routes = join(dir, 'routes.json');
  writeOneRouteMap(routes, hot.url);
  const child = spawn(process.execPath, [join(root, 'gateway/dist/main.js')], {
    cwd: root,
    env: { PATH: process.env.PATH, PORT: '0', ROUTES_FILE: routes, WORKER: 'off', SCOPES_FILE: join(dir, 'none.yaml'), ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout.on('data', (d) => (out += d));
  const exited = new Promise((r) => child.on('exit', r));
  const port = await until('the gateway to listen', () => /listening on :(\d+)/.exec(out)?.[1]);
  const answered: string[] = [];
  let next = 0;
  const client = async () => {
    while (next < n) {
      const id = `job-${next++}`;
      const res = await chat(`http://127.0.0.1:${port}`, undefined, { 'x-job-id': id });
      if (res.status === 200) answered.push(id);
    }
  };
  await Promise.all(Array.from({ length: 30 }, client));
  child.kill('SIGKILL'); // as an OOM kill or a node eviction would, right after the last answer
  await exited;
  return answered;
}

describe('numbers that cannot be money', () => {
  it('a model without a known price: its event says UNPRICED with an empty cost (never $0), counted in /metrics and /health', async () => {
    const map = { ...mapOf([hot.url]), hot: [{ provider: 'openai', model: 'house-model-7', baseUrl: hot.url }] };
    gw = await startGateway(map);
    for (let i = 0; i < 2; i++) expect((await chat(gw.url)).status).toBe(200);
    await gw.meter.flush();
    expect(gw.events().map((e) => [e.model, e.cost_usd, e.error_code])).toEqual([
      ['house-model-7', '', 'UNPRICED'],
      ['house-model-7', '', 'UNPRICED'],
    ]);
    const auth = { authorization: `Bearer ${ADMIN}` };
    const metrics = await (await fetch(`${gw.url}/metrics`, { headers: auth })).text();
    expect(metrics).toContain('gateway_unpriced_calls_total{route="hot-1"} 2');
    const health = (await (await fetch(`${gw.url}/health`, { headers: auth })).json()) as Record<string, unknown>;
    expect(health.unpriced_calls).toEqual({ total: 2, by_route: { 'hot-1': 2 } });
  });

  it('an answer without usage, whole or streamed: UNPRICED with an empty cost (never a silent $0); a failed call stays $0', async () => {
    gw = await startGateway(mapOf([hot.url]));
    hot.next({ kind: 'ok', usage: null }, { kind: 'stream', chunks: 3, noUsage: true }, { kind: 'status', status: 400 });
    expect((await chat(gw.url)).status).toBe(200);
    const streamed = await chat(gw.url, { model: 'x', messages: [{ role: 'user', content: 'hi' }], stream: true });
    expect(streamed.text).toContain('part2');
    expect((await chat(gw.url)).status).toBe(400);
    await gw.meter.flush();
    expect(gw.events().map((e) => [e.input_tokens, e.output_tokens, e.cost_usd, e.error_code])).toEqual([
      ['0', '0', '', 'UNPRICED'],
      ['0', '0', '', 'UNPRICED'],
      ['0', '0', '0', '400'],
    ]);
    expect(gw.logs.filter((l) => l.includes('without reporting its usage'))).toHaveLength(1); // once per route
  });

  it('provider usage that cannot be a count or a cost: the event carries counts and a cost the meter takes', async () => {
    gw = await startGateway(mapOf([hot.url]));
    hot.always({ kind: 'ok', usage: { prompt_tokens: -12, completion_tokens: 2.5, cost: -3 } as any });
    expect((await chat(gw.url)).status).toBe(200);
    await gw.meter.flush();
    const [e] = gw.events();
    expect([e.input_tokens, e.output_tokens]).toEqual(['0', '3']);
    const listed = calcPrice({ input_tokens: 0, output_tokens: 3 }, 'gpt-4o-mini', { providerId: 'openai' })!;
    expect(listed.total_price).toBeGreaterThan(0);
    expect(Number(e.cost_usd)).toBe(listed.total_price); // priced from the list, not the reported -3
  });

  it('cached input tokens are priced at the cached rate; input_tokens stays the whole input', async () => {
    gw = await startGateway(mapOf([hot.url]));
    const chatUsage = {
      prompt_tokens: 10_000,
      completion_tokens: 10,
      total_tokens: 10_010,
      prompt_tokens_details: { cached_tokens: 9_000 },
    };
    hot.next({ kind: 'ok', usage: chatUsage as any });
    expect((await chat(gw.url)).status).toBe(200);
    await gw.meter.flush();
    const [e] = gw.events();
    const cached = calcPrice({ input_tokens: 10_000, cache_read_tokens: 9_000, output_tokens: 10 }, 'gpt-4o-mini', {
      providerId: 'openai',
    })!;
    const full = calcPrice({ input_tokens: 10_000, output_tokens: 10 }, 'gpt-4o-mini', { providerId: 'openai' })!;
    expect(cached.total_price).toBeLessThan(full.total_price);
    expect([e.input_tokens, e.output_tokens, Number(e.cost_usd)]).toEqual(['10000', '10', cached.total_price]);
  });

  it("input tokens written to the prompt cache are priced at the model's cache-write price (Anthropic's is above its input price)", async () => {
    const map = { ...mapOf([hot.url]), hot: [{ provider: 'anthropic', model: 'claude-3-5-haiku-latest', baseUrl: hot.url }] };
    gw = await startGateway(map);
    const chatUsage = {
      prompt_tokens: 100_000,
      completion_tokens: 10,
      prompt_tokens_details: { cached_tokens: 0, cache_write_tokens: 90_000 },
    };
    hot.next(
      { kind: 'ok', usage: chatUsage as any },
      { kind: 'ok', usage: { ...chatUsage, prompt_tokens_details: { cached_tokens: 30_000, cache_write_tokens: 90_000 } } as any },
    );
    for (let i = 0; i < 2; i++) expect((await chat(gw.url)).status).toBe(200);
    await gw.meter.flush();
    const [e, both] = gw.events();
    const priced = (u: Record<string, number>) =>
      calcPrice({ input_tokens: 100_000, output_tokens: 10, ...u }, 'claude-3-5-haiku-latest', { providerId: 'anthropic' })!.total_price;
    expect(priced({ cache_write_tokens: 90_000 })).toBeGreaterThan(priced({}));
    expect([e.input_tokens, Number(e.cost_usd), e.error_code]).toEqual([
      '100000',
      Number(priced({ cache_write_tokens: 90_000 }).toFixed(9)),
      '',
    ]);
    // Read and written together never more than the input: what is left of it after the reads was written.
    const left = { cache_read_tokens: 30_000, cache_write_tokens: 70_000 };
    expect([Number(both.cost_usd), both.error_code]).toEqual([Number(priced(left).toFixed(9)), '']);
  });

  it("audio tokens of a chat answer are priced at the model's audio rates, not its text rates; input_tokens stays the whole input", async () => {
    const map = { ...mapOf([hot.url]), hot: [{ provider: 'openai', model: 'gpt-audio', baseUrl: hot.url }] };
    gw = await startGateway(map);
    const chatUsage = {
      prompt_tokens: 1_000,
      completion_tokens: 2_000,
      total_tokens: 3_000,
      prompt_tokens_details: { cached_tokens: 0, audio_tokens: 800 },
      completion_tokens_details: { reasoning_tokens: 0, audio_tokens: 1_900 },
    };
    hot.next(
      { kind: 'ok', usage: chatUsage as any },
      { kind: 'ok', usage: { ...chatUsage, prompt_tokens_details: { audio_tokens: 5e9 } } as any },
      { kind: 'ok', usage: { ...chatUsage, prompt_tokens_details: { cached_tokens: 900, audio_tokens: 900 } } as any },
    );
    for (let i = 0; i < 3; i++) expect((await chat(gw.url)).status).toBe(200);
    await gw.meter.flush();
    const [e, hostile, cached] = gw.events();
    const priced = (u: Record<string, number>) =>
      calcPrice({ input_tokens: 1_000, output_tokens: 2_000, ...u }, 'gpt-audio', { providerId: 'openai' })!.total_price;
    expect(priced({ input_audio_tokens: 800, output_audio_tokens: 1_900 })).toBeGreaterThan(5 * priced({}));
    expect([e.input_tokens, e.output_tokens, Number(e.cost_usd)]).toEqual([
      '1000',
      '2000',
      Number(priced({ input_audio_tokens: 800, output_audio_tokens: 1_900 }).toFixed(9)),
    ]);
    // Never more audio than the input it is part of (as cached input): a count past it is all of it.
    expect([Number(hostile.cost_usd), hostile.error_code]).toEqual([
      Number(priced({ input_audio_tokens: 1_000, output_audio_tokens: 1_900 }).toFixed(9)),
      '',
    ]);
    // Cached input and audio input: at least 800 of the cached tokens were audio, priced so.
    const both = { cache_read_tokens: 900, input_audio_tokens: 900, cache_audio_read_tokens: 800, output_audio_tokens: 1_900 };
    expect([Number(cached.cost_usd), cached.error_code]).toEqual([Number(priced(both).toFixed(9)), '']);
  });

  it("a call served at a service tier is priced at that tier's rates, as the answer names it; a tier without a known price is UNPRICED", async () => {
    const map = { ...mapOf([hot.url]), hot: [{ provider: 'openai', model: 'o4-mini', baseUrl: hot.url }] };
    gw = await startGateway(map);
    const ask = (tier: string | undefined, more: object = {}) => ({
      model: 'x',
      messages: [{ role: 'user', content: 'hi' }],
      ...(tier ? { service_tier: tier } : {}),
      ...more,
    });
    const respond = (tier: string, stream = false) =>
      fetch(`${gw!.url}/v1/responses`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'x', input: 'hi', service_tier: tier, stream }),
      }).then((r) => r.text());
    const ok = { kind: 'ok' } as const;
    const stream = { kind: 'stream' } as const;
    hot.next(ok, ok, ok, ok, stream, stream, ok, ok, ok);
    for (const tier of [undefined, 'default', 'priority', 'flex']) expect((await chat(gw.url, ask(tier))).status).toBe(200);
    await chat(gw.url, ask('priority', { stream: true }));
    await chat(gw.url, ask('flex', { stream: true, stream_options: { include_usage: true } }));
    await respond('priority');
    await respond('flex', true);
    await chat(gw.url, ask('turbo'));
    await gw.meter.flush();
    // OpenAI's rates for o4-mini per million tokens (input, output): standard 1.10/4.40,
    // priority 2.00/8.00, flex 0.55/2.20; whole chat 12+5 tokens, streamed 20+3, Responses 30+6.
    const usd = (inRate: number, outRate: number, i: number, o: number) => Number(((i * inRate + o * outRate) / 1e6).toFixed(9));
    expect(gw.events().map((e) => [e.input_tokens, e.output_tokens, Number(e.cost_usd), e.error_code])).toEqual([
      ['12', '5', usd(1.1, 4.4, 12, 5), ''],
      ['12', '5', usd(1.1, 4.4, 12, 5), ''],
      ['12', '5', usd(2, 8, 12, 5), ''],
      ['12', '5', usd(0.55, 2.2, 12, 5), ''],
      ['20', '3', usd(2, 8, 20, 3), ''],
      ['20', '3', usd(0.55, 2.2, 20, 3), ''],
      ['30', '6', usd(2, 8, 30, 6), ''],
      ['30', '6', usd(0.55, 2.2, 30, 6), ''],
      ['12', '5', 0, 'UNPRICED'],
    ]);
    expect(gw.events().at(-1)!.cost_usd).toBe('');
    expect(gw.logs.filter((l) => l.includes('turbo'))).toHaveLength(1);
  });

  it('a response that searched the web or files is priced for each search too, whole or streamed; a search without a known price is UNPRICED', async () => {
    const map = { ...mapOf([hot.url]), hot: [{ provider: 'openai', model: 'gpt-4o-mini', baseUrl: hot.url }] };
    gw = await startGateway(map);
    const search = (n: number) => ({ type: 'web_search_call', id: `ws_${n}`, status: 'completed', action: { type: 'search', query: 'q' } });
    const files = { type: 'file_search_call', id: 'fs_1', status: 'completed', queries: ['q'], results: null };
    const message = {
      type: 'message',
      id: 'msg_1',
      role: 'assistant',
      status: 'completed',
      content: [{ type: 'output_text', text: 'found', annotations: [] }],
    };
    const response = (model: string) => ({
      id: 'resp_1',
      object: 'response',
      status: 'completed',
      model,
      output: [search(1), search(2), files, message],
      tools: [{ type: 'web_search' }, { type: 'file_search', vector_store_ids: ['vs_1'] }],
      usage: { input_tokens: 1_000, output_tokens: 100, total_tokens: 1_100 },
    });
    const json = (body: object): Behaviour => ({
      kind: 'raw-stream',
      type: 'application/json',
      pieces: [Buffer.from(JSON.stringify(body))],
    });
    const events = (body: object): Behaviour => ({
      kind: 'raw-stream',
      pieces: [
        Buffer.from(
          `event: response.created\ndata: ${JSON.stringify({ type: 'response.created', sequence_number: 0, response: { ...body, status: 'in_progress', output: [], usage: null } })}\n\n`,
        ),
        Buffer.from(
          `event: response.completed\ndata: ${JSON.stringify({ type: 'response.completed', sequence_number: 1, response: body })}\n\n`,
        ),
      ],
    });
    hot.next(json(response('gpt-4o-mini')), events(response('gpt-4o-mini')));
    const ask = (stream: boolean) =>
      fetch(`${gw!.url}/v1/responses`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'x', input: 'find it', tools: [{ type: 'web_search' }], stream }),
      }).then(async (r) => [r.status, await r.text()] as const);
    expect((await ask(false))[0]).toBe(200);
    expect((await ask(true))[0]).toBe(200);
    await gw.meter.flush();
    // gpt-4o-mini: $0.15 and $0.60 per million tokens, $10 per thousand web searches, $2.50 per thousand file searches.
    const usd = Number(((1_000 * 0.15 + 100 * 0.6) / 1e6 + 2 * 0.01 + 0.0025).toFixed(9));
    expect(gw.events().map((e) => [e.input_tokens, e.output_tokens, Number(e.cost_usd), e.error_code])).toEqual([
      ['1000', '100', usd, ''],
      ['1000', '100', usd, ''],
    ]);
    // A model the price list gives no search price: OpenAI's own is the same for every model; another
    // provider's is not known, so neither is the call's cost.
    const tokens = { input_tokens: 1_000, output_tokens: 100 };
    const nano = costUsd('openai', 'gpt-4.1-nano', tokens, () => {})!;
    expect(costUsd('openai', 'gpt-4.1-nano', { ...tokens, web_searches: 1 }, () => {})).toBe(Number((nano + 0.01).toFixed(9)));
    const warned: string[] = [];
    expect(costUsd('mistral', 'mistral-small-latest', { ...tokens, web_searches: 1 }, (m) => warned.push(m))).toBeNull();
    expect(costUsd('mistral', 'mistral-small-latest', tokens, () => {})).toBeGreaterThan(0);
    expect(warned).toHaveLength(1);
  });

  it("usage past the record's limits: no count the meter would refuse, and a cost past its limit is UNPRICED, the event kept", async () => {
    gw = await startGateway(mapOf([hot.url]));
    hot.always({ kind: 'ok', usage: { prompt_tokens: 1e21, completion_tokens: 9e15, cost: 5e9 } as any });
    expect((await chat(gw.url)).status).toBe(200);
    await gw.meter.flush();
    const [e] = gw.events();
    expect([e.input_tokens, e.output_tokens, e.cost_usd, e.error_code]).toEqual(['0', '9000000000000000', '', 'UNPRICED']);
  });
});

describe('prices that change with the time of day or from a date', () => {
  afterEach(() => vi.useRealTimers());

  it('a usage priced again later is priced at the rates of its own time, not those of the first call with the same figures', () => {
    vi.useFakeTimers({ toFake: ['Date'] });
    const usage = { input_tokens: 40_000, output_tokens: 2_000 };
    const at = (iso: string) => {
      vi.setSystemTime(new Date(iso));
      return costUsd('deepseek', 'deepseek-chat', usage, () => {});
    };
    const listed = (iso: string) =>
      Number(calcPrice(usage, 'deepseek-chat', { providerId: 'deepseek', timestamp: new Date(iso) })!.total_price.toFixed(9));
    // DeepSeek's discount hours (16:30 to 00:30 UTC), then its standard hours: the same call costs more.
    expect(listed('2026-11-29T20:00:00Z')).toBeLessThan(listed('2026-11-29T10:00:00Z'));
    expect(at('2026-11-29T20:00:00Z')).toBe(listed('2026-11-29T20:00:00Z'));
    expect(at('2026-11-30T10:00:00Z')).toBe(listed('2026-11-30T10:00:00Z'));
  });
});

describe('an answer is released after its event is on disk', () => {
  it('whole and streamed: when the client has the answer, the CSV has the call (no flush)', async () => {
    gw = await startGateway(mapOf([hot.url]));
    const whole = await chat(gw.url, undefined, { 'x-job-id': 'whole' });
    expect(whole.status).toBe(200);
    expect(readFileSync(gw.csv, 'utf8')).toContain(',whole,');
    hot.always({ kind: 'stream', chunks: 5 });
    const streamed = await chat(
      gw.url,
      { model: 'm', messages: [{ role: 'user', content: 'hi' }], stream: true },
      { 'x-job-id': 'streamed' },
    );
    expect(streamed.text).toContain('data: [DONE]');
    expect(readFileSync(gw.csv, 'utf8')).toMatch(/,streamed,[^\n]*,$/m); // its line, error_code empty: a complete call
  });
});

describe('a gateway killed right after answering (kill -9)', () => {
  it('web-app sink: every answered call has its event in the spool', async () => {
    const meter = await new FakeMeterWebApp().start();
    meter.mode = 'busy'; // the meter cannot take events now: they wait in the spool
    const spoolDir = mkdtempSync(join(tmpdir(), 'kill9-spool-'));
    try {
      const answered = await answersThenKill({ METER_URL: meter.url, METER_TOKEN: 'tok', METER_SPOOL_DIR: spoolDir }, 300);
      expect(answered).toHaveLength(300);
      const spooled = existsSync(join(spoolDir, 'spool.jsonl'))
        ? readFileSync(join(spoolDir, 'spool.jsonl'), 'utf8')
            .trim()
            .split('\n')
            .map((l) => JSON.parse(l).job_id as string)
        : [];
      expect(answered.filter((id) => !spooled.includes(id))).toEqual([]); // none lost
    } finally {
      await meter.stop();
    }
  });

  it('local CSV sink: every answered call has its line in the CSV', async () => {
    const csv = join(mkdtempSync(join(tmpdir(), 'kill9-csv-')), 'events.csv');
    const answered = await answersThenKill({ METER_CSV_FILE: csv }, 300);
    expect(answered).toHaveLength(300);
    const lines = existsSync(csv) ? readFileSync(csv, 'utf8') : '';
    expect(answered.filter((id) => !lines.includes(`,${id},`))).toEqual([]); // none lost
  });
});

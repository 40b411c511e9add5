// Start-up configuration: the routing maps, scopes, and `npm start` with nothing configured.
import { spawn } from '../children';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { createServer } from 'node:net';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { readEnv } from '../../gateway/src/env';
import { keyResolver } from '../../gateway/src/keys';
import { describeStart } from '../../gateway/src/startup-log';
import type { Stores } from '../../gateway/src/stores';
import { diffJson } from '../../gateway/src/routes-diff';
import { mapEnvironmentProblems } from '../../gateway/src/map-environment';
import { loadRoutesMap, parseRoutesMap } from '../../gateway/src/routes-map';
import { loadScopes } from '../../gateway/src/scopes';
import { createStack } from '../../gateway/src/stack';
import { captureLogger } from './harness';
import { until } from './keys-harness';
import { TEST_REDIS_URL } from '../redis-db';
import { redisUnderPrefix } from '../redis-prefix';

const root = join(import.meta.dirname, '..', '..');

/** `npm start`'s gateway with only `env` (and a free port): its exit code and what it wrote to stderr. */
function started(env: NodeJS.ProcessEnv): Promise<[unknown, string]> {
  const child = spawn(process.execPath, [join(root, 'gateway/dist/main.js')], {
    cwd: root,
    env: { PATH: process.env.PATH, PORT: '0', ...env },
  });
  let err = '';
  child.stderr.on('data', (d) => (err += d));
  return new Promise((r) => child.on('exit', (code) => r([code, err])));
}
/** What a built entry point (gateway/dist/<entry>) with only `env` wrote to stdout until it said `line`, once stopped and gone. */
async function outputUntil(entry: string, env: NodeJS.ProcessEnv, line: string): Promise<string> {
  const child = spawn(process.execPath, [join(root, 'gateway/dist', entry)], {
    cwd: root,
    env: { PATH: process.env.PATH, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout.on('data', (d) => (out += d));
  const exited = new Promise((r) => child.on('exit', r));
  await until(async () => out.includes(line));
  child.kill('SIGTERM');
  await exited;
  return out;
}
const env = {
  HOT_BASE_URL: 'http://h1/v1',
  HOT_BASE_URL_2: 'http://h2/v1',
  WARM_A_BASE_URL: 'http://a/v1',
  WARM_B_BASE_URL: 'http://b/v1',
};

describe('routing maps', () => {
  it('routes.local.json and routes.prod.json are valid: two Hot routes on one provider, Warm on two others, embeddings on the Hot two', () => {
    for (const file of ['routes.local.json', 'routes.prod.json']) {
      const map = loadRoutesMap(join(root, file), env);
      const chat = map.hot.filter((r) => !r.apis?.includes('embeddings'));
      expect(chat).toHaveLength(2);
      expect(new Set(map.hot.map((r) => r.provider)).size).toBe(1);
      expect(map.hot[0].baseUrl).toBe('http://h1/v1');
      const embeddings = map.hot.filter((r) => r.apis?.includes('embeddings'));
      expect(embeddings.map((r) => [r.model, r.baseUrl, r.apis])).toEqual([
        ['text-embedding-3-small', 'http://h1/v1', ['embeddings']],
        ['text-embedding-3-small', 'http://h2/v1', ['embeddings']],
      ]);
      const warmKinds = new Set(map.warm.map((r) => r.provider));
      expect(warmKinds.size).toBe(2);
      expect(warmKinds.has(map.hot[0].provider)).toBe(false);
      expect(JSON.stringify(readFileSync(join(root, file), 'utf8'))).not.toMatch(/sk-|API_KEY/);
    }
  });

  /** The lines of a map's refusal (every problem of the map, one per line); none when it is taken. */
  const refusedLines = (map: unknown): string[] => {
    try {
      parseRoutesMap(JSON.stringify(map), 'r.json', env);
      return [];
    } catch (error) {
      return (error as Error).message.split('\n');
    }
  };

  it('names the file, the JSON path and what was expected', () => {
    const bad = (map: unknown) => () => parseRoutesMap(JSON.stringify(map), 'r.json', env);
    const base = {
      hot: [{ provider: 'openai', model: 'm', baseUrl: 'http://x' }],
      warm: [],
      cold: { mode: 'graceful_degrade', queue: 'ai-tasks', notify: [] },
    };
    expect(bad({ ...base, hot: [{ provider: 'openai', baseUrl: 'http://x' }] })).toThrow(/^r\.json: hot\[0\]\.model: /);
    expect(bad({ ...base, cold: { ...base.cold, queue: 'other' } })).toThrow(/r\.json: cold\.queue: .*ai-tasks/);
    expect(bad({ ...base, hot: [{ provider: 'openai', model: 'm', baseUrl: '${NOPE_URL}' }] })).toThrow(
      'r.json: hot[0].baseUrl: environment value NOPE_URL is not set',
    );
    expect(bad({ ...base, hot: [{ provider: 'openai', model: 'm', baseUrl: 'ftp://x' }] })).toThrow(
      'r.json: hot[0].baseUrl: expected an http(s) URL',
    );
    expect(bad({ ...base, hot: [{ provider: 'openai', model: 'm', baseUrl: 'http://x', apiKey: 'sk-1' }] })).toThrow(/hot\[0\]/);
    // A notice target that could never be delivered is refused at start, not found out during an
    // outage; the message does not repeat it (a webhook URL carries its secret).
    const notifyTo = (notify: string[]) => bad({ ...base, cold: { ...base.cold, notify } });
    expect(notifyTo(['oncall@example.com', 'hooks.slack.com/services/T0/B0/SECRET'])).toThrow(
      /^r\.json: cold\.notify\[1\]: expected an https webhook URL or an e-mail address$/,
    );
    expect(notifyTo(['http://hooks.example.com/x'])).toThrow('r.json: cold.notify[0]: expected an https webhook URL');
    // fetch could not parse it either: every notice failed, its warning quoting the URL, secret path included.
    expect(notifyTo(['https://hooks slack.com/services/T0/B0/SECRET'])).toThrow(
      /^r\.json: cold\.notify\[0\]: expected an https webhook URL or an e-mail address$/,
    );
    expect(() => notifyTo(['https://hooks.example.com/x', 'http://127.0.0.1:9/hook', 'a@b'])()).not.toThrow();
    expect(() => parseRoutesMap('{', 'r.json', env)).toThrow(/^r\.json: not valid JSON/);
  });

  it("names every problem of a map in one read, one line each: zod's, an unset ${NAME}, an id used twice, a baseUrl not http(s)", () => {
    const map = {
      hot: [
        { id: 'a', provider: 'openai', model: 'm', baseUrl: 'ftp://x', apiKey: 'sk-1' },
        { id: 'a', provider: 'openai', model: 'm', baseUrl: '${NOPE_URL}' },
      ],
      warm: [{ provider: 'mistral', model: 7, baseUrl: '' }],
      cold: { mode: 'graceful_degrade', queue: 'ai-tasks', notify: [] },
    };
    expect(refusedLines(map)).toEqual([
      'r.json: hot[1].baseUrl: environment value NOPE_URL is not set',
      'r.json: hot[0]: Unrecognized key: "apiKey"',
      expect.stringMatching(/^r\.json: warm\[0\]\.model: /),
      expect.stringMatching(/^r\.json: warm\[0\]\.baseUrl: /),
      'r.json: hot[0].baseUrl: expected an http(s) URL, got "ftp://x"',
      'r.json: hot[1].id: "a" is already the id of another route',
    ]);
  });

  // The provider path is appended to baseUrl: after a query it went into the query (`?v=1/chat/completions`),
  // and credentials were dropped unsaid (keys come from the environment, never the map).
  it('refuses a baseUrl with credentials, a query or a fragment, naming the route and never showing the password', () => {
    const route = (baseUrl: string) => ({ provider: 'openai', model: 'm', baseUrl });
    const map = {
      hot: [route('https://user:hunter2@h/v1'), route('https://h/v1?api-version=2024-06-01'), route('https://h/v1#x')],
      warm: [route('http://127.0.0.1:9/v1/')],
      cold: { mode: 'graceful_degrade', queue: 'ai-tasks', notify: [] },
    };
    expect(refusedLines(map)).toEqual([
      'r.json: hot[0].baseUrl: expected an http(s) URL without credentials (keys come from the environment)',
      'r.json: hot[1].baseUrl: expected an http(s) URL without a query or fragment (the API path is appended), got "https://h/v1?api-version=2024-06-01"',
      'r.json: hot[2].baseUrl: expected an http(s) URL without a query or fragment (the API path is appended), got "https://h/v1#x"',
    ]);
  });

  // fetch refuses a URL with credentials: every notice failed, and each failure's warning quoted the
  // webhook whole (password and path); without https, such a URL passed as an e-mail address.
  it('refuses a notice webhook with user:password, as written or from the environment, never showing it', () => {
    const map = {
      hot: [{ provider: 'openai', model: 'm', baseUrl: 'http://x' }],
      warm: [],
      cold: { mode: 'graceful_degrade', queue: 'ai-tasks', notify: ['${HOOK_URL}', 'http://hook:pw-s3cret@hooks.example.com/x'] },
    };
    const hook = 'https://hook:hunter2@hooks.example.com/services/T0/B0/p4th-s3cret';
    const read = () => parseRoutesMap(JSON.stringify(map), 'r.json', { ...env, HOOK_URL: hook });
    expect(read).toThrow(
      'r.json: cold.notify[0]: expected a webhook URL without user:password in it (fetch refuses one)\n' +
        'r.json: cold.notify[1]: expected an https webhook URL or an e-mail address',
    );
    expect(read).not.toThrow(/hunter2|p4th-s3cret|pw-s3cret/);
  });

  // The API path is appended to baseUrl, and a space after it stayed in every call's path
  // (`/v1%20/chat/completions`): the provider answered 404 to each call, the route's breaker opened.
  it('refuses a baseUrl with a space in it, as written or from the environment (never showing that value)', async () => {
    const route = (baseUrl: string) => ({ provider: 'openai', model: 'm', baseUrl });
    const cold = { mode: 'graceful_degrade', queue: 'ai-tasks', notify: [] };
    expect(refusedLines({ hot: [route('https://h/v1 '), route('https://h/v1\n')], warm: [], cold })).toEqual([
      'r.json: hot[0].baseUrl: expected an http(s) URL without spaces (the API path is appended), got "https://h/v1 "',
    ]);
    const dir = mkdtempSync(join(tmpdir(), 'start-'));
    const settings = { ...env, HOT_BASE_URL: 'https://proxy.internal/v1 ', ROUTES_FILE: join(root, 'routes.local.json') };
    await expect(
      createStack({ ...settings, METER_CSV_FILE: join(dir, 'e.csv') }, captureLogger([]), { http: false, worker: false }),
    ).rejects.toThrow(
      'hot[0].baseUrl: expected an http(s) URL without spaces (the API path is appended), got the value of ${HOT_BASE_URL} (not shown)',
    );
  });

  it('keys: Hot routes use HOT_API_KEY; Warm providers map to WARM_A / WARM_B by order of appearance', () => {
    const map = loadRoutesMap(join(root, 'routes.prod.json'), env);
    const keyFor = keyResolver(map, { HOT_API_KEY: 'h', WARM_A_API_KEY: 'a', WARM_B_API_KEY: 'b', WARM_KEY_MISTRAL: '' });
    expect([keyFor('hot', 'openai'), keyFor('warm', 'anthropic'), keyFor('warm', 'mistral')]).toEqual(['h', 'a', 'b']);
  });

  it('prints the difference of the two maps for review', () => {
    const lines = diffJson(
      JSON.parse(readFileSync(join(root, 'routes.local.json'), 'utf8')),
      JSON.parse(readFileSync(join(root, 'routes.prod.json'), 'utf8')),
    );
    expect(lines).toContain('~ hot[0].model: "gpt-4o-mini" → "gpt-4o"');
  });
});

describe('the start-up log', () => {
  // A password written with no colon before it (`redis://hunter2@host`, as redis-cli reads it) is a user name to
  // ioredis, and the log showed it.
  it('shows the Redis URL without its password, in the userinfo (with or without its colon) or in the query (ioredis reads both)', () => {
    const logs: string[] = [];
    const map = parseRoutesMap(readFileSync(join(root, 'routes.local.json'), 'utf8'), 'routes.local.json', env);
    for (const url of [
      'redis://:hunter2@127.0.0.1:6379/9',
      'redis://127.0.0.1:6379/9?password=hunter2&db=9',
      'redis://hunter2@127.0.0.1:6379/9',
    ])
      describeStart(captureLogger(logs), {
        env: readEnv({ QUEUE_STORE_URL: url }),
        map,
        routesFile: 'routes.local.json',
        routesVersion: '0',
        scopes: {},
        stores: { redis: {} } as Stores,
        cappedProvider: 'openai',
        http: true,
        spoolDir: '.data/meter-spool',
      });
    const store = logs.filter((l) => l.includes('store: Redis'));
    expect(store).toHaveLength(3);
    expect(store.join('')).not.toContain('hunter2');
    expect(store[1]).toContain('127.0.0.1:6379/9');
  });

  // SCOPES_FILE=scopes.yml for scopes.yaml started with no scopes, and only an info line said so.
  it('says when the scopes file is missing: a warning when SCOPES_FILE names it (a mistyped path), info for the default', () => {
    const map = parseRoutesMap(readFileSync(join(root, 'routes.local.json'), 'utf8'), 'routes.local.json', env);
    const scopesLine = (settings: NodeJS.ProcessEnv) => {
      const logs: string[] = [];
      const facts = { map, routesFile: 'routes.local.json', routesVersion: '0', scopes: {}, stores: { redis: null } as unknown as Stores };
      const more = { cappedProvider: 'openai', http: true, spoolDir: '.data/meter-spool' };
      describeStart(captureLogger(logs), { env: readEnv(settings), ...facts, ...more });
      const line = JSON.parse(logs.find((l) => l.includes('scopes: '))!) as { level: number; msg: string };
      return [line.level === 40 ? 'warn' : 'info', line.msg];
    };
    const dir = mkdtempSync(join(tmpdir(), 'scopes-log-'));
    const named = join(dir, 'scopse.yaml');
    expect(scopesLine({ SCOPES_FILE: named })).toEqual([
      'warn',
      `scopes: none (${named} not found, though SCOPES_FILE names it; time-to-answer 30 s unless x-time-to-answer-ms)`,
    ]);
    expect(scopesLine({})).toEqual(['info', 'scopes: none (scopes.yaml not found; time-to-answer 30 s unless x-time-to-answer-ms)']);
    writeFileSync(join(dir, 'empty.yaml'), 'scopes: {}\n');
    expect(scopesLine({ SCOPES_FILE: join(dir, 'empty.yaml') })).toEqual([
      'info',
      'scopes: none (time-to-answer 30 s unless x-time-to-answer-ms)',
    ]);
  });
});

describe('scopes', () => {
  it('reads the team YAML and refuses a bad one with the path', () => {
    const dir = mkdtempSync(join(tmpdir(), 'scopes-'));
    const file = join(dir, 's.yaml');
    writeFileSync(file, 'scopes:\n  invoice:\n    time_to_answer_ms: 5000\n    degrade: smaller_model\n    smaller_model: gpt-4o-mini\n');
    expect(loadScopes(file).invoice).toMatchObject({ time_to_answer_ms: 5000, degrade: 'smaller_model' });
    writeFileSync(file, 'scopes:\n  invoice:\n    time_to_answer_ms: fast\n');
    expect(() => loadScopes(file)).toThrow(/s\.yaml: scopes\.invoice\.time_to_answer_ms: /);
    expect(loadScopes(join(dir, 'missing.yaml'))).toEqual({});
  });
});

describe('npm start', () => {
  const redis = redisUnderPrefix('config');
  it('runs the built gateway with nothing configured and says what it uses', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'start-'));
    const child = spawn(process.execPath, [join(root, 'gateway/dist/main.js')], {
      cwd: root,
      env: { PATH: process.env.PATH, PORT: '0', METER_CSV_FILE: join(dir, 'e.csv') },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    await new Promise<void>((resolve, reject) => {
      const t = setTimeout(() => reject(new Error(`no listening line: ${out}`)), 10_000);
      child.stdout.on('data', () => out.includes('listening') && (clearTimeout(t), resolve()));
    });
    child.kill('SIGTERM');
    expect(out).toMatch(/routing map: routes\.local\.json version [0-9a-f]{12} \(4 hot, 2 warm routes\)/);
    expect(out).toContain('store: in-process');
    expect(out).toContain('meter: local CSV');
    expect(out).not.toMatch(/sk-|Bearer /);
  });

  // A worker alone serves nothing, yet its log told the operator its /health and /admin answered 401.
  it('npm run worker says what it uses, but nothing of operator endpoints it does not have', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'start-'));
    const stored = { QUEUE_STORE_URL: TEST_REDIS_URL, REDIS_PREFIX: redis.prefix, METER_CSV_FILE: join(dir, 'e.csv') };
    const out = await outputUntil('worker.js', stored, 'worker: running in this process');
    expect(out).toContain('store: Redis');
    expect(out).not.toContain('ADMIN_TOKEN');
  });

  // Without Redis it logged "worker: running in this process" on an empty queue of its own, which no
  // gateway could fill, and ended (exit 0) or idled: a supervisor restarted it in a loop, and its operator read that a worker ran.
  it('npm run worker without QUEUE_STORE_URL refuses to start, exit 1, saying the gateway runs its queued jobs itself', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'start-'));
    const child = spawn(process.execPath, [join(root, 'gateway/dist/worker.js')], {
      cwd: root,
      env: { PATH: process.env.PATH, METER_CSV_FILE: join(dir, 'e.csv') },
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (err += d));
    const code = await Promise.race([
      new Promise((r) => child.on('exit', r)),
      until(async () => out.includes('worker: running in this process')).then(() => 'running'),
    ]);
    child.kill('SIGTERM');
    expect(code).toBe(1);
    expect(err).toBe(
      "worker did not start:\nQUEUE_STORE_URL is not set: npm run worker takes queued jobs from the gateway's Redis, so set it to that Redis; " +
        "without Redis the gateway's own worker (npm start, WORKER not off) runs its queued jobs\n",
    );
    expect(out).toBe('');
  });

  // WORKER=off without Redis: requests the Cold tier took were answered 202 with a job id, and no
  // process could ever run the job (`npm run worker` has its own in-process queue); nothing said so.
  it('WORKER=off says so at start, and warns without QUEUE_STORE_URL that no worker can run its queued jobs', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'start-'));
    const alone = await outputUntil('main.js', { PORT: '0', WORKER: 'off', METER_CSV_FILE: join(dir, 'e.csv') }, 'gateway listening');
    expect(alone).toContain(
      'worker: not in this process (WORKER=off), and without QUEUE_STORE_URL no `npm run worker` can reach this queue: queued jobs never run',
    );
    const withRedis = {
      QUEUE_STORE_URL: TEST_REDIS_URL,
      REDIS_PREFIX: redis.prefix,
      PORT: '0',
      WORKER: 'off',
      METER_CSV_FILE: join(dir, 'e.csv'),
    };
    const logged = await outputUntil('main.js', withRedis, 'gateway listening');
    expect(logged).toContain('worker: not in this process (WORKER=off): queued jobs wait for `npm run worker` on this Redis');
    expect(logged).not.toContain('worker: running in this process');
  });

  // The second gateway's start log said it spooled to the folder the first one holds.
  it('a second gateway beside the first names the spool folder it took, <dir>.2, in its meter line', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'start-'));
    const env = {
      PATH: process.env.PATH,
      PORT: '0',
      WORKER: 'off',
      METER_URL: 'http://127.0.0.1:9/exec',
      METER_SPOOL_DIR: join(dir, 'spool'),
    };
    const started = async () => {
      const child = spawn(process.execPath, [join(root, 'gateway/dist/main.js')], { cwd: root, env, stdio: ['ignore', 'pipe', 'pipe'] });
      let out = '';
      child.stdout.on('data', (d) => (out += d));
      await until(async () => out.includes('listening'));
      return { out, stop: () => new Promise((r) => (child.on('exit', r), child.kill('SIGTERM'))) };
    };
    const first = await started();
    const second = await started();
    await Promise.all([second.stop(), first.stop()]);
    expect(first.out).toContain(`"meter: meter web app (spooled to ${join(dir, 'spool')})"`);
    expect(second.out).toContain(`this gateway spools to ${join(dir, 'spool')}.2`);
    expect(second.out).toContain(`"meter: meter web app (spooled to ${join(dir, 'spool')}.2)"`);
  });

  it('names the embedded endpoint defaults only when the map took them', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'start-'));
    const literal = join(dir, 'literal.json');
    const route = { provider: 'openai', model: 'm', baseUrl: 'http://127.0.0.1:9/v1' };
    writeFileSync(literal, JSON.stringify({ hot: [route], warm: [], cold: { mode: 'graceful_degrade', queue: 'ai-tasks', notify: [] } }));
    const firstLines = (env: NodeJS.ProcessEnv) =>
      outputUntil('main.js', { PORT: '0', WORKER: 'off', METER_CSV_FILE: join(dir, 'e.csv'), ...env }, 'listening');
    expect(await firstLines({ ROUTES_FILE: literal })).not.toContain('embedded endpoint defaults');
    const local = await firstLines({ ROUTES_FILE: 'routes.local.json', HOT_BASE_URL: 'http://127.0.0.1:9/v1' });
    expect(local).toContain('embedded endpoint defaults for HOT_BASE_URL_2, WARM_A_BASE_URL, WARM_B_BASE_URL"');
  });

  it('with no provider configured, answers from the demo providers and shows failover live', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'start-'));
    const child = spawn(process.execPath, [join(root, 'gateway/dist/main.js')], {
      cwd: root,
      env: { PATH: process.env.PATH, PORT: '0', METER_CSV_FILE: join(dir, 'e.csv'), WORKER: 'off' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    try {
      let out = '';
      child.stdout.on('data', (d) => (out += d));
      const port = await new Promise<string>((resolve, reject) => {
        const t = setTimeout(() => reject(new Error(`no listening line: ${out}`)), 10_000);
        child.stdout.on('data', () => {
          const m = /listening on :(\d+)/.exec(out);
          if (!m) return;
          clearTimeout(t);
          resolve(m[1]);
        });
      });
      expect(out).toContain('built-in demo providers');
      const ask = (content: string) =>
        fetch(`http://127.0.0.1:${port}/v1/chat/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content }] }),
        });
      const hot = await ask('hello');
      expect([hot.status, hot.headers.get('x-route-tier'), hot.headers.get('x-route-provider')]).toEqual([200, 'hot', 'demo-openai']);
      expect(((await hot.json()) as { choices: Array<{ message: { content: string } }> }).choices[0].message.content).toContain('hello');
      const warm = await ask('hello #fail-hot');
      expect([warm.status, warm.headers.get('x-route-tier'), warm.headers.get('x-route-provider')]).toEqual([
        200,
        'warm',
        'demo-anthropic',
      ]);
      const cold = await ask('hello #fail-all');
      expect([cold.status, cold.headers.get('x-route-tier')]).toEqual([202, 'cold']);
      // Embeddings, as the official client asks them (base64, decoded by the SDK): the same text, the same vector.
      const client = new OpenAI({ apiKey: 'demo', baseURL: `http://127.0.0.1:${port}/v1`, maxRetries: 0 });
      const vectors = await client.embeddings.create({ model: 'text-embedding-3-small', input: ['hello', 'world', 'hello'] });
      const [hello, world, again] = vectors.data.map((d) => d.embedding);
      expect(hello.length).toBeGreaterThan(0);
      expect(again).toEqual(hello);
      expect(world).not.toEqual(hello);
      expect(vectors.usage.prompt_tokens).toBeGreaterThan(0);
      // One array of token ids is one input (OpenAI's reading), not one per token.
      const tokens = await client.embeddings.create({ model: 'text-embedding-3-small', input: [15339, 1917] });
      expect(tokens.data).toHaveLength(1);
      expect((await client.models.list()).data.map((m) => m.id)).toContain('text-embedding-3-small');
    } finally {
      child.kill('SIGTERM');
    }
  });

  // ioredis decodes the password: a bare % stopped the start with "URIError: URI malformed" and a stack trace.
  it('refuses a QUEUE_STORE_URL whose password is not percent-encoded, naming it and not showing the password', async () => {
    const [code, err] = await started({ QUEUE_STORE_URL: 'redis://:s3cret%pw@127.0.0.1:6379' });
    expect(code).toBe(1);
    expect(err).toBe(
      'gateway did not start:\nenvironment:\nQUEUE_STORE_URL: expected its user and password percent-encoded (a % in them is written %25)\n',
    );
    expect(readEnv({ QUEUE_STORE_URL: 'redis://:s3cret%25pw@127.0.0.1:6379' }).QUEUE_STORE_URL).toContain('%25');
  });

  // nodemailer decodes it as ioredis does: the same bare % stopped the start with "URIError: URI malformed".
  it('refuses an SMTP_URL whose password is not percent-encoded, naming it and not showing the password', async () => {
    const [code, err] = await started({ SMTP_URL: 'smtp://alerts:s3cret%pw@127.0.0.1:2525' });
    expect(code).toBe(1);
    expect(err).toBe(
      'gateway did not start:\nenvironment:\nSMTP_URL: expected its user and password percent-encoded (a % in them is written %25)\n',
    );
    expect(readEnv({ SMTP_URL: 'smtp://alerts:s3cret%25pw@127.0.0.1:2525' }).SMTP_URL).toContain('%25');
  });

  it('refuses to start on a bad environment value, naming it', async () => {
    const [code, err] = await started({ METER_URL: 'script.google.com/macros/s/x/exec', DAILY_CAP_USD: '-3' });
    expect(code).toBe(1);
    expect(err).toContain('METER_URL: expected an absolute https or http URL');
    expect(err).toContain('DAILY_CAP_USD: expected a number from 0 to 1000000000, got "-3"');
  });

  // fetch refuses a URL with credentials: every meter post and spend read failed, and the spend
  // read's warning quoted the URL with the password and METER_TOKEN.
  // The meter's setup() always makes a token, and it refuses a post without it: a production gateway
  // given METER_URL alone started, and every event then waited in Redis, refused as unauthorized.
  it('refuses, in production, a METER_URL without METER_TOKEN, naming METER_TOKEN', async () => {
    const meter = { METER_URL: 'https://script.google.com/macros/s/abc/exec' };
    expect(() => readEnv({ ...meter, NODE_ENV: 'production' })).toThrow(
      "METER_TOKEN: expected the meter's token with METER_URL in production (its setup() made one; the meter refuses every post without it)",
    );
    expect(() => readEnv({ ...meter, NODE_ENV: 'production', METER_TOKEN: 'tok' })).not.toThrow();
    expect(() => readEnv(meter)).not.toThrow(); // a trial against an open meter
    const [code, err] = await started({ ...meter, NODE_ENV: 'production' });
    expect(code).toBe(1);
    expect(err).toMatch(/^gateway did not start:\nenvironment:\nMETER_TOKEN: expected the meter's token with METER_URL in production/);
  });

  // Every job type ran with the 30 s default instead of the team's scopes, and only an info line said so.
  it('refuses, in production, a SCOPES_FILE that names a file that is not there', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'start-'));
    const file = join(dir, 'scopes.yml');
    const [code, err] = await started({ NODE_ENV: 'production', SCOPES_FILE: file });
    expect(code).toBe(1);
    expect(err).toBe(
      `gateway did not start:\nSCOPES_FILE: ${file} not found (every job type would run without its scope; unset SCOPES_FILE to run without scopes)\n`,
    );
  });

  // It started with no word of it (the start-up line left out the key count); the first request then
  // logged "client key store unreachable" and every client got 503.
  it('refuses, with client keys, a CLIENT_KEYS_FILE that cannot be read, naming the file and what is wrong', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'start-'));
    const file = join(dir, 'client-keys.json');
    for (const [text, why] of [
      ['{"keys": [', /not valid JSON|Unexpected end of JSON input/],
      ['{"hot": []}', /expected \{"keys": \[records\]\} as npm run keys writes it/],
    ] as const) {
      writeFileSync(file, text);
      const [code, err] = await started({ GATEWAY_AUTH: 'keys', CLIENT_KEYS_FILE: file });
      expect(code).toBe(1);
      expect(err).toMatch(new RegExp(`^gateway did not start:\nCLIENT_KEYS_FILE: ${file}: `));
      expect(err).toMatch(why);
    }
  });

  it('refuses a METER_URL with user:password in it, naming it and showing neither the password nor the token', () => {
    const read = () => readEnv({ METER_URL: 'https://meter:hunter2@script.google.com/macros/s/x/exec', METER_TOKEN: 'mtok-s3cret' });
    expect(read).toThrow("METER_URL: expected a URL without user:password in it (the meter's token is METER_TOKEN)");
    expect(read).not.toThrow(/hunter2|mtok-s3cret/);
    expect(readEnv({ METER_URL: 'https://script.google.com/macros/s/x/exec?x=1' }).METER_URL).toBe(
      'https://script.google.com/macros/s/x/exec?x=1',
    );
  });

  // A port another process holds (a second `npm start` on 8080) stopped the start with a stack trace.
  it('a PORT another process listens on stops the start naming PORT, not with a stack trace', async () => {
    const taken = createServer();
    await new Promise<void>((r) => taken.listen(0, r));
    try {
      const port = (taken.address() as AddressInfo).port;
      const [code, err] = await started({
        PORT: String(port),
        WORKER: 'off',
        METER_CSV_FILE: join(mkdtempSync(join(tmpdir(), 'port-')), 'e.csv'),
      });
      expect(code).toBe(1);
      expect(err).toBe(`gateway did not start:\nPORT: ${port} is in use by another process (another gateway?): set PORT to a free port\n`);
    } finally {
      taken.close();
    }
  });

  // nodemailer sent a notice from a name alone, or no address, with an empty sender (MAIL FROM:<>)
  // and no From header: relays refuse it or file it as spam, and nobody knew before an outage.
  it('an SMTP_FROM that is not one e-mail address is refused by name', () => {
    for (const from of ['AI Gateway', 'AI Gateway <>', 'a@b.test, c@d.test', 'ai@'])
      expect(() => readEnv({ SMTP_FROM: from }), from).toThrow(
        `SMTP_FROM: expected one e-mail address, a name before it if wanted: AI Gateway <ai@example.com>, got ${JSON.stringify(from)}`,
      );
    for (const from of ['ai@corp.test', 'AI Gateway <ai@corp.test>']) expect(readEnv({ SMTP_FROM: from }).SMTP_FROM).toBe(from);
    expect(readEnv({}).SMTP_FROM).toBe('ai-gateway@localhost');
  });

  it('a blank or hexadecimal number, a WORKER other than on/off and a bad LOG_LEVEL are each refused by name', async () => {
    expect(() => readEnv({ PORT: ' ' })).toThrow('PORT: expected a whole number from 0 to 65535');
    expect(() => readEnv({ PORT: '0x1F90' })).toThrow('PORT: expected a whole number from 0 to 65535, got "0x1F90"');
    expect(readEnv({ PORT: ' 8081 ', SHUTDOWN_GRACE_MS: '1000' })).toMatchObject({ PORT: 8081, SHUTDOWN_GRACE_MS: 1000 });
    expect(() => readEnv({ WORKER: 'false' })).toThrow(/WORKER: .*"false"/);
    const [code, err] = await started({ LOG_LEVEL: 'verbose' });
    expect(code).toBe(1);
    expect(err).toMatch(/^gateway did not start:\nenvironment:\nLOG_LEVEL: .*"verbose"/);
  });

  // An env file saved on Windows ends every value with a carriage return: quoted as it was, the
  // refusal's closing quote went back over the start of its line, and the character at fault never showed.
  it('a refused value with a carriage return or another control character in it is shown escaped', async () => {
    const [code, err] = await started({ LOG_LEVEL: 'info\r', CAPPED_PROVIDER: 'openai\r' });
    expect(code).toBe(1);
    expect(err).toContain(
      'LOG_LEVEL: Invalid option: expected one of "fatal"|"error"|"warn"|"info"|"debug"|"trace"|"silent", got "info\\r"',
    );
    expect(err).not.toContain('\r');
    const [, capped] = await started({ DEMO_PROVIDERS: 'off', CAPPED_PROVIDER: 'openai\r' });
    expect(capped).toContain('CAPPED_PROVIDER: expected a provider of the routing map (openai, anthropic, mistral), got "openai\\r"');
    expect(capped).not.toContain('\r');
  });

  // The worker made its logger before reading the environment: pino's stack trace instead of the name.
  it('npm run worker refuses a bad LOG_LEVEL by name, as the gateway does, not with a stack trace', async () => {
    const child = spawn(process.execPath, [join(root, 'gateway/dist/worker.js')], {
      cwd: root,
      env: { PATH: process.env.PATH, LOG_LEVEL: 'verbose' },
    });
    let err = '';
    child.stderr.on('data', (d) => (err += d));
    const code = await new Promise((r) => child.on('exit', r));
    expect(code).toBe(1);
    expect(err).toMatch(/^worker did not start:\nenvironment:\nLOG_LEVEL: .*"verbose"\n$/);
    expect(err).not.toMatch(/\n\s+at /);
  });

  // The worker's refusal began `gateway did not start:`, and in production it first told the operator
  // it ran on its own in-process queue, the very configuration it then refused.
  it('npm run worker names itself when it does not start, and in production without Redis only refuses', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'start-'));
    const file = join(dir, 'routes.json');
    const map = JSON.parse(readFileSync(join(root, 'routes.prod.json'), 'utf8'));
    map.cold.notify = ['https://hooks.slack.com/services/T0/B0/abc'];
    writeFileSync(file, JSON.stringify(map));
    const keys = { HOT_API_KEY: 'sk-h', WARM_A_API_KEY: 'sk-a', WARM_B_API_KEY: 'sk-b' };
    const child = spawn(process.execPath, [join(root, 'gateway/dist/worker.js')], {
      cwd: root,
      env: { PATH: process.env.PATH, ...env, ...keys, NODE_ENV: 'production', ROUTES_FILE: file, METER_CSV_FILE: join(dir, 'e.csv') },
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (err += d));
    expect(await new Promise((r) => child.on('exit', r))).toBe(1);
    expect(err).toBe('worker did not start:\nQUEUE_STORE_URL is required with NODE_ENV=production (queued work must survive a restart)\n');
    expect(out).not.toContain('in-process queue');
  });

  it('refuses a NODE_ENV other than production, development or test (NODE_ENV=prod ran as development: no Redis, no client keys)', async () => {
    for (const value of ['production', 'development', 'test', '']) expect(() => readEnv({ NODE_ENV: value })).not.toThrow();
    expect(() => readEnv({ NODE_ENV: 'Production' })).toThrow(/NODE_ENV: .*"Production"/);
    const [code, err] = await started({ NODE_ENV: 'prod' });
    expect(code).toBe(1);
    expect(err).toContain('NODE_ENV: expected production, development or test (only production changes what the gateway does), got "prod"');
  });

  // It started all the same, and released every answer with its event only in memory (an error logged per write).
  it('refuses a METER_CSV_FILE that cannot be appended to (a folder, a path under a file), naming it and why', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'start-'));
    writeFileSync(join(dir, 'plain'), '');
    for (const [file, reason] of [
      [dir, 'EISDIR'],
      [join(dir, 'plain', 'e.csv'), 'EEXIST'], // mkdir of its folder, a file
    ]) {
      const child = spawn(process.execPath, [join(root, 'gateway/dist/main.js')], {
        cwd: root,
        env: { PATH: process.env.PATH, PORT: '0', WORKER: 'off', METER_CSV_FILE: file },
      });
      let out = '';
      let err = '';
      child.stdout.on('data', (d) => (out += d));
      child.stderr.on('data', (d) => (err += d));
      const exited = new Promise((r) => child.on('exit', r));
      const code = await Promise.race([exited, until(async () => out.includes('gateway listening')).then(() => 'listening')]);
      child.kill('SIGTERM');
      await exited;
      expect(code).toBe(1);
      expect(err).toMatch(new RegExp(`^gateway did not start:\nMETER_CSV_FILE: ${file} cannot be appended to \\(${reason}: `));
      expect(err).toContain('; set it to a file this process may write\n');
    }
    expect(readdirSync(dir).sort()).toEqual(['plain']);
  });

  // A CSV that stopped taking writes (here a folder where the file was) ended the stop in an unhandled rejection: a stack trace, exit 1.
  it('a meter CSV that stops taking writes holds no answer, and the stop says its events are lost, exit 0', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'start-'));
    const file = join(dir, 'e.csv');
    const child = spawn(process.execPath, [join(root, 'gateway/dist/main.js')], {
      cwd: root,
      env: { PATH: process.env.PATH, PORT: '0', WORKER: 'off', METER_CSV_FILE: file },
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (err += d));
    const exited = new Promise((r) => child.on('exit', r));
    await until(async () => out.includes('gateway listening'));
    const port = /gateway listening on :(\d+)/.exec(out)![1];
    mkdirSync(file); // no file yet (nothing written): its first write meets a folder
    const res = await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] }),
    });
    expect(res.status).toBe(200);
    await until(async () => out.includes('line(s) kept in memory'));
    child.kill('SIGTERM');
    expect(await exited).toBe(0);
    expect(out).toContain('meter: events kept in memory not written at stop, lost: EISDIR');
    expect(err).toBe('');
  });

  it('refuses a CAPPED_PROVIDER that is no provider of the map, naming those it has (a typo left the budget pause matching nothing)', async () => {
    const [code, err] = await started({ DEMO_PROVIDERS: 'off', CAPPED_PROVIDER: 'opnai' });
    expect(code).toBe(1);
    expect(err).toContain('CAPPED_PROVIDER: expected a provider of the routing map (openai, anthropic, mistral), got "opnai"');
  });

  it("warns at start of a map's killed model that no route calls (another case), and keeps it as written", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'start-'));
    const routes = join(dir, 'routes.json');
    const route = { provider: 'openai', model: 'gpt-4o-mini', baseUrl: 'http://127.0.0.1:9/v1' };
    const flags = { killed_models: ['GPT-4o-mini'] };
    writeFileSync(
      routes,
      JSON.stringify({ hot: [route], warm: [], cold: { mode: 'graceful_degrade', queue: 'ai-tasks', notify: [] }, flags }),
    );
    const logs: string[] = [];
    const settings = { ROUTES_FILE: routes, METER_CSV_FILE: join(dir, 'e.csv'), SCOPES_FILE: join(dir, 'none.yaml'), HOT_API_KEY: 'k' };
    const stack = await createStack(settings, captureLogger(logs), { http: false, worker: false });
    try {
      const warned = logs.map((l) => JSON.parse(l) as { level: number; msg: string }).filter((l) => l.level === 40);
      expect(warned.map((l) => l.msg)).toContainEqual(expect.stringContaining('killed_models "GPT-4o-mini" match no model a route calls'));
      expect(stack.flags.get().killed_models).toEqual(['GPT-4o-mini']);
    } finally {
      await stack.close();
    }
  });

  // Windows PowerShell's `Set-Content -Encoding UTF8` (and older Notepad) saves UTF-8 with a byte-order
  // mark: the start was refused with "Unexpected token", quoting a character no editor shows.
  it('starts on a map saved with a byte-order mark, as on the same map without one', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'start-'));
    const file = join(dir, 'routes.json');
    writeFileSync(file, `\uFEFF${readFileSync(join(root, 'routes.local.json'), 'utf8')}`);
    const child = spawn(process.execPath, [join(root, 'gateway/dist/main.js')], {
      cwd: root,
      env: { PATH: process.env.PATH, PORT: '0', ROUTES_FILE: file, METER_CSV_FILE: join(dir, 'e.csv') },
    });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (out += d));
    let exited = false;
    child.on('exit', () => (exited = true));
    await until(async () => exited || out.includes('gateway listening'));
    expect(out).toMatch(new RegExp(`routing map: ${file} version [0-9a-f]{12} \\(4 hot, 2 warm routes\\)`));
  });

  // A token budget under a name no route has (a typo, `OpenAI`) weighed nothing: the provider ran unbudgeted, unsaid.
  it('refuses a token budget for a provider the map has no route of, naming it and the providers it has', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'start-'));
    const file = join(dir, 'routes.json');
    const map = JSON.parse(readFileSync(join(root, 'routes.local.json'), 'utf8'));
    map.limits = { provider_tokens_per_minute: { openai: 2_000_000, mistrall: 500_000 } };
    writeFileSync(file, JSON.stringify(map));
    const [code, err] = await started({ ROUTES_FILE: file, METER_CSV_FILE: join(dir, 'e.csv') });
    expect(code).toBe(1);
    expect(err).toBe(
      `gateway did not start:\n${file}: limits.provider_tokens_per_minute.mistrall: expected a provider of the routing map (openai, anthropic, mistral)\n`,
    );
  });

  it('refuses to start on a map with a key written twice, naming it and its JSON path', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'start-'));
    const file = join(dir, 'routes.json');
    const text = readFileSync(join(root, 'routes.local.json'), 'utf8');
    writeFileSync(file, text.replace(/\n}\s*$/, ',\n  "hot": [{"provider": "openai", "model": "gpt-4o", "baseUrl": "https://h/v1"}]\n}\n'));
    const [code, err] = await started({ ROUTES_FILE: file, METER_CSV_FILE: join(dir, 'e.csv') });
    expect(code).toBe(1);
    expect(err).toBe(`gateway did not start:\n${file}: hot: "hot" is written twice in one object (only the last would count)\n`);
  });

  // A model with a space after it was sent as written: every call to the route failed at the provider, its breaker opened.
  it('refuses to start on a model name with spaces or a line break around it, naming the route and field', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'start-'));
    const file = join(dir, 'routes.json');
    const map = JSON.parse(readFileSync(join(root, 'routes.local.json'), 'utf8'));
    map.hot[1].model = 'gpt-4o-mini ';
    map.cheaper_model = '\tgpt-4o-mini';
    writeFileSync(file, JSON.stringify(map));
    const [code, err] = await started({ ROUTES_FILE: file, METER_CSV_FILE: join(dir, 'e.csv') });
    expect(code).toBe(1);
    const around = 'expected a model name without spaces or line breaks around it';
    expect(err).toBe(
      `gateway did not start:\n${file}: hot[1].model: ${around}, got "gpt-4o-mini "\n${file}: cheaper_model: ${around}, got "\\tgpt-4o-mini"\n`,
    );
  });

  it('refuses to start on an invalid map, naming the file and path', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'start-'));
    const file = join(dir, 'bad.json');
    writeFileSync(file, JSON.stringify({ hot: [], warm: [], cold: {} }));
    const [code, err] = await started({ ROUTES_FILE: file });
    expect(code).toBe(1);
    expect(err).toContain(`${file}: hot: `);
    expect(err).toContain(`${file}: cold.mode: `);
  });

  // A secret made from a file (`kubectl create secret --from-file`) often ends with a newline: the
  // token then never matched a caller's, and undici refused every provider call with the key.
  it('refuses a token or a provider key with spaces or a line break around it, naming it and not showing it', async () => {
    expect(() => readEnv({ ADMIN_TOKEN: 'admin-secret\n' })).toThrow(/ADMIN_TOKEN: expected no spaces or line breaks around it/);
    expect(() => readEnv({ VOICE_TOKEN: ' voice-secret' })).toThrow(/VOICE_TOKEN: /);
    expect(() => readEnv({ ADMIN_TOKEN: 'admin-secret\n' })).not.toThrow(/admin-secret/);
    const [code, err] = await started({
      ROUTES_FILE: join(root, 'routes.local.json'),
      HOT_API_KEY: 'sk-hot-secret\n',
      WARM_A_API_KEY: 'sk-a',
      WARM_B_API_KEY: 'sk-b',
      METER_CSV_FILE: join(mkdtempSync(join(tmpdir(), 'start-')), 'e.csv'),
    });
    expect(code).toBe(1);
    expect(err).toContain('HOT_API_KEY: expected no line break in the key');
    expect(err).not.toContain('sk-hot-secret');
  });

  // A provider key put in the endpoint's variable by mistake, a proxy's token in a query: the refusal
  // names the ${NAME} that holds it, as it names a bad key, and the start log never shows its value.
  it('refuses a baseUrl taken from the environment naming its ${NAME}, never showing the value', async () => {
    const [code, err] = await started({
      ROUTES_FILE: join(root, 'routes.prod.json'),
      HOT_BASE_URL: 'sk-proj-swapped-with-the-url',
      HOT_BASE_URL_2: 'https://proxy.example.com/v1?token=proxy-secret',
      METER_CSV_FILE: join(mkdtempSync(join(tmpdir(), 'start-')), 'e.csv'),
    });
    expect(code).toBe(1);
    expect(err).toContain('hot[0].baseUrl: expected an http(s) URL, got the value of ${HOT_BASE_URL} (not shown)');
    expect(err).toContain(
      'hot[1].baseUrl: expected an http(s) URL without a query or fragment (the API path is appended), got the value of ${HOT_BASE_URL_2} (not shown)',
    );
    expect(err).not.toContain('sk-proj-swapped');
    expect(err).not.toContain('proxy-secret');
  });

  it('names every problem of the map and of the environment against it in one start', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'start-'));
    const file = join(dir, 'bad.json');
    const route = { provider: 'openai', model: 'm', baseUrl: 'ftp://nowhere', apiKey: 'sk-1' };
    writeFileSync(file, JSON.stringify({ hot: [route], warm: [], cold: { mode: 'graceful_degrade', queue: 'ai-tasks', notify: [] } }));
    const [code, err] = await started({ ROUTES_FILE: file });
    expect(code).toBe(1);
    expect(err).toContain(`${file}: hot[0]: Unrecognized key: "apiKey"`);
    expect(err).toContain(`${file}: hot[0].baseUrl: expected an http(s) URL, got "ftp://nowhere"`);
    const [, env] = await started({ NODE_ENV: 'production', ROUTES_FILE: join(root, 'routes.local.json'), CAPPED_PROVIDER: 'opnai' });
    expect(env).toContain('provider keys not set: HOT_API_KEY (openai)');
    expect(env).toContain('CAPPED_PROVIDER: expected a provider of the routing map (openai, anthropic, mistral), got "opnai"');
  });

  // routes.prod.json ships with a placeholder Slack webhook and oncall@example.com: a production start
  // took both, so every pause, dead-letter and queued-work notice went nowhere (Slack answers 404) or
  // only into the log (no SMTP_URL), and nothing said so before the first outage.
  it('refuses, in production, notice targets nobody reads: the shipped placeholders, e-mail without SMTP_URL', async () => {
    const keys = { HOT_API_KEY: 'sk-h', WARM_A_API_KEY: 'sk-a', WARM_B_API_KEY: 'sk-b' };
    const prod = { ...env, ...keys, NODE_ENV: 'production', ROUTES_FILE: join(root, 'routes.prod.json') };
    const [code, err] = await started(prod);
    expect(code).toBe(1);
    expect(err).toContain(
      'cold.notify[0]: expected your own webhook URL or e-mail address, got the placeholder "https://hooks.slack.com/services/REPLACE/ME"',
    );
    expect(err).toContain('cold.notify[1]: expected your own webhook URL or e-mail address, got the placeholder "oncall@example.com"');
    expect(err).toContain('SMTP_URL: expected an smtp(s) URL for the e-mail target(s) of cold.notify (oncall@example.com)');
    // Real targets and SMTP_URL: the map passes (the start then stops only for want of Redis).
    const dir = mkdtempSync(join(tmpdir(), 'start-'));
    const file = join(dir, 'routes.json');
    const map = JSON.parse(readFileSync(join(root, 'routes.prod.json'), 'utf8'));
    map.cold.notify = ['https://hooks.slack.com/services/T0/B0/abc', 'oncall@acme.test'];
    writeFileSync(file, JSON.stringify(map));
    const [, ok] = await started({ ...prod, ROUTES_FILE: file, SMTP_URL: 'smtp://mail.acme.test:587' });
    expect(ok).toBe('gateway did not start:\nQUEUE_STORE_URL is required with NODE_ENV=production (queued work must survive a restart)\n');
    // Outside production the shipped map is taken as it was.
    const shipped = loadRoutesMap(join(root, 'routes.prod.json'), env);
    expect(mapEnvironmentProblems(shipped, { keys, production: false, capped: 'openai' })).toEqual([]);
  });
});

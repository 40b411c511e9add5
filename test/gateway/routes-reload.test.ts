// Reloading the routing map on a running gateway: POST /admin/routes/reload on the whole stack
// (createStack), and SIGHUP on a spawned `gateway/dist/main.js` (built by `npm run build`).
import { spawn } from '../children';
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { createServer, type Socket } from 'node:net';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { FakeProvider } from './fake-provider';
import { ADMIN, captureLogger, chat, listenStack } from './harness';
import { until } from './keys-harness';
import { TEST_REDIS_URL } from '../redis-db';
import { redisUnderPrefix } from '../redis-prefix';

const root = join(import.meta.dirname, '..', '..');
const cold = { mode: 'graceful_degrade', queue: 'ai-tasks', notify: [] };
const auth = { authorization: `Bearer ${ADMIN}` };
let one: FakeProvider, two: FakeProvider;
let dir: string, file: string;
let app: Awaited<ReturnType<typeof listenStack>> | undefined;
const redis = redisUnderPrefix('reload');

beforeEach(async () => {
  [one, two] = await Promise.all([new FakeProvider().start(), new FakeProvider().start()]);
  one.always({ kind: 'ok', content: 'from one' });
  two.always({ kind: 'ok', content: 'from two' });
  dir = mkdtempSync(join(tmpdir(), 'reload-'));
  file = join(dir, 'routes.json');
});
afterEach(async () => {
  await app?.stop();
  app = undefined;
  await Promise.all([one.stop(), two.stop()]);
});

const route = (id: string, baseUrl: string) => ({ id, provider: 'openai', model: 'gpt-4o-mini', baseUrl });
/** Writes a map and returns its text's version as /health shows it. */
function writeMap(map: unknown): string {
  const text = typeof map === 'string' ? map : JSON.stringify(map, null, 2);
  writeFileSync(file, text);
  return createHash('sha256').update(text).digest('hex').slice(0, 12);
}
const env = () => ({ ROUTES_FILE: file, ADMIN_TOKEN: ADMIN, METER_CSV_FILE: join(dir, 'e.csv'), SCOPES_FILE: join(dir, 'none.yaml') });
const health = async (url: string) =>
  (await (await fetch(`${url}/health`, { headers: auth })).json()) as {
    routes_map: { file: string; version: string; loaded_at: string };
    routes: Array<{ id: string; breaker: string }>;
  };
const reload = (url: string) => fetch(`${url}/admin/routes/reload`, { method: 'POST', headers: auth });
const said = (res: { json: () => any }) => res.json().choices[0].message.content as string;

describe('reloading the routing map', () => {
  it('a good map is put in force: /health shows its version, new routes answer, removed ones leave /health and /metrics', async () => {
    const v1 = writeMap({ hot: [route('first', one.url)], warm: [], cold });
    app = await listenStack(env());
    const before = await health(app.url);
    expect(before.routes_map).toMatchObject({ file, version: v1 });
    expect(said(await chat(app.url))).toBe('from one');

    const v2 = writeMap({ hot: [route('second', two.url)], warm: [], cold });
    const res = await reload(app.url);
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ routes_map: { version: v2 }, added: ['second'], removed: ['first'], changed: [] });
    const after = await health(app.url);
    expect(after.routes_map.version).toBe(v2);
    expect(after.routes.map((r) => r.id)).toEqual(['second']);
    expect(after.routes_map.loaded_at >= before.routes_map.loaded_at).toBe(true);
    expect(said(await chat(app.url))).toBe('from two');
    const metrics = await (await fetch(`${app.url}/metrics`, { headers: auth })).text();
    expect(metrics).toContain('gateway_breaker_state{route="second"} 0');
    expect(metrics).not.toContain('gateway_breaker_state{route="first"}');
  });

  it('a bad map is refused naming the file and the JSON path; the map in force keeps serving', async () => {
    const v1 = writeMap({ hot: [route('first', one.url)], warm: [], cold });
    app = await listenStack(env());
    writeMap({ hot: [route('first', one.url)], warm: [{ provider: 'mistral', model: 7, baseUrl: two.url }], cold });
    const res = await reload(app.url);
    expect(res.status).toBe(400);
    const body = (await res.json()) as { error: string };
    expect(body.error).toContain(`${file}: warm[0].model:`);
    writeMap({ hot: [{ ...route('first', one.url), baseUrl: 'ftp://nowhere', apiKey: 'sk-1' }], warm: [], cold });
    const both = ((await (await reload(app.url)).json()) as { error: string }).error.split('\n');
    expect(both).toEqual([
      `${file}: hot[0]: Unrecognized key: "apiKey"`,
      `${file}: hot[0].baseUrl: expected an http(s) URL, got "ftp://nowhere"`,
    ]);
    writeMap({ hot: [route('first', one.url)], warm: [], cold, limits: { provider_tokens_per_minute: { OpenAI: 1000 } } });
    expect(((await (await reload(app.url)).json()) as { error: string }).error).toBe(
      `${file}: limits.provider_tokens_per_minute.OpenAI: expected a provider of the routing map (openai)`,
    );
    writeMap('{"hot": [');
    expect(((await (await reload(app.url)).json()) as { error: string }).error).toMatch(new RegExp(`^${file}: not valid JSON`));
    expect((await health(app.url)).routes_map.version).toBe(v1);
    expect(said(await chat(app.url))).toBe('from one');
    expect((await fetch(`${app.url}/admin/routes/reload`, { method: 'POST' })).status).toBe(401);
  });

  // JSON.parse keeps the last of a key written twice: a second "hot" dropped the first list unsaid.
  it('a map with a key written twice is refused naming the key and its JSON path; the map in force keeps serving', async () => {
    writeMap({ hot: [route('first', one.url)], warm: [], cold });
    app = await listenStack(env());
    const hot = JSON.stringify([route('first', one.url)]);
    writeMap(
      `{"hot": ${hot}, "warm": [], "cold": ${JSON.stringify(cold)}, "hot": [{"id": "second", "id": "x", "provider": "openai", "model": "m", "baseUrl": "${two.url}"}]}`,
    );
    const res = await reload(app.url);
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: string }).error.split('\n')).toEqual([
      `${file}: hot: "hot" is written twice in one object (only the last would count)`,
      `${file}: hot[0].id: "id" is written twice in one object (only the last would count)`,
    ]);
    expect(said(await chat(app.url))).toBe('from one');
  });

  it("reordering the Warm provider kinds is refused: it would send each provider the other's key; pinned keys may move", async () => {
    const warm = (...kinds: string[]) => kinds.map((provider) => ({ provider, model: `${provider}-model`, baseUrl: two.url }));
    const keys = { WARM_A_API_KEY: 'sk-anthropic-key', WARM_B_API_KEY: 'sk-mistral-key' };
    const v1 = writeMap({ hot: [route('first', one.url)], warm: warm('anthropic', 'mistral'), cold });
    app = await listenStack({ ...env(), ...keys });
    writeMap({ hot: [route('first', one.url)], warm: warm('mistral', 'anthropic'), cold });
    const res = await reload(app.url);
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: string }).error).toContain('anthropic: WARM_A_API_KEY → WARM_B_API_KEY');
    expect((await health(app.url)).routes_map.version).toBe(v1);
    writeMap({ hot: [route('first', one.url)], warm: warm('mistral'), cold }); // mistral alone would take anthropic's letter
    expect((await reload(app.url)).status).toBe(400);
    await app.stop();

    writeMap({ hot: [route('first', one.url)], warm: warm('anthropic', 'mistral'), cold });
    const pinned = { WARM_KEY_ANTHROPIC: keys.WARM_A_API_KEY, WARM_KEY_MISTRAL: keys.WARM_B_API_KEY };
    app = await listenStack({ ...env(), ...pinned });
    writeMap({ hot: [route('first', one.url)], warm: warm('mistral', 'anthropic'), cold });
    expect((await reload(app.url)).status).toBe(200);
    one.always({ kind: 'status', status: 503 });
    await chat(app.url);
    const sent = two.received.map((r) => [r.body.model, r.headers.authorization]);
    expect(sent).toContainEqual(['mistral-model', 'Bearer sk-mistral-key']);
  });

  it("a map without the budget pause's provider is refused, with every other problem of the reload; the map in force stays", async () => {
    const warm = (...kinds: string[]) => kinds.map((provider) => ({ provider, model: `${provider}-model`, baseUrl: two.url }));
    const keys = { WARM_A_API_KEY: 'sk-anthropic-key', WARM_B_API_KEY: 'sk-mistral-key' };
    const v1 = writeMap({ hot: [route('first', one.url)], warm: warm('anthropic', 'mistral'), cold });
    app = await listenStack({ ...env(), ...keys }); // CAPPED_PROVIDER unset: the first Hot route's, openai
    writeMap({ hot: [{ ...route('first', one.url), provider: 'mistral' }], warm: warm('mistral', 'anthropic'), cold });
    const res = await reload(app.url);
    expect(res.status).toBe(400);
    const lines = ((await res.json()) as { error: string }).error.split('\n');
    expect(lines).toHaveLength(2);
    expect(lines[0]).toContain(`${file}: the Warm providers' keys would move`);
    expect(lines[1]).toBe(`${file}: CAPPED_PROVIDER: expected a provider of the routing map (mistral, anthropic), got "openai"`);
    expect((await health(app.url)).routes_map.version).toBe(v1);
    await app.stop();

    writeMap({ hot: [route('first', one.url)], warm: warm('anthropic'), cold });
    app = await listenStack({ ...env(), CAPPED_PROVIDER: 'anthropic' });
    writeMap({ hot: [route('first', one.url)], warm: [], cold });
    expect(((await (await reload(app.url)).json()) as { error: string }).error).toContain(
      'CAPPED_PROVIDER: expected a provider of the routing map (openai), got "anthropic"',
    );
    writeMap({ hot: [route('first', one.url)], warm: warm('anthropic', 'mistral'), cold });
    expect((await reload(app.url)).status).toBe(200);
  });

  it('an unchanged route keeps its breaker; a request under way finishes on the routes it started with', async () => {
    writeMap({ hot: [route('dead', two.url), route('slow', one.url)], warm: [], cold });
    app = await listenStack(env());
    two.always({ kind: 'status', status: 500 });
    while (app.stack.path.routes[0].breaker.state() !== 'open') await chat(app.url);
    // The next request's first call fails; its retry (100 to 200 ms later) comes after the reload.
    one.always({ kind: 'ok', content: 'slow answer' }).next({ kind: 'status', status: 500 });
    const seen = one.received.length;
    const slow = chat(app.url);
    await until(async () => one.received.length === seen + 1);
    const fresh = await new FakeProvider().start();
    try {
      fresh.always({ kind: 'ok', content: 'from fresh' });
      writeMap({ hot: [route('dead', two.url), route('fresh', fresh.url)], warm: [], cold });
      expect(await (await reload(app.url)).json()).toMatchObject({ added: ['fresh'], removed: ['slow'] });
      const res = await slow;
      expect(res.status).toBe(200);
      expect(said(res)).toBe('slow answer');
      expect((await health(app.url)).routes.find((r) => r.id === 'dead')?.breaker).toBe('open');
      const calls = two.received.length;
      expect(said(await chat(app.url))).toBe('from fresh');
      expect(two.received).toHaveLength(calls); // still open: skipped without a call
    } finally {
      await fresh.stop();
    }
  });

  it("a provider the reload adds is one the token budgets know of: its route answers when the others' budgets are spent", async () => {
    const limits = { provider_tokens_per_minute: { openai: 1 } };
    writeMap({ hot: [route('first', one.url)], warm: [], cold, limits });
    app = await listenStack(env());
    expect((await chat(app.url)).status).toBe(200); // 17 tokens: openai's budget for this minute is spent
    expect((await chat(app.url)).status).toBe(429);
    const mistral = { id: 'spare', provider: 'mistral', model: 'mistral-small', baseUrl: two.url };
    writeMap({ hot: [route('first', one.url)], warm: [mistral], cold, limits });
    expect((await reload(app.url)).status).toBe(200);
    const res = await chat(app.url);
    expect(res.status).toBe(200);
  });

  it('a reload that leaves a killed model no route is logged with a warning naming it, as at start, and answered', async () => {
    const flags = { killed_models: ['gpt-4o'] };
    const big = { ...route('big', two.url), model: 'gpt-4o' };
    writeMap({ hot: [route('first', one.url), big], warm: [], cold, flags });
    const logs: string[] = [];
    app = await listenStack(env(), { http: true, worker: false }, captureLogger(logs));
    const warned = () =>
      logs
        .map((l) => JSON.parse(l) as { level: number; msg: string })
        .filter((l) => l.msg.includes('killed_models "gpt-4o" match no model'));
    expect(warned()).toHaveLength(0);
    writeMap({ hot: [route('first', one.url)], warm: [], cold, flags });
    const res = await reload(app.url);
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ removed: ['big'], restart_needed: [], unmatched_killed_models: ['gpt-4o'] });
    expect(warned()).toMatchObject([{ level: 40, unmatched_killed_models: ['gpt-4o'] }]);
  });

  // A map pushed to every instance (`kill -HUP`) reached one still starting: Node's default for the
  // signal ended it. A Redis that takes the connection and answers nothing holds the start open.
  it('a SIGHUP while the gateway starts does not end it: the map is read again once it is up', async () => {
    writeMap({ hot: [route('first', one.url)], warm: [], cold });
    const held: Socket[] = [];
    const silent = createServer((socket) => held.push(socket));
    await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
    const store = `redis://127.0.0.1:${(silent.address() as { port: number }).port}`;
    const child = spawn(process.execPath, [join(root, 'gateway/dist/main.js')], {
      cwd: root,
      env: { PATH: process.env.PATH, PORT: '0', WORKER: 'off', QUEUE_STORE_URL: store, ...env() },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    let ended: string | null = null;
    child.on('exit', (code, signal) => (ended = `exit ${code} ${signal}`));
    try {
      await until(async () => held.length > 0); // connecting to its store: not up yet
      const v2 = writeMap({ hot: [route('second', two.url)], warm: [], cold });
      child.kill('SIGHUP');
      await until(async () => ended ?? (out.includes(`routing map reloaded: ${file} version ${v2}`) && 'reloaded'), 20_000);
      expect(ended).toBeNull();
      expect(out).toContain('gateway listening');
    } finally {
      for (const socket of held) socket.destroy();
      silent.close();
    }
  });

  // The same, before the command's dependencies were loaded (a second or more of the start): the
  // signal was held only from start() on, so a SIGHUP then still ended the gateway or the worker.
  // A module hook holds the load of bullmq until the signal has been sent. Not on Node 24: there the
  // process whose load such a hook holds never gets on with it once signalled, so the hook cannot
  // stand for a slow load (without a hook, a SIGHUP 0.1-0.45 s into a worker's start on Node 24
  // leaves it running, checked by hand).
  it.runIf(Number(process.versions.node.split('.')[0]) < 24).each(['main.js', 'worker.js'])(
    'a SIGHUP while %s is still loading its modules does not end it',
    async (entry) => {
      writeMap({ hot: [route('first', one.url)], warm: [], cold });
      const loading = join(dir, 'loading');
      const go = join(dir, 'go');
      const hooks = `import { existsSync, writeFileSync } from 'node:fs';
      let held = false;
      export async function resolve(specifier, context, next) {
        if (specifier === 'bullmq' && !held) {
          held = true;
          writeFileSync(${JSON.stringify(loading)}, '');
          while (!existsSync(${JSON.stringify(go)})) await new Promise((r) => setTimeout(r, 10));
        }
        return next(specifier, context);
      }`;
      // The load held on the hooks' own thread keeps nothing alive on the main one, which then ends
      // (exit 0) at the first event that wakes it, the signal: a timer keeps it up meanwhile.
      const preload = `import { register } from 'node:module'; register(${JSON.stringify(`data:text/javascript,${encodeURIComponent(hooks)}`)});
        setTimeout(() => {}, 30_000);`;
      // A worker alone needs the gateway's Redis (it refuses to start without one).
      const stored = entry === 'worker.js' ? { QUEUE_STORE_URL: TEST_REDIS_URL, REDIS_PREFIX: redis.prefix } : {};
      const child = spawn(
        process.execPath,
        ['--import', `data:text/javascript,${encodeURIComponent(preload)}`, join(root, 'gateway/dist', entry)],
        { cwd: root, env: { PATH: process.env.PATH, PORT: '0', ...env(), ...stored }, stdio: ['ignore', 'pipe', 'pipe'] },
      );
      let out = '';
      child.stdout.on('data', (d) => (out += d));
      let ended: string | null = null;
      child.on('exit', (code, signal) => (ended = `exit ${code} ${signal}`));
      try {
        await until(async () => existsSync(loading));
        const v2 = writeMap({ hot: [route('second', two.url)], warm: [], cold });
        child.kill('SIGHUP');
        writeFileSync(go, '');
        await until(async () => ended ?? (out.includes(`routing map reloaded: ${file} version ${v2}`) && 'reloaded'), 20_000);
        expect(ended).toBeNull();
      } finally {
        child.kill('SIGTERM');
      }
    },
  );

  it('SIGHUP reloads a spawned gateway, and a bad map there is logged with its path and refused', async () => {
    writeMap({ hot: [route('first', one.url)], warm: [], cold });
    const child = spawn(process.execPath, [join(root, 'gateway/dist/main.js')], {
      cwd: root,
      env: { PATH: process.env.PATH, PORT: '0', WORKER: 'off', ...env() },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    const exited = new Promise((r) => child.on('exit', r));
    try {
      const port = await until(async () => /listening on :(\d+)/.exec(out)?.[1]);
      const url = `http://127.0.0.1:${port}`;
      const v2 = writeMap({ hot: [route('second', two.url)], warm: [], cold });
      child.kill('SIGHUP');
      await until(async () => (await health(url)).routes_map.version === v2);
      expect(said(await chat(url))).toBe('from two');

      writeMap({ hot: [{ ...route('second', two.url), baseUrl: 'ftp://nowhere' }], warm: [], cold });
      child.kill('SIGHUP');
      const line = await until(async () => out.split('\n').find((l) => l.includes('routing map reload refused')));
      expect(line).toContain(`${file}: hot[0].baseUrl: expected an http(s) URL`);
      expect((await health(url)).routes_map.version).toBe(v2);
      expect(said(await chat(url))).toBe('from two');
    } finally {
      child.kill('SIGTERM');
      await exited;
    }
  });
});

// `npm run keys` as an operator meets it: what it prints, and how it refuses bad arguments (exit 2,
// naming the argument and what was expected). Against a key file in a temporary directory; the
// Redis store and the CLI's own process are covered in client-keys-jobs.test.ts.
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { beforeEach, describe, expect, it } from 'vitest';
import { keysCli } from '../../gateway/src/keys-cli';
import { refusedUrl } from './fake-provider';

let env: NodeJS.ProcessEnv;
beforeEach(() => {
  env = { CLIENT_KEYS_FILE: join(mkdtempSync(join(tmpdir(), 'keys-cli-')), 'client-keys.json') };
});

async function keys(...args: string[]) {
  const out: string[] = [];
  const err: string[] = [];
  const code = await keysCli(
    args,
    env,
    (l) => out.push(l),
    (l) => err.push(l),
  );
  return { code, out, err: err.join('\n') };
}

describe('npm run keys', () => {
  it('create prints the key once, as the last line; list shows the key id first and never the key; revoke marks it', async () => {
    const made = await keys('create', 'acme', '--rpm=60', '--tpm', '100000', '--models', 'gpt-4o-mini,gpt-4o');
    expect(made.code).toBe(0);
    const key = made.out.at(-1)!;
    expect(key).toMatch(/^gk_[A-Za-z0-9_-]{32}$/);
    expect(made.out.slice(0, -1).join('\n')).not.toContain(key.slice(3));
    const id = /(key_[0-9a-f]{8})/.exec(made.out[0])![1];
    await keys('create', 'beta');
    const listed = await keys('list');
    expect(listed.code).toBe(0);
    expect(listed.out).toHaveLength(2);
    expect(listed.out[0]).toMatch(
      new RegExp(`^${id} tenant=acme rpm=60 tpm=100000 models=gpt-4o-mini,gpt-4o created=\\S+Z last_used=never valid$`),
    );
    expect(listed.out[1]).toMatch(/^key_[0-9a-f]{8} tenant=beta rpm=none tpm=none models=any /);
    expect(listed.out.join('\n')).not.toContain('gk_');
    expect(listed.err).toBe(`2 key(s), 2 valid, in file ${env.CLIENT_KEYS_FILE}`);
    const revoked = await keys('revoke', id);
    expect(revoked).toMatchObject({ code: 0 });
    expect(revoked.out[0]).toMatch(new RegExp(`^revoked ${id} \\(tenant acme\\)`));
    expect((await keys('list')).out[0]).toMatch(/ revoked=\d{4}-\d\d-\d\dT\S+Z$/);
    expect(await keys('revoke', 'key_00000000')).toMatchObject({ code: 1, err: expect.stringContaining('no key key_00000000') });
  });

  // A second revoke said "revoked <id> … at <the first time>", as if it had just revoked it.
  it('revoking a key revoked before says so and keeps its time, exit 0, by id as by the key', async () => {
    const made = (await keys('create', 'acme')).out;
    const key = made.at(-1)!;
    const id = made[0].split(' ')[1];
    const first = await keys('revoke', id);
    expect(first.out[0]).toMatch(new RegExp(`^revoked ${id} \\(tenant acme\\) at \\S+Z: every gateway refuses it within a few seconds$`));
    const at = first.out[0].split(' ')[5].replace(/:$/, '');
    for (const again of [id, key]) {
      const r = await keys('revoke', again);
      expect([r.code, r.out]).toEqual([0, [`already revoked ${id} (tenant acme) at ${at}: every gateway refuses it; nothing changed`]]);
    }
  });

  it('revoke takes the key itself, for a leaked key whose id nobody noted, and never prints it, not even when it is cut short', async () => {
    const a = (await keys('create', 'acme')).out.at(-1)!;
    const b = (await keys('create', 'acme')).out.at(-1)!;
    const revoked = await keys('revoke', a);
    expect(revoked.code).toBe(0);
    expect(revoked.out[0]).toMatch(/^revoked key_[0-9a-f]{8} \(tenant acme\)/);
    const listed = (await keys('list')).out;
    expect(listed.filter((l) => l.includes('revoked='))).toHaveLength(1);
    expect(listed.find((l) => l.includes('revoked='))).toContain(revoked.out[0].split(' ')[1]);
    const unknown = await keys('revoke', `gk_${'A'.repeat(32)}`);
    expect(unknown).toMatchObject({ code: 1, out: [] });
    expect(unknown.err).toMatch(/^no key of that value in file /);
    for (const cut of [b.slice(0, -1), `${b} extra`]) {
      const wrong = await keys(...['revoke', ...cut.split(' ')]);
      expect(wrong.code).toBe(2);
      expect(wrong.err).toMatch(
        /^key id: expected one id .* or the key itself, got text holding "gk_" that is not a whole key \(not shown\)/,
      );
      expect(wrong.err).not.toContain(b.slice(3, -1));
    }
    // Pasted with what stood around it where it leaked: an .env line, a header, a JSON string.
    for (const pasted of [`OPENAI_API_KEY=${b}`, `Bearer ${b}`, `"${b}",`]) {
      const wrong = await keys('revoke', pasted);
      expect(wrong.code).toBe(2);
      expect(wrong.err).not.toContain(b.slice(3, -1));
    }
    for (const r of [revoked, unknown]) expect([...r.out, r.err].join('\n')).not.toMatch(/gk_[A-Za-z0-9_-]{4}/);
  });

  it('a key given where none is taken (after list, as the command, in create) is refused without printing it', async () => {
    const key = (await keys('create', 'acme')).out.at(-1)!;
    for (const args of [['list', key], [key], ['create', `Bearer ${key}`], ['create', 'acme', key], ['create', 'acme', '--rpm', key]]) {
      const r = await keys(...args);
      expect(r.code).toBe(2);
      expect(r.err).toContain('gk_… (not shown)');
      expect(r.err).not.toContain(key.slice(3));
      expect(r.out).toEqual([]);
    }
  });

  // A key pasted as the tenant was made into one: printed, kept in plain text, written into every meter event and log line.
  it('a key given as the tenant of create is refused, naming the argument, without printing it or making a key', async () => {
    const key = (await keys('create', 'acme')).out.at(-1)!;
    for (const tenant of [key, key.slice(0, 20)]) {
      const r = await keys('create', tenant, '--rpm', '60');
      expect(r.code).toBe(2);
      expect(r.err).toMatch(/^tenant: got a client key \(gk_…, not shown\) where the tenant's name goes/);
      expect(r.err).not.toContain(tenant.slice(3));
      expect(r.out).toEqual([]);
    }
    expect((await keys('list')).out).toHaveLength(1);
  });

  // It was made a model name: printed by create and list, kept in plain text, and quoted to the new key's client in every model_not_allowed.
  it('a key given in create --models is refused, without printing it or making a key', async () => {
    const key = (await keys('create', 'acme')).out.at(-1)!;
    for (const models of [key, `gpt-4o,${key}`, `--models=${key}`]) {
      const r = await keys('create', 'beta', ...(models.startsWith('--') ? [models] : ['--models', models]));
      expect(r.code).toBe(2);
      expect(r.err).toMatch(/^--models: got a client key \(gk_…, not shown\) where a model name goes/);
      expect(r.err).not.toContain(key.slice(3));
      expect(r.out).toEqual([]);
    }
    expect((await keys('list')).out).toHaveLength(1);
  });

  it.each([
    [['create'], /^tenant: expected the tenant/],
    [['create', '--rpm', '5'], /^tenant: expected the tenant/],
    [['create', 'a b'], /^tenant: expected 1-64 letters, digits, \. _ @ - .*got "a b"/],
    [['create', 'acme', '--rpm'], /^--rpm: expected a whole number from 1 to 1000000000, got nothing/],
    [['create', 'acme', '--rpm', '0'], /^--rpm: expected a whole number .* got "0"/],
    [['create', 'acme', '--tpm=1.5'], /^--tpm: expected a whole number .* got "1.5"/],
    [['create', 'acme', '--models', 'a,,b'], /^--models: expected model names separated by commas .* got "a,,b"/],
    [['create', 'acme', '--rpm', '60', '--rpm=600'], /^--rpm: given twice; give it once/],
    [['create', 'acme', '--models', 'a', '--models', 'b'], /^--models: given twice; give it once/],
    [['create', 'acme', '--limit', '5'], /^option "--limit": create takes a tenant and --rpm, --tpm, --models/],
    [['create', 'acme', 'extra'], /^argument "extra": create takes/],
    [['list', 'all'], /^list: expected no arguments, got "all"/],
    [['revoke'], /^key id: expected one id as list shows it .* got nothing/],
    [['revoke', 'key_12345678', 'extra'], /^key id: expected one id .* got "key_12345678 extra"/],
    [['rotate'], /^unknown command "rotate": expected create, list or revoke/],
    [[], /^command: expected create, list or revoke/],
  ])('%j → exit 2, naming the argument', async (args, message) => {
    const r = await keys(...args);
    expect(r.code).toBe(2);
    expect(r.err).toMatch(message);
    expect(r.err).toContain('usage: npm run keys -- create <tenant>');
    expect(r.out).toEqual([]);
  });

  it('refuses an environment that would keep keys where the gateways do not read them (exit 2), and an unreachable store is exit 1', async () => {
    env = { ...env, NODE_ENV: 'production' };
    expect(await keys('list')).toMatchObject({
      code: 2,
      err: expect.stringMatching(/^QUEUE_STORE_URL: required with NODE_ENV=production/),
    });
    env = { REDIS_PREFIX: 'bad prefix' };
    expect(await keys('list')).toMatchObject({ code: 2, err: expect.stringMatching(/REDIS_PREFIX: expected 1-64 letters/) });
    env = { QUEUE_STORE_URL: (await refusedUrl()).replace(/^http:\/\/(.*)\/v1$/, 'redis://$1/9') };
    const down = await keys('create', 'acme');
    expect(down.code).toBe(1);
    // Named as the store and its setting (it was ioredis's "Reached the max retries per request limit" alone).
    expect(down.err).toMatch(/^key store: the store at QUEUE_STORE_URL did not answer: .*ECONNREFUSED/);
    expect(down.out).toEqual([]);
  });

  it('names a bad argument (exit 2) before the store is asked, also when the store is away', async () => {
    env = { QUEUE_STORE_URL: (await refusedUrl()).replace(/^http:\/\/(.*)\/v1$/, 'redis://$1/9') };
    const typo = await keys('create', 'acme', '--rmp', '600');
    expect(typo.code).toBe(2);
    expect(typo.err).toMatch(/^option "--rmp": create takes a tenant and --rpm, --tpm, --models/);
    expect(typo.err).not.toContain('QUEUE_STORE_URL');
    expect(await keys('revoke', 'key_123')).toMatchObject({ code: 2, err: expect.stringMatching(/^key id: expected one id/) });
    expect(await keys('list', 'all')).toMatchObject({ code: 2, err: expect.stringMatching(/^list: expected no arguments/) });
  });

  it('a key file of another shape is named with what was expected (exit 1), and is left as it was', async () => {
    for (const text of ['{}\n', '[]\n', '{"keys": [null]}\n', '{"hot": []}\n']) {
      writeFileSync(env.CLIENT_KEYS_FILE!, text);
      for (const args of [['list'], ['create', 'acme'], ['revoke', 'key_00000000']]) {
        const r = await keys(...args);
        expect(r.code, `${text} ${args.join(' ')}`).toBe(1);
        expect(r.err).toBe(`key store: ${env.CLIENT_KEYS_FILE}: expected {"keys": [records]} as npm run keys writes it`);
        expect(r.out).toEqual([]);
      }
      expect(readFileSync(env.CLIENT_KEYS_FILE!, 'utf8')).toBe(text);
    }
  });
});

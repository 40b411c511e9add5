// One contract for both client key stores: Redis (real, its own prefix, removed afterwards) and the
// file under a temporary directory. Whatever the gateway and the CLI rely on holds for both.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, utimesSync, writeFileSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished, vi } from 'vitest';
import { createKey, hashKey, type ClientKey, type KeyStore } from '../../gateway/src/client-keys';
import { FileKeyStore } from '../../gateway/src/client-keys-file';
import { RedisKeyStore } from '../../gateway/src/client-keys-redis';
import { redisDump } from './redis-dump';
import { redisUnderPrefix } from '../redis-prefix';

// The files the stores read, to count reads of the keys file (passed through unchanged).
const fileReads = vi.hoisted(() => [] as string[]);
vi.mock('node:fs/promises', async (original) => {
  const fs = await original<typeof import('node:fs/promises')>();
  const readFile = ((file: string, ...rest: []) => (fileReads.push(String(file)), fs.readFile(file, ...rest))) as typeof fs.readFile;
  return { ...fs, readFile };
});

const db = redisUnderPrefix('keystore');
const prefix = db.prefix;

interface Subject {
  store: KeyStore;
  /** Everything the store wrote, as text. */
  raw: () => Promise<string>;
  /** The same keys as another gateway opens them. */
  again: () => KeyStore;
}

const subjects: Array<[string, () => Subject]> = [
  [
    'Redis',
    () => ({
      store: new RedisKeyStore(db.redis, prefix),
      raw: () => redisDump(db.redis, prefix),
      again: () => new RedisKeyStore(db.redis, prefix),
    }),
  ],
  [
    'file',
    () => {
      const dir = mkdtempSync(join(tmpdir(), 'keystore-'));
      const raw = async () =>
        readdirSync(dir)
          .map((f) => readFileSync(join(dir, f), 'utf8'))
          .join('\n');
      return { store: new FileKeyStore(join(dir, 'client-keys.json')), raw, again: () => new FileKeyStore(join(dir, 'client-keys.json')) };
    },
  ],
];

describe.each(subjects)('client key store: %s', (_name, make) => {
  it('keeps what create made: a recognisable random key, its record found by the hash and listed by id', async () => {
    const { store } = make();
    const a = await createKey(store, { tenant: 'acme', rpm: 60, models: ['gpt-4o-mini'] });
    const b = await createKey(store, { tenant: 'beta' });
    expect(a.key).toMatch(/^gk_[A-Za-z0-9_-]{32}$/);
    expect(a.record.id).toMatch(/^key_[0-9a-f]{8}$/);
    expect(a.key).not.toBe(b.key);
    const [foundA, unknown, foundB] = await store.find([hashKey(a.key), hashKey('gk_nope'), hashKey(b.key)]);
    expect(foundA).toMatchObject({ id: a.record.id, tenant: 'acme', rpm: 60, tpm: null, models: ['gpt-4o-mini'], revoked: null });
    expect(unknown).toBeNull();
    expect(foundB).toMatchObject({ id: b.record.id, tenant: 'beta', rpm: null, models: [] });
    const listed = await store.list();
    expect(listed.map((k) => k.id).sort()).toEqual([a.record.id, b.record.id].sort());
    expect(await store.find([])).toEqual([]);
  });

  it('refuses a record whose id is taken, and keeps the first', async () => {
    const { store } = make();
    const a = await createKey(store, { tenant: 'acme' });
    const clash: ClientKey = { ...a.record, hash: hashKey('gk_other'), tenant: 'evil' };
    expect(await store.add(clash)).toBe(false);
    expect((await store.list()).map((k) => k.tenant)).toEqual(['acme']);
    expect((await store.find([hashKey('gk_other')]))[0]).toBeNull();
  });

  it('creates and revokes at once (several npm run keys together): every key made is kept, a revoked key stays revoked', async () => {
    const { store } = make();
    const first = await createKey(store, { tenant: 'acme' });
    const [revoked, ...made] = await Promise.all([
      store.revoke(first.record.id, new Date('2026-01-01T00:00:00Z')),
      ...Array.from({ length: 8 }, (_, i) => createKey(store, { tenant: `t${i}` })),
    ]);
    expect(revoked?.revoked).toBe('2026-01-01T00:00:00.000Z');
    const listed = await store.list();
    expect(listed.map((k) => k.id).sort()).toEqual([first.record.id, ...made.map((m) => m.record.id)].sort());
    expect(listed.find((k) => k.id === first.record.id)?.revoked).toBe('2026-01-01T00:00:00.000Z');
    expect((await store.find(made.map((m) => hashKey(m.key)))).every((k) => k && !k.revoked)).toBe(true);
  });

  it('revokes by id once (the first time stands); an unknown id is null', async () => {
    const { store } = make();
    const a = await createKey(store, { tenant: 'acme' });
    const first = await store.revoke(a.record.id, new Date('2026-01-01T00:00:00Z'));
    expect(first).toMatchObject({ id: a.record.id, revoked: '2026-01-01T00:00:00.000Z' });
    expect((await store.revoke(a.record.id, new Date('2026-02-01T00:00:00Z')))?.revoked).toBe('2026-01-01T00:00:00.000Z');
    expect((await store.find([hashKey(a.key)]))[0]?.revoked).toBe('2026-01-01T00:00:00.000Z');
    expect(await store.revoke('key_00000000', new Date())).toBeNull();
  });

  it('revokes at once (two operators, the same key): one time stands, and both are told that time', async () => {
    const { store } = make();
    const a = await createKey(store, { tenant: 'acme' });
    const told = await Promise.all([
      store.revoke(a.record.id, new Date('2026-01-01T00:00:00Z')),
      store.revoke(a.record.id, new Date('2026-02-01T00:00:00Z')),
    ]);
    const kept = (await store.find([hashKey(a.key)]))[0]?.revoked;
    expect(kept).toMatch(/^2026-0[12]-01T00:00:00.000Z$/);
    expect(told.map((r) => r?.revoked)).toEqual([kept, kept]);
  });

  it('writes last-used times in batches, shown by list', async () => {
    const { store } = make();
    const a = await createKey(store, { tenant: 'acme' });
    const b = await createKey(store, { tenant: 'beta' });
    await store.touch(new Map([[a.record.id, Date.parse('2026-03-01T10:00:00Z')]]));
    await store.touch(new Map([[b.record.id, Date.parse('2026-03-01T11:00:00Z')]]));
    await store.touch(new Map());
    const used = Object.fromEntries((await store.list()).map((k) => [k.tenant, k.lastUsed]));
    expect(used).toEqual({ acme: '2026-03-01T10:00:00.000Z', beta: '2026-03-01T11:00:00.000Z' });
  });

  // A batch sent late (kept through an outage, a write slowed) put a key's last use back; gateways
  // sharing the file each wrote the times they had read, one dropping another's.
  it('a last use never goes back, and batches written at once from two gateways both count', async () => {
    const { store, again } = make();
    const [a, b, c] = [
      await createKey(store, { tenant: 'acme' }),
      await createKey(store, { tenant: 'beta' }),
      await createKey(store, { tenant: 'gamma' }),
    ];
    await store.touch(new Map([[a.record.id, Date.parse('2026-03-01T12:00:00Z')]]));
    await store.touch(new Map([[a.record.id, Date.parse('2026-03-01T10:00:00Z')]]));
    const other = again();
    await Promise.all([
      store.touch(new Map([[b.record.id, Date.parse('2026-03-01T11:00:00Z')]])),
      other.touch(new Map([[c.record.id, Date.parse('2026-03-01T11:30:00Z')]])),
    ]);
    const used = Object.fromEntries((await store.list()).map((k) => [k.tenant, k.lastUsed]));
    expect(used).toEqual({ acme: '2026-03-01T12:00:00.000Z', beta: '2026-03-01T11:00:00.000Z', gamma: '2026-03-01T11:30:00.000Z' });
  });

  it('holds no key in plain text, only its SHA-256', async () => {
    const { store, raw } = make();
    const made = [await createKey(store, { tenant: 'acme' }), await createKey(store, { tenant: 'beta' })];
    await store.touch(new Map([[made[0].record.id, Date.now()]]));
    await store.revoke(made[1].record.id, new Date());
    const text = await raw();
    expect(text).toContain(made[0].record.hash); // the dump is real
    for (const { key } of made) {
      expect(text).not.toContain(key);
      expect(text).not.toContain(key.slice(3)); // nor its random part
    }
    expect(text).not.toContain('gk_');
  });
});

describe('client key store: file', () => {
  it('a lock left by a killed run is taken over by one run at a time: every key made at once after it is kept', async () => {
    for (let round = 0; round < 30; round++) {
      const file = join(mkdtempSync(join(tmpdir(), 'keystore-')), 'client-keys.json');
      writeFileSync(`${file}.lock`, ''); // a CLI killed while it held the lock, a minute ago
      const aMinuteAgo = new Date(Date.now() - 60_000);
      utimesSync(`${file}.lock`, aMinuteAgo, aMinuteAgo);
      const runs = Array.from({ length: 16 }, () => new FileKeyStore(file)); // npm run keys, 16 at once
      const made = await Promise.all(runs.map((store, i) => createKey(store, { tenant: `t${i}` })));
      const listed = await runs[0].list();
      expect(listed.map((k) => k.id).sort()).toEqual(made.map((m) => m.record.id).sort());
    }
  });

  it('a run that holds the lock longer than a change takes keeps it: another change waits instead of breaking in', async () => {
    const file = join(mkdtempSync(join(tmpdir(), 'keystore-')), 'client-keys.json');
    const aMinuteAgo = Date.now() - 60_000;
    writeFileSync(`${file}.lock`, `${process.pid}\n${hostname()}\n${aMinuteAgo}\n`); // a run stopped with Ctrl-Z, still alive
    utimesSync(`${file}.lock`, new Date(aMinuteAgo), new Date(aMinuteAgo));
    await expect(createKey(new FileKeyStore(file, 200), { tenant: 'acme' })).rejects.toThrow(/held by another change of the keys/);
    expect(await new FileKeyStore(file).list()).toEqual([]);
    expect(readFileSync(`${file}.lock`, 'utf8')).toContain(`${process.pid}\n`); // the holder's lock is still its own
  });

  // The wait for the lock was bounded on the wall clock: set back an hour while a change waited,
  // `npm run keys` hung for that hour instead of saying who holds the lock.
  it("a change waiting for a held lock gives up at its bound, the machine's clock set back or not", async () => {
    const file = join(mkdtempSync(join(tmpdir(), 'keystore-')), 'client-keys.json');
    writeFileSync(`${file}.lock`, `${process.pid}\n${hostname()}\n${Date.now()}\n`); // a run still under way
    const wall = Date.now.bind(Date);
    let read = 0;
    vi.spyOn(Date, 'now').mockImplementation(() => wall() - (read++ > 0 ? 3_600_000 : 0)); // back, once the wait began
    onTestFinished(() => void vi.restoreAllMocks());
    await expect(createKey(new FileKeyStore(file, 200), { tenant: 'acme' })).rejects.toThrow(/held by another change of the keys/);
  });

  // Each key not cached (a flood of made-up ones) read and parsed the whole file: 2.4 ms of CPU a
  // request with 1,000 keys, a gateway's core at 365 requests a second.
  it('a flood of made-up keys reads the file once, and a change to it (a revocation, a key made, a hand edit) is seen on the next lookup', async () => {
    const file = join(mkdtempSync(join(tmpdir(), 'keystore-')), 'client-keys.json');
    const gateway = new FileKeyStore(file);
    const made = await createKey(new FileKeyStore(file), { tenant: 'acme' });
    const readsOfKeys = () => fileReads.filter((f) => f === file).length;
    const before = readsOfKeys();
    for (let i = 0; i < 1000; i++) expect(await gateway.find([hashKey(`gk_${String(i).padStart(32, '0')}`)])).toEqual([null]);
    expect(readsOfKeys() - before).toBe(1);
    expect((await gateway.find([made.record.hash]))[0]).toMatchObject({ id: made.record.id, revoked: null });
    await new FileKeyStore(file).revoke(made.record.id, new Date());
    expect((await gateway.find([made.record.hash]))[0]?.revoked).toMatch(/Z$/);
    const other = await createKey(new FileKeyStore(file), { tenant: 'beta' });
    expect((await gateway.find([other.record.hash]))[0]?.tenant).toBe('beta');
    writeFileSync(file, readFileSync(file, 'utf8').replace('"beta"', '"gamma"')); // edited in place
    expect((await gateway.find([other.record.hash]))[0]?.tenant).toBe('gamma');
    writeFileSync(file, '{"keys": ['); // broken: said, not answered from the copy read before
    await expect(gateway.find([other.record.hash])).rejects.toThrow(file);
  });

  it('a lock whose holder was killed a moment ago is taken over without waiting for it to age', async () => {
    const file = join(mkdtempSync(join(tmpdir(), 'keystore-')), 'client-keys.json');
    const killed = spawnSync(process.execPath, ['-e', '']).pid; // a run that no longer exists
    writeFileSync(`${file}.lock`, `${killed}\n${hostname()}\n${Date.now()}\n`);
    const made = await createKey(new FileKeyStore(file, 200), { tenant: 'acme' });
    expect((await new FileKeyStore(file).list()).map((k) => k.id)).toEqual([made.record.id]);
  });
});

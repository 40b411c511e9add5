// The key check's cache against a real (file) store, counted: what a request costs, when a
// revocation is seen, and what happens while the store cannot be read.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ClientAuth, type AuthResult } from '../../gateway/src/client-auth';
import { createKey, type KeyStore } from '../../gateway/src/client-keys';
import { FileKeyStore } from '../../gateway/src/client-keys-file';

/** A file store whose reads and writes are counted, and which can be made unreachable (failing, or never answering). */
function countedStore() {
  const inner = new FileKeyStore(join(mkdtempSync(join(tmpdir(), 'auth-')), 'client-keys.json'));
  const calls = { find: 0, touch: 0 };
  let down: false | 'fails' | 'hangs' = false;
  const unreachable = () => (down === 'hangs' ? new Promise<never>(() => undefined) : Promise.reject(new Error('connection refused')));
  const store: KeyStore = {
    where: inner.where,
    add: (r) => inner.add(r),
    list: () => inner.list(),
    revoke: (id, at) => inner.revoke(id, at),
    find(hashes) {
      calls.find++;
      return down ? unreachable() : inner.find(hashes);
    },
    touch(used) {
      calls.touch++;
      return down ? unreachable() : inner.touch(used);
    },
  };
  return { store, calls, setDown: (v: typeof down) => (down = v) };
}

const bearer = (key: string) => `Bearer ${key}`;
const settle = async (r: AuthResult | Promise<AuthResult>) => await r;

describe('client key check', () => {
  it('reads a key from the store once, then answers from memory without a promise', async () => {
    const { store, calls } = countedStore();
    const { key, record } = await createKey(store, { tenant: 'acme' });
    const auth = new ClientAuth(store, { warn: () => undefined });
    const first = auth.check(bearer(key));
    expect(first).toBeInstanceOf(Promise);
    expect(await first).toMatchObject({ ok: true, key: { id: record.id, tenant: 'acme' } });
    for (let i = 0; i < 1000; i++) {
      const again = auth.check(bearer(key));
      expect(again).not.toBeInstanceOf(Promise);
      expect((again as AuthResult).ok).toBe(true);
    }
    expect((auth.check(`bearer  ${key} `) as AuthResult).ok).toBe(true); // the scheme is case-insensitive (RFC 9110)
    expect(calls.find).toBe(1);
  });

  it('refuses a missing, malformed, unknown or revoked key with 401 invalid_api_key; a malformed one never reaches the store', async () => {
    const { store, calls } = countedStore();
    const { key, record } = await createKey(store, { tenant: 'acme' });
    await store.revoke(record.id, new Date());
    const auth = new ClientAuth(store, { warn: () => undefined });
    const answers = await Promise.all(
      [undefined, 'Basic abc', 'Bearer ', 'Bearer sk-not-ours', bearer(`gk_${'A'.repeat(32)}`), bearer(key)].map((h) =>
        settle(auth.check(h)),
      ),
    );
    for (const a of answers) expect(a).toMatchObject({ ok: false, status: 401, error: { error: { code: 'invalid_api_key' } } });
    expect(calls.find).toBe(2); // the well-formed unknown key and the revoked one
    const messages = answers.map((a) => (a.ok ? '' : a.error.error.message));
    expect(messages[0]).toMatch(/no API key/);
    expect(messages[5]).toMatch(/revoked/);
    expect(messages.join(' ')).not.toContain(key);
  });

  it('sees a revocation at the next refresh, and does not trust an entry older than maxAgeMs without reading it again', async () => {
    const { store, calls } = countedStore();
    const clock = { ms: 1_000_000 };
    const a = await createKey(store, { tenant: 'acme' });
    const auth = new ClientAuth(store, { warn: () => undefined, now: () => clock.ms, refreshMs: 2000 });
    expect((await settle(auth.check(bearer(a.key)))).ok).toBe(true);
    await store.revoke(a.record.id, new Date());
    expect((auth.check(bearer(a.key)) as AuthResult).ok).toBe(true); // cached until the refresh
    clock.ms += 2000;
    await auth.refresh(); // what the timer does every 2 s
    expect(auth.check(bearer(a.key))).toMatchObject({ ok: false, status: 401 });
    // The timer fell behind: an entry last read more than 4 s ago is read again before it is trusted.
    const b = await createKey(store, { tenant: 'beta' });
    expect((await settle(auth.check(bearer(b.key)))).ok).toBe(true);
    await store.revoke(b.record.id, new Date());
    clock.ms += 4001;
    const before = calls.find;
    const late = auth.check(bearer(b.key));
    expect(late).toBeInstanceOf(Promise);
    expect(await late).toMatchObject({ ok: false, status: 401 });
    expect(calls.find).toBe(before + 1);
  });

  it('writes last-used times in one batch per refresh, not per request', async () => {
    const { store, calls } = countedStore();
    const { key, record } = await createKey(store, { tenant: 'acme' });
    const auth = new ClientAuth(store, { warn: () => undefined });
    for (let i = 0; i < 100; i++) await settle(auth.check(bearer(key)));
    expect(calls.touch).toBe(0);
    await auth.refresh();
    expect(calls.touch).toBe(1);
    expect((await store.list()).find((k) => k.id === record.id)?.lastUsed).toMatch(/^\d{4}-\d\d-\d\dT/);
    await auth.close();
  });

  it.each(['fails', 'hangs'] as const)(
    'store unreachable (%s): a key already checked keeps its answer, a new one gets 503, one warning per outage',
    async (how) => {
      const { store, setDown } = countedStore();
      const clock = { ms: 1_000_000 };
      const warnings: string[] = [];
      const known = await createKey(store, { tenant: 'acme' });
      const fresh = await createKey(store, { tenant: 'beta' });
      const auth = new ClientAuth(store, { warn: (m) => warnings.push(m), now: () => clock.ms, lookupTimeoutMs: 100 });
      expect((await settle(auth.check(bearer(known.key)))).ok).toBe(true);
      setDown(how);
      clock.ms += 10_000;
      await auth.refresh(); // returns even when the store never answers
      const meanwhile = auth.check(bearer(known.key));
      expect(meanwhile).not.toBeInstanceOf(Promise); // no request waits on a store known to be down
      expect((meanwhile as AuthResult).ok).toBe(true);
      expect(await settle(auth.check(bearer(fresh.key)))).toMatchObject({
        ok: false,
        status: 503,
        error: { error: { code: 'key_store_unavailable' } },
      });
      expect(warnings).toHaveLength(1);
      expect(warnings[0]).toMatch(/client key store unreachable/);
      setDown(false);
      expect((await settle(auth.check(bearer(fresh.key)))).ok).toBe(true);
      expect(warnings[1]).toMatch(/reachable again/);
      await auth.close();
    },
  );
});

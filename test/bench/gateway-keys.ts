// Client keys in `npm run bench:gateway`: what GATEWAY_AUTH=keys costs against the same gateway open
// (interleaved runs, gateway-ab.ts). Goal: keys within 3 % of open.
import { join } from 'node:path';
import { ClientAuth } from '../../gateway/src/client-auth';
import { createKey, type KeyStore } from '../../gateway/src/client-keys';
import { FileKeyStore } from '../../gateway/src/client-keys-file';
import { interleaved, startStub } from './gateway-ab';
import { scratchDir } from './scratch';

/** The key check alone, in this process: µs per check of a cached key (what each request pays). */
async function checkCost(store: KeyStore, key: string, n = 200_000): Promise<number> {
  const auth = new ClientAuth(store, { warn: () => undefined });
  const header = `Bearer ${key}`;
  await auth.check(header);
  for (let i = 0; i < 20_000; i++) auth.check(header); // warm-up (JIT)
  const started = performance.now();
  for (let i = 0; i < n; i++) auth.check(header);
  return ((performance.now() - started) * 1000) / n;
}

export async function keysVersusOpen(rounds = 8, seconds = 4): Promise<string[]> {
  const stub = await startStub();
  const file = join(scratchDir('bench-keys-'), 'client-keys.json');
  const store = new FileKeyStore(file);
  const { key } = await createKey(store, { tenant: 'bench' });
  try {
    const lines = await interleaved(stub.url, {
      base: { name: 'open', env: { GATEWAY_AUTH: 'open' } },
      variant: { name: 'keys', env: { GATEWAY_AUTH: 'keys', CLIENT_KEYS_FILE: file }, headers: { authorization: `Bearer ${key}` } },
      goal: 0.97,
      rounds,
      seconds,
    });
    return [...lines, `the key check alone (a cached key): ${(await checkCost(store, key)).toFixed(2)} µs per request`];
  } finally {
    stub.stop();
  }
}

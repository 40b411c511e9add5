/**
 * Client keys: who may call the gateway's /v1 endpoints, and for which tenant. A key is `gk_` + 32
 * url-safe random characters, shown once when made; only its SHA-256 is kept, next to a short key
 * id (`key_` + 8 hex, what operators see, revoke and log), the tenant, the key's limits and its
 * times. One interface, kept in Redis (every instance sees the same keys) or in a file under
 * `.data/` (client-keys-redis.ts, client-keys-file.ts).
 */
import { hash, randomBytes } from 'node:crypto';

export interface ClientKey {
  /** `key_` + 8 hex: shown by `list`, used by `revoke` and in logs; says nothing about the key. */
  id: string;
  /** SHA-256 of the key, hex. The key itself is never stored. */
  hash: string;
  tenant: string;
  /** Requests per minute; null: no limit of the key's own. */
  rpm: number | null;
  /** Tokens (input + output) per minute; null: no limit of the key's own. */
  tpm: number | null;
  /** Models the key may ask for; empty: any. */
  models: string[];
  created: string;
  lastUsed: string | null;
  /** When it was revoked; null while it is valid. */
  revoked: string | null;
}

export interface KeyStore {
  /** Where the keys are kept, for logs and the CLI (never a password). */
  readonly where: string;
  /** Stores a new record; false when its id is taken (the caller draws another). */
  add(record: ClientKey): Promise<boolean>;
  list(): Promise<ClientKey[]>;
  /** The records of these key hashes, in order (null: no such key). One round trip for all. */
  find(hashes: string[]): Promise<Array<ClientKey | null>>;
  /** Marks the key revoked; the record after, or null when there is no key with this id. */
  revoke(id: string, at: Date): Promise<ClientKey | null>;
  /** Last-used times (key id → epoch ms), written in batches off the request path. */
  touch(used: Map<string, number>): Promise<void>;
}

/** Tenants go into limiter keys and meter CSVs: a plain name. */
export const TENANT_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$/;
const KEY_PATTERN = /^gk_[A-Za-z0-9_-]{32}$/;
export const KEY_LENGTH = 35;

export const hashKey = (key: string): string => hash('sha256', key, 'hex');

/** Whether a bearer token has the shape of a key (anything else is refused without a store lookup). */
export const looksLikeKey = (token: string): boolean => KEY_PATTERN.test(token);

export interface KeySpec {
  tenant: string;
  rpm?: number | null;
  tpm?: number | null;
  models?: string[];
}

/** A new key and its record; the key is returned to be shown once and then forgotten. */
function makeKey(spec: KeySpec, now = new Date()): { key: string; record: ClientKey } {
  const key = `gk_${randomBytes(24).toString('base64url')}`;
  const record: ClientKey = {
    id: `key_${randomBytes(4).toString('hex')}`,
    hash: hashKey(key),
    tenant: spec.tenant,
    rpm: spec.rpm ?? null,
    tpm: spec.tpm ?? null,
    models: spec.models ?? [],
    created: now.toISOString(),
    lastUsed: null,
    revoked: null,
  };
  return { key, record };
}

/** Makes a key and stores it, drawing another id on the (rare) collision. */
export async function createKey(store: KeyStore, spec: KeySpec): Promise<{ key: string; record: ClientKey }> {
  for (let i = 0; i < 5; i++) {
    const made = makeKey(spec);
    if (await store.add(made.record)) return made;
  }
  throw new Error('could not draw an unused key id in 5 tries');
}

/**
 * Checks the client key of a /v1 request (GATEWAY_AUTH=keys), cheaply enough for the hot path.
 *
 * Keys seen are cached in process, by the SHA-256 of the key: a request costs one hash and a map
 * lookup, no store round trip. Looking up by hash reveals nothing useful about keys (a key whose
 * hash shares a prefix with another's is a preimage search); what the store answers is checked
 * against the hash in constant time before it is trusted. Every `refreshMs` (2 s) all cached keys
 * are read again in one store call, so a revocation reaches every instance within about 2 s; an
 * entry older than `maxAgeMs` (4 s: the timer fell behind) is not trusted and the request waits
 * for the store. A refresh is skipped while a store call of the last one is unanswered (commands
 * wait for Redis rather than fail: they would pile up and all be sent when it answers). Last-used times are gathered here and written in one batch per refresh. A store
 * that does not answer within `lookupTimeoutMs` (1 s) counts as unreachable (Redis commands wait
 * for a reconnection rather than fail): requests are not held by it. A request with a time-to-answer
 * waits less: a quarter of it (as its limits), so that its 503 comes within it.
 */
import { timingSafeEqual } from 'node:crypto';
import { hashKey, KEY_LENGTH, looksLikeKey, type ClientKey, type KeyStore } from './client-keys';
import { openAiError, type OpenAiError } from './errors';
import type { Headers } from './request-context';
import { within } from './within';

export type AuthResult =
  { ok: true; key: ClientKey } | { ok: false; status: 401 | 503; error: OpenAiError; headers?: Record<string, string> };

const refused = (message: string): AuthResult => ({
  ok: false,
  status: 401,
  error: openAiError(message, 'invalid_request_error', null, 'invalid_api_key'),
});
const MISSING = refused('no API key: send Authorization: Bearer <key> with a key the operator of this gateway gave you');
const INVALID = refused('invalid API key: not a key of this gateway');
const REVOKED = refused('this API key was revoked: ask the operator of this gateway for a new one');
const UNAVAILABLE: AuthResult = {
  ok: false,
  status: 503,
  error: openAiError('the client key store is unreachable; try again shortly', 'api_error', null, 'key_store_unavailable'),
  headers: { 'retry-after': '1' }, // as every other store's 503: the client waits for the store, not its own guess
};
/** The least a request waits for a lookup: a tiny time-to-answer must not refuse a key a Redis that is well knows. */
const LOOKUP_WAIT_MIN_MS = 50;
/** Unknown keys are remembered too (a made-up key sent again costs no store call), up to this many entries. */
const MAX_ENTRIES = 10_000;

interface Entry {
  /** null: no such key. */
  key: ClientKey | null;
  /** When the store was asked (not answered): a revocation after it is seen on the next read. */
  checkedAt: number;
  seenAt: number;
  /** The answer for a valid key, made once per read of the store. */
  accepted?: AuthResult;
}

export interface ClientAuthOptions {
  warn: (message: string) => void;
  now?: () => number;
  refreshMs?: number;
  maxAgeMs?: number;
  /** Keys unused this long leave the cache. */
  idleMs?: number;
  lookupTimeoutMs?: number;
}

/** The token of `Bearer <token>` (the scheme is case-insensitive, RFC 9110); '' when there is none. */
function bearerToken(authorization: string | undefined): string {
  if (!authorization) return '';
  if (authorization.startsWith('Bearer ')) return authorization.slice(7).trim();
  return /^bearer /i.test(authorization) ? authorization.slice(7).trim() : '';
}

function sameHash(a: string, b: string): boolean {
  const x = Buffer.from(a, 'hex');
  const y = Buffer.from(b, 'hex');
  return x.length === y.length && timingSafeEqual(x, y);
}

export class ClientAuth {
  private readonly cache = new Map<string, Entry>();
  private readonly pending = new Map<string, Promise<Entry>>();
  private used = new Map<string, number>();
  private readonly now: () => number;
  private readonly refreshMs: number;
  private readonly maxAgeMs: number;
  private readonly idleMs: number;
  private readonly lookupTimeoutMs: number;
  private timer: NodeJS.Timeout | null = null;
  private refreshing: Promise<void> | null = null;
  /** Store calls of refreshes that gave up waiting and are not answered yet. */
  private unanswered = 0;
  private down = false;

  constructor(
    private readonly store: KeyStore,
    private readonly options: ClientAuthOptions,
  ) {
    this.now = options.now ?? Date.now;
    this.refreshMs = options.refreshMs ?? 2000;
    this.maxAgeMs = options.maxAgeMs ?? 2 * this.refreshMs;
    this.idleMs = options.idleMs ?? 600_000;
    this.lookupTimeoutMs = options.lookupTimeoutMs ?? 1000;
  }

  /** Starts the background refresh (not started by tests that drive `refresh` themselves). */
  start(): this {
    this.timer ??= setInterval(() => void this.refresh(), this.refreshMs).unref();
    return this;
  }

  /**
   * The key of an `Authorization` header value; answers without a promise when the key is cached.
   * `timeToAnswer` of `headers`, read only when the store is asked, shortens the wait for it.
   */
  check(
    authorization: string | undefined,
    timeToAnswer?: (headers: Headers) => number,
    headers?: Headers,
  ): AuthResult | Promise<AuthResult> {
    const token = bearerToken(authorization);
    if (!token) return MISSING;
    // A cached key costs one hash and a lookup; the shape is checked only before asking the store.
    const hash = token.length === KEY_LENGTH ? hashKey(token) : '';
    const entry = hash ? this.cache.get(hash) : undefined;
    const now = this.now();
    // While the store is unreachable a key known good is answered at once (the timer keeps trying it).
    if (entry && (now - entry.checkedAt <= this.maxAgeMs || (this.down && entry.key))) return this.answer(entry, now);
    if (!looksLikeKey(token)) return INVALID;
    const waitMs = timeToAnswer && headers ? Math.max(LOOKUP_WAIT_MIN_MS, timeToAnswer(headers) / 4) : Infinity;
    return this.lookup(hash, now, waitMs).then(
      (fresh) => this.answer(fresh, now),
      // The store is unreachable: a key known good stays good (a revocation needs the store too).
      () => (entry?.key ? this.answer(entry, now) : UNAVAILABLE),
    );
  }

  private answer(entry: Entry, now: number): AuthResult {
    entry.seenAt = now;
    const key = entry.key;
    if (!key) return INVALID;
    if (key.revoked) return REVOKED;
    this.used.set(key.id, now);
    return (entry.accepted ??= { ok: true, key });
  }

  /**
   * One store call per hash however many requests wait for it. A request waits `lookupTimeoutMs` at
   * most, `waitMs` when shorter; an answer that comes later is remembered for the next one (a Redis
   * slower than that would otherwise refuse a new key on every try).
   */
  private lookup(hash: string, now: number, waitMs: number): Promise<Entry> {
    let p = this.pending.get(hash);
    if (!p) {
      const found = this.store
        .find([hash])
        .then(([key]) => this.remember(hash, { key: this.trusted(key, hash), checkedAt: now, seenAt: now }));
      p = within(found, this.lookupTimeoutMs, 'the key store')
        .then(
          (entry) => (this.storeUp(), entry),
          (error) => {
            this.storeDown(error);
            throw error;
          },
        )
        .finally(() => this.pending.delete(hash));
      this.pending.set(hash, p);
    }
    // Only the shared wait says the store is down: a short time-to-answer is the request's own.
    return waitMs < this.lookupTimeoutMs ? within(p, waitMs, 'the key store') : p;
  }

  private trusted(key: ClientKey | null, hash: string): ClientKey | null {
    return key && sameHash(key.hash, hash) ? key : null;
  }

  private remember(hash: string, entry: Entry): Entry {
    if (this.cache.size >= MAX_ENTRIES) {
      for (const [h, e] of this.cache) if (!e.key) this.cache.delete(h);
      if (this.cache.size >= MAX_ENTRIES) this.cache.clear();
    }
    this.cache.set(hash, entry);
    return entry;
  }

  /** Reads every cached key again (one store call) and writes the last-used times gathered since, in one round trip. */
  refresh(): Promise<void> {
    if (this.unanswered) return Promise.resolve();
    this.refreshing ??= Promise.all([this.readAgain(), this.flushUsed()])
      .then(() => undefined)
      .finally(() => (this.refreshing = null));
    return this.refreshing;
  }

  private async readAgain(): Promise<void> {
    const started = this.now();
    for (const [h, e] of this.cache) {
      // Unknown keys are forgotten after one period; idle keys after idleMs.
      if ((!e.key && started - e.checkedAt > this.refreshMs) || started - e.seenAt > this.idleMs) this.cache.delete(h);
    }
    const hashes = [...this.cache.keys()];
    if (!hashes.length) return;
    // Applied whenever it lands: a Redis slower than lookupTimeoutMs still brings revocations.
    const read = this.counted(this.store.find(hashes)).then((found) => this.reread(hashes, found, started));
    try {
      await within(read, this.lookupTimeoutMs, 'the key store');
      this.storeUp();
    } catch (error) {
      this.storeDown(error);
    }
  }

  /** The store's answer for `hashes` as asked at `started`, over entries not read since. */
  private reread(hashes: string[], found: Array<ClientKey | null>, started: number): void {
    hashes.forEach((h, i) => {
      const e = this.cache.get(h);
      if (e && e.checkedAt <= started) Object.assign(e, { key: this.trusted(found[i], h), checkedAt: started, accepted: undefined });
    });
  }

  private async flushUsed(): Promise<void> {
    if (!this.used.size) return;
    const batch = this.used;
    this.used = new Map();
    try {
      await within(this.counted(this.store.touch(batch)), this.lookupTimeoutMs, 'the key store');
    } catch {
      // Kept for the next batch (newer times win); the store's warning is logged by the reads.
      for (const [id, ms] of batch) if (!this.used.has(id)) this.used.set(id, ms);
    }
  }

  /** Counted among the unanswered until the store answers it. */
  private counted<T>(call: Promise<T>): Promise<T> {
    this.unanswered++;
    void call.catch(() => undefined).finally(() => this.unanswered--);
    return call;
  }

  /** Logged once per outage, not once per request. */
  private storeDown(error: unknown): void {
    if (this.down) return;
    this.down = true;
    this.options.warn(
      `client key store unreachable (${(error as Error).message}): keys already checked keep their last answer, new keys get 503`,
    );
  }

  private storeUp(): void {
    if (!this.down) return;
    this.down = false;
    this.options.warn('client key store reachable again');
  }

  async close(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    await this.refreshing;
    await this.flushUsed();
  }
}

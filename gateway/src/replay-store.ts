/**
 * Where idempotent replay keeps its state: per idempotency key, either a claim (the first request
 * is running, held by a lease) or what the first request answered, kept for 24 hours. One
 * interface, two implementations with one contract (test/gateway/replay-store.contract.test.ts):
 * Redis (replay-store-redis.ts; every instance sees every answer) and this file's in-process twin.
 *
 * Each entry remembers the request's fingerprint (a hash of its endpoint and canonical body), so a
 * key sent again with another body is told apart from a true repeat.
 */
import { randomUUID } from 'node:crypto';

/** What the first request answered, as a repeat gets it back. */
export interface StoredAnswer {
  status: number;
  /** `content-type`, the `x-route-*` headers and `x-request-id`. */
  headers: Record<string, string>;
  body: Buffer;
  /** Sent as server-sent events (replayed as a stream). */
  stream: boolean;
}

/** The first request was answered, but its answer was larger than replay keeps. */
export interface NotKept {
  status: number;
  bytes: number;
}

/** A running first request's hold on its key; renewed while it runs, given up or replaced by its answer. */
export interface Lease {
  key: string;
  token: string;
  fingerprint: string;
}

export type Claim =
  | { kind: 'claimed'; lease: Lease }
  | { kind: 'answered'; answer: StoredAnswer }
  | { kind: 'not_kept'; notKept: NotKept }
  | { kind: 'running' }
  | { kind: 'other_body' };

export interface ReplayStore {
  /** The key's state, claiming it for `leaseMs` when it has none. One store round trip. */
  claim(key: string, fingerprint: string, leaseMs: number): Promise<Claim>;
  /** Extends a lease still held, or takes the key back when it is free (the lease ran out, Redis lost it); false when another took it. */
  renew(lease: Lease, leaseMs: number): Promise<boolean>;
  /** Replaces a lease still held (or a key still free) by the answer (or the note that it was not kept) for `ttlMs`. */
  keep(lease: Lease, result: StoredAnswer | NotKept, ttlMs: number): Promise<boolean>;
  /** Gives the key up (the first request failed): the next repeat runs anew. */
  release(lease: Lease): Promise<void>;
}

export const isAnswer = (r: StoredAnswer | NotKept): r is StoredAnswer => 'body' in r;

type Entry =
  | { kind: 'running'; fingerprint: string; token: string; expiresAt: number; bytes: number }
  | { kind: 'answered'; fingerprint: string; answer: KeptAnswer; expiresAt: number; bytes: number }
  | { kind: 'not_kept'; fingerprint: string; notKept: NotKept; expiresAt: number; bytes: number };

/**
 * An answer as the in-process store keeps it: its body's bytes as a one-byte string (latin1 maps
 * each byte to one character and back). A Buffer per answer cost a few hundred bytes more (its
 * ArrayBuffer's own allocation and bookkeeping, outside the heap), and one made by Buffer.from
 * under 4 KiB was a slice of Node's shared 8 KiB pool, whose whole slab it held.
 */
type KeptAnswer = Omit<StoredAnswer, 'body'> & { body: string };

/**
 * What an entry takes beyond its body and its key's characters: the map's slot, the entry, the
 * answer and its headers (measured: some 400 bytes of heap, with three headers; counted a little over).
 */
const ENTRY_BYTES = 512;

/** The in-process store's memory budget: beyond it the oldest answers go first. */
const MEMORY_REPLAY_BYTES = 64 * 1024 * 1024;

/** How often the in-process store drops what has expired, read again or not. */
const SWEEP_MS = 60_000;

/**
 * In process: one gateway only, gone on restart. Bounded by a byte budget (answers are up to a
 * MiB each and kept a day), the oldest answers dropped first (a claim still running is kept);
 * expired entries are dropped as met, and every minute those nobody met.
 */
export class MemoryReplayStore implements ReplayStore {
  private readonly entries = new Map<string, Entry>();
  private bytes = 0;

  constructor(
    private readonly budget = MEMORY_REPLAY_BYTES,
    /** Monotonic: a wall clock set forward would free running keys and drop answers (a repeat runs again). */
    private readonly now: () => number = () => performance.now(),
    sweepMs = SWEEP_MS,
  ) {
    // An answer is kept its day, not until a repeat reads it or the budget needs its room: model
    // output (personal data, maybe) held on in memory past the promised 24 hours.
    setInterval(() => this.sweep(), sweepMs).unref();
  }

  claim(key: string, fingerprint: string, leaseMs: number): Promise<Claim> {
    const entry = this.live(key);
    if (!entry) {
      const token = newToken();
      this.put(key, { kind: 'running', fingerprint, token, expiresAt: this.now() + leaseMs, bytes: key.length + ENTRY_BYTES });
      return Promise.resolve({ kind: 'claimed', lease: { key, token, fingerprint } });
    }
    if (entry.fingerprint !== fingerprint) return Promise.resolve({ kind: 'other_body' });
    if (entry.kind === 'running') return Promise.resolve({ kind: 'running' });
    if (entry.kind === 'not_kept') return Promise.resolve({ kind: 'not_kept', notKept: { ...entry.notKept } });
    const a = entry.answer;
    return Promise.resolve({ kind: 'answered', answer: { ...a, headers: { ...a.headers }, body: Buffer.from(a.body, 'latin1') } });
  }

  renew(lease: Lease, leaseMs: number): Promise<boolean> {
    if (!this.ours(lease)) return Promise.resolve(false);
    const { key, token, fingerprint } = lease;
    this.put(key, { kind: 'running', fingerprint, token, expiresAt: this.now() + leaseMs, bytes: key.length + ENTRY_BYTES });
    return Promise.resolve(true);
  }

  keep(lease: Lease, result: StoredAnswer | NotKept, ttlMs: number): Promise<boolean> {
    if (!this.ours(lease)) return Promise.resolve(false);
    const expiresAt = this.now() + ttlMs;
    const { fingerprint } = lease;
    this.put(
      lease.key,
      isAnswer(result)
        ? {
            kind: 'answered',
            fingerprint,
            answer: { ...result, body: result.body.toString('latin1') },
            expiresAt,
            bytes: lease.key.length + result.body.length + ENTRY_BYTES + headersLength(result.headers),
          }
        : { kind: 'not_kept', fingerprint, notKept: { ...result }, expiresAt, bytes: lease.key.length + ENTRY_BYTES },
    );
    return Promise.resolve(true);
  }

  release(lease: Lease): Promise<void> {
    if (this.held(lease)) this.drop(lease.key);
    return Promise.resolve();
  }

  /** Held by this lease, or free since its term ran out with no claim after it (as in Redis: replay-store-redis.ts). */
  private ours(lease: Lease): boolean {
    return this.held(lease) !== null || this.live(lease.key) === null;
  }

  private held(lease: Lease): Entry | null {
    const entry = this.live(lease.key);
    return entry?.kind === 'running' && entry.token === lease.token ? entry : null;
  }

  private live(key: string): Entry | null {
    const entry = this.entries.get(key);
    if (!entry) return null;
    if (entry.expiresAt > this.now()) return entry;
    this.drop(key);
    return null;
  }

  /**
   * Stores an entry as the newest, then drops the oldest answers while over budget. A running
   * claim is never dropped for room: it is a few bytes, ends with its lease, and dropping it let a
   * repeat of a request still running (another tenant's answers having filled the budget) run twice.
   */
  private put(key: string, entry: Entry): void {
    this.drop(key);
    this.entries.set(key, entry);
    this.bytes += entry.bytes;
    for (const [oldest, e] of this.entries) {
      if (this.bytes <= this.budget || oldest === key) break;
      if (e.kind !== 'running' || e.expiresAt <= this.now()) this.drop(oldest);
    }
  }

  private sweep(): void {
    const now = this.now();
    for (const [key, entry] of this.entries) if (entry.expiresAt <= now) this.drop(key);
  }

  private drop(key: string): void {
    const entry = this.entries.get(key);
    if (!entry) return;
    this.bytes -= entry.bytes;
    this.entries.delete(key);
  }
}

/** The characters of an answer's headers: their names and values, kept with it. */
function headersLength(headers: Record<string, string>): number {
  let n = 0;
  for (const name in headers) n += name.length + headers[name].length;
  return n;
}

/** A claim's token: tells the claim's holder from a later one after its lease ran out. */
export function newToken(): string {
  return randomUUID().replaceAll('-', '');
}

/**
 * Client keys in a local JSON file (no Redis: one machine). The records (hashes, never keys) are in
 * CLIENT_KEYS_FILE, written by the CLI only; last-used times in a file of their own beside it,
 * written by the gateway only, so the two never overwrite each other's changes. Every write goes to
 * a temporary file renamed over the old one: a reader sees the old file or the new, never half.
 */
import { randomBytes } from 'node:crypto';
import { mkdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { hostname } from 'node:os';
import { dirname } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import type { ClientKey, KeyStore } from './client-keys';
import { createLock, lockHolder, pidAlive, takeOverLock, type LockHolder } from './pid-lock';

type Stored = Omit<ClientKey, 'lastUsed'>;

async function readJson<T>(file: string, empty: T): Promise<T> {
  try {
    return JSON.parse(await readFile(file, 'utf8')) as T;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return empty;
    throw new Error(`${file}: ${(error as Error).message}`, { cause: error });
  }
}

async function writeAtomic(file: string, value: unknown): Promise<void> {
  await mkdir(dirname(file), { recursive: true });
  const temp = `${file}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`;
  await writeFile(temp, `${JSON.stringify(value, null, 2)}\n`, { mode: 0o600 });
  await rename(temp, file);
}

/** A lock from another machine, or from a CLI before locks named their holder, counts as left after this long. */
const LOCK_STALE_MS = 10_000;
const LOCK_WAIT_MS = 15_000;

/**
 * Whether the lock's holder is gone. On this machine that is a pid that no longer runs: a CLI
 * that is merely slow (stopped with Ctrl-Z, a slow disk) keeps its lock however long it takes.
 */
const holderGone = (holder: LockHolder) =>
  holder.host === hostname() ? !pidAlive(holder.pid) : Date.now() - holder.started > LOCK_STALE_MS;

/** Takes `lock` for this process: created anew, or taken over from a holder that is gone (pid-lock.ts). */
function takeLock(lock: string): boolean {
  const started = Date.now();
  if (createLock(lock, started)) return true;
  const holder = lockHolder(lock);
  return holder !== null && holderGone(holder) && takeOverLock(lock, holder, started);
}

/**
 * Runs `change` holding `<file>.lock`. Two CLIs changing the records at once would each write the
 * list they read: a key just made lost (shown, never valid), or a revocation undone (a revoked key
 * valid again).
 */
async function locked<T>(file: string, waitMs: number, change: () => Promise<T>): Promise<T> {
  const lock = `${file}.lock`;
  await mkdir(dirname(file), { recursive: true });
  // Bounded on the monotonic clock: one set back would hold the command for the time given back.
  for (const deadline = performance.now() + waitMs; !takeLock(lock); await delay(10))
    if (performance.now() > deadline) throw new Error(`${lock}: held by another change of the keys; remove it if none is running`);
  try {
    return await change();
  } finally {
    await rm(lock, { force: true });
  }
}

/** What tells one version of the file from another: every change the CLI makes is a new file renamed over the old (a new inode). */
const versionOf = (s: { ino: number; size: number; mtimeMs: number } | null) => (s ? `${s.ino}:${s.size}:${s.mtimeMs}` : 'none');

export class FileKeyStore implements KeyStore {
  readonly where: string;
  private readonly usedFile: string;
  /** The records by hash as last read, and the version of the file they were read from. */
  private parsed: { version: string; byHash: Map<string, Stored> } | null = null;

  /** `lockWaitMs`: how long a change waits for another change of the records before it gives up. */
  constructor(
    private readonly file: string,
    private readonly lockWaitMs = LOCK_WAIT_MS,
  ) {
    this.usedFile = file.replace(/(\.json)?$/, '.last-used.json');
    this.where = `file ${file}`;
  }

  /**
   * The records, or an error naming the file: one that is JSON of another shape (`{}`, a routing map
   * given as CLIENT_KEYS_FILE) was said as "Cannot read properties of undefined", by the CLI and in
   * the gateway's "key store unreachable" warning, naming neither the file nor what was wrong.
   */
  private async records(): Promise<Stored[]> {
    const read: unknown = await readJson<unknown>(this.file, { keys: [] });
    const keys = read && typeof read === 'object' ? (read as { keys?: unknown }).keys : undefined;
    if (!Array.isArray(keys) || keys.some((k) => !k || typeof k !== 'object' || Array.isArray(k)))
      throw new Error(`${this.file}: expected {"keys": [records]} as npm run keys writes it`);
    return keys as Stored[];
  }
  private used = () => readJson<Record<string, string>>(this.usedFile, {});

  async add(record: ClientKey): Promise<boolean> {
    return locked(this.file, this.lockWaitMs, async () => {
      const keys = await this.records();
      if (keys.some((k) => k.id === record.id)) return false;
      const { lastUsed: _, ...stored } = record;
      await writeAtomic(this.file, { keys: [...keys, stored] });
      return true;
    });
  }

  async list(): Promise<ClientKey[]> {
    const [keys, used] = await Promise.all([this.records(), this.used()]);
    return keys.map((k) => ({ ...k, lastUsed: used[k.id] ?? null }));
  }

  /**
   * The records by hash, read and parsed again only when the file changed: each new made-up key
   * (every lookup of a key not cached) read and parsed the whole file, a flood of them a core's
   * worth. Its version is looked up on every call, so a revocation is seen as soon as before.
   */
  private async byHash(): Promise<Map<string, Stored>> {
    const version = versionOf(
      await stat(this.file).catch((error: NodeJS.ErrnoException) => {
        if (error.code === 'ENOENT') return null;
        throw new Error(`${this.file}: ${error.message}`, { cause: error });
      }),
    );
    if (this.parsed?.version === version) return this.parsed.byHash;
    // Read after its version: a change between the two is read now and read again next time.
    const byHash = new Map((await this.records()).map((k) => [k.hash, k]));
    this.parsed = { version, byHash };
    return byHash;
  }

  async find(hashes: string[]): Promise<Array<ClientKey | null>> {
    const byHash = await this.byHash();
    return hashes.map((h) => {
      const k = byHash.get(h);
      return k ? { ...k, lastUsed: null } : null;
    });
  }

  async revoke(id: string, at: Date): Promise<ClientKey | null> {
    const record = await locked(this.file, this.lockWaitMs, async () => {
      const keys = await this.records();
      const found = keys.find((k) => k.id === id);
      if (!found) return null;
      found.revoked ??= at.toISOString();
      await writeAtomic(this.file, { keys });
      return found;
    });
    return record && { ...record, lastUsed: (await this.used())[id] ?? null };
  }

  /**
   * Under the file's lock, and never putting a time back: gateways sharing the file each wrote the
   * times they had read, so one dropped another's, and a batch sent late undid a later use.
   */
  async touch(used: Map<string, number>): Promise<void> {
    if (!used.size) return;
    await locked(this.usedFile, this.lockWaitMs, async () => {
      const all = await this.used();
      for (const [id, ms] of used) {
        const at = new Date(ms).toISOString();
        if (!(all[id] >= at)) all[id] = at;
      }
      await writeAtomic(this.usedFile, all);
    });
  }
}

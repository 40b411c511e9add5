/**
 * Client keys in a local JSON file (no Redis: one machine). The records (hashes, never keys) are in
 * CLIENT_KEYS_FILE, written by the CLI only; last-used times in a file of their own beside it,
 * written by the gateway only, so the two never overwrite each other's changes. Every write goes to
 * a temporary file renamed over the old one: a reader sees the old file or the new, never half.
 */
import { randomBytes } from 'node:crypto';
import { mkdir, open, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import type { ClientKey, KeyStore } from './client-keys';

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

/** Changes of the records take milliseconds: a lock older than this was left by a process that was killed. */
const LOCK_STALE_MS = 10_000;
const LOCK_WAIT_MS = 15_000;

const isStale = async (lock: string): Promise<boolean> => {
  const held = await stat(lock).catch(() => null);
  return held !== null && Date.now() - held.mtimeMs > LOCK_STALE_MS;
};

/**
 * Removes a lock left by a killed process, one remover at a time (`<lock>.break`, held for a stat
 * and an rm): two runs that both saw the old lock would otherwise each remove a lock, the second
 * removing the one the first had just taken, and both change the records at once.
 */
async function breakStale(lock: string): Promise<void> {
  const breaker = `${lock}.break`;
  try {
    await (await open(breaker, 'wx')).close();
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    // Another run is removing it; a breaker this old was left by a run killed in that instant.
    if (await isStale(breaker)) await rm(breaker, { force: true });
    else await delay(10);
    return;
  }
  try {
    if (await isStale(lock)) await rm(lock, { force: true });
  } finally {
    await rm(breaker, { force: true });
  }
}

/**
 * Runs `change` holding `<file>.lock` (created exclusively). Two CLIs changing the records at once
 * would each write the list they read: a key just made lost (shown, never valid), or a revocation
 * undone (a revoked key valid again).
 */
async function locked<T>(file: string, change: () => Promise<T>): Promise<T> {
  const lock = `${file}.lock`;
  await mkdir(dirname(file), { recursive: true });
  for (const deadline = Date.now() + LOCK_WAIT_MS; ;) {
    try {
      await (await open(lock, 'wx')).close();
      break;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      if (await isStale(lock)) await breakStale(lock);
      else if (Date.now() > deadline)
        throw new Error(`${lock}: held by another change of the keys; remove it if none is running`, { cause: error });
      else await delay(10);
    }
  }
  try {
    return await change();
  } finally {
    await rm(lock, { force: true });
  }
}

export class FileKeyStore implements KeyStore {
  readonly where: string;
  private readonly usedFile: string;

  constructor(private readonly file: string) {
    this.usedFile = file.replace(/(\.json)?$/, '.last-used.json');
    this.where = `file ${file}`;
  }

  private records = async () => (await readJson<{ keys: Stored[] }>(this.file, { keys: [] })).keys;
  private used = () => readJson<Record<string, string>>(this.usedFile, {});

  async add(record: ClientKey): Promise<boolean> {
    return locked(this.file, async () => {
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

  async find(hashes: string[]): Promise<Array<ClientKey | null>> {
    const byHash = new Map((await this.records()).map((k) => [k.hash, k]));
    return hashes.map((h) => {
      const k = byHash.get(h);
      return k ? { ...k, lastUsed: null } : null;
    });
  }

  async revoke(id: string, at: Date): Promise<ClientKey | null> {
    const record = await locked(this.file, async () => {
      const keys = await this.records();
      const found = keys.find((k) => k.id === id);
      if (!found) return null;
      found.revoked ??= at.toISOString();
      await writeAtomic(this.file, { keys });
      return found;
    });
    return record && { ...record, lastUsed: (await this.used())[id] ?? null };
  }

  async touch(used: Map<string, number>): Promise<void> {
    if (!used.size) return;
    const all = await this.used();
    for (const [id, ms] of used) all[id] = new Date(ms).toISOString();
    await writeAtomic(this.usedFile, all);
  }
}

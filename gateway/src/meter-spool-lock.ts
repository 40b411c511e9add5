/**
 * One process per spool folder. Two gateways started in one working directory would otherwise share
 * `.data/meter-spool`: both would post the same events and one's compaction would move the other's
 * offset. A process takes a folder by creating its `lock` file exclusively (O_EXCL) with its pid;
 * a folder held by a running process is skipped and the next one is tried: `<dir>`, `<dir>.2`, …
 * `<dir>.64`. A lock left by a process that is gone (kill -9, a crash, a container restarted with
 * the same pid) is taken over (pid-lock.ts, as the archive's folders), so a restarted gateway
 * delivers what its folder still holds.
 */
import { mkdirSync, unlinkSync } from 'node:fs';
import { join } from 'node:path';
import { ConfigError } from './errors';
import { createLock, fileAge, lockHolder, pidAlive, takeOverLock } from './pid-lock';

const MAX_FOLDERS = 64;
/** A lock this young and still empty is being written by its creator this instant. */
const WRITING_MS = 10_000;

/** Folders this process holds (a second sink on one of them gets the next folder, as another process would). */
const held = new Set<string>();

export interface SpoolFolder {
  /** The folder this process spools to (the one asked for, or `<dir>.N` when that one is held). */
  dir: string;
  /** The pid of the process holding the folder asked for, when another folder was taken. */
  heldBy: number | null;
  /** Why no lock could be made (a folder that cannot be created): the folder is used unlocked. */
  problem: string | null;
  release(): void;
}

/** The pid a lock names; null when there is no lock or it names none (yet). */
function owner(lock: string): number | null {
  try {
    return lockHolder(lock)?.pid || null;
  } catch {
    return null;
  }
}

/** Our own pid in a lock we do not hold is a previous life of this pid. */
const alive = (pid: number | null) => pid !== null && pid !== process.pid && pidAlive(pid);

function tryFolder(dir: string): { taken: boolean; by: number | null } {
  if (held.has(dir)) return { taken: false, by: process.pid };
  mkdirSync(dir, { recursive: true });
  const lock = join(dir, 'lock');
  for (let attempt = 0; attempt < 3; attempt++) {
    if (createLock(lock, Date.now())) return { taken: true, by: null };
    const stale = lockHolder(lock);
    if (!stale) continue; // released meanwhile: try again
    const by = stale.pid || null;
    // An empty lock is being written by its creator this instant: held.
    if ((by === null && fileAge(lock) < WRITING_MS) || alive(by)) return { taken: false, by };
    return { taken: takeOverLock(lock, stale, Date.now()), by };
  }
  return { taken: false, by: null };
}

/** Takes the first spool folder of `base`, `base.2`, … that no running process holds. */
export function takeSpoolFolder(base: string): SpoolFolder {
  let heldBy: number | null = null;
  for (let n = 1; n <= MAX_FOLDERS; n++) {
    const dir = n === 1 ? base : `${base}.${n}`;
    let found: { taken: boolean; by: number | null };
    try {
      found = tryFolder(dir);
    } catch (error) {
      // A disk that refuses the folder refuses the spool too: its appends fail, are logged and kept in memory.
      return { dir, heldBy, problem: (error as Error).message, release: () => undefined };
    }
    if (n === 1 && !found.taken) heldBy = found.by;
    if (!found.taken) continue;
    held.add(dir);
    return { dir, heldBy, problem: null, release: () => release(dir) };
  }
  throw new ConfigError(
    `METER_SPOOL_DIR: ${base} and ${base}.2 … ${base}.${MAX_FOLDERS} are all held by running processes; give this gateway a folder of its own`,
  );
}

function release(dir: string): void {
  if (!held.delete(dir)) return;
  const lock = join(dir, 'lock');
  if (owner(lock) === process.pid) unlinkSync(lock);
}

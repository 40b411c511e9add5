/**
 * One process per spool folder. Two gateways started in one working directory would otherwise share
 * `.data/meter-spool`: both would post the same events and one's compaction would move the other's
 * offset. A process takes a folder by creating its `lock` file exclusively (O_EXCL) with its pid;
 * a folder held by a running process is skipped and the next one is tried: `<dir>`, `<dir>.2`, …
 * `<dir>.64`. A lock left by a process that is gone (kill -9, a crash, a container restarted with
 * the same pid) is taken over, so a restarted gateway delivers what its folder still holds.
 *
 * Taking over goes through a `lock.takeover` file, also created exclusively, so two processes that
 * find the same stale lock cannot both take it.
 */
import {
  closeSync,
  existsSync,
  mkdirSync,
  openSync,
  readFileSync,
  renameSync,
  statSync,
  unlinkSync,
  writeFileSync,
  writeSync,
} from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { ConfigError } from './errors';

const MAX_FOLDERS = 64;
/** A takeover file older than this was left by a process that died while taking over. */
const TAKEOVER_STALE_MS = 10_000;

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

const code = (error: unknown) => (error as NodeJS.ErrnoException).code;

function owner(lock: string): number | null {
  try {
    return Number(readFileSync(lock, 'utf8').split('\n')[0]) || null;
  } catch {
    return null;
  }
}

/** A pid that runs here; our own pid in a lock we do not hold is a previous life of this pid. */
function alive(pid: number | null): boolean {
  if (!pid || pid === process.pid) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return code(error) === 'EPERM'; // it runs, under another user
  }
}

const content = () => `${process.pid}\n${hostname()}\n`;

function create(lock: string): boolean {
  try {
    const fd = openSync(lock, 'wx');
    writeSync(fd, content());
    closeSync(fd);
    return true;
  } catch (error) {
    if (code(error) === 'EEXIST') return false;
    throw error;
  }
}

/** Replaces a lock whose process is gone, unless another process is taking it over right now. */
function takeOver(lock: string, dead: number | null): boolean {
  const guard = `${lock}.takeover`;
  if (!create(guard)) {
    if (age(guard) > TAKEOVER_STALE_MS) unlinkSync(guard);
    return false;
  }
  try {
    if (owner(lock) !== dead) return false; // someone else took it in between
    writeFileSync(`${lock}.${process.pid}`, content());
    renameSync(`${lock}.${process.pid}`, lock);
    return true;
  } finally {
    unlinkSync(guard);
  }
}

/** Milliseconds since the file was changed; 0 when it is gone. */
function age(file: string): number {
  const st = statSync(file, { throwIfNoEntry: false });
  return st ? Date.now() - st.mtimeMs : 0;
}

function tryFolder(dir: string): { taken: boolean; by: number | null } {
  if (held.has(dir)) return { taken: false, by: process.pid };
  mkdirSync(dir, { recursive: true });
  const lock = join(dir, 'lock');
  for (let attempt = 0; attempt < 3; attempt++) {
    if (create(lock)) return { taken: true, by: null };
    if (!existsSync(lock)) continue; // released meanwhile: try again
    const by = owner(lock);
    // An empty lock is being written by its creator this instant: held.
    if ((by === null && age(lock) < TAKEOVER_STALE_MS) || alive(by)) return { taken: false, by };
    return { taken: takeOver(lock, by), by };
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

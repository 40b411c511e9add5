/**
 * A lock file one process holds: created exclusively (O_EXCL) with its pid, host and start. The
 * meter spool (one gateway per folder, meter-spool-lock.ts) and the archive (one run per folder,
 * archive/lock.ts) hold their folders with it; each says when a holder counts as gone.
 *
 * A lock left by a process that is gone is taken over through `<lock>.takeover`, also created
 * exclusively, so two processes that find the same stale lock cannot both take it. A takeover file
 * older than TAKEOVER_STALE_MS was left by a process that died while taking over, and is removed
 * (by whichever process gets there first: the others find it gone and go on).
 */
import { closeSync, openSync, readFileSync, renameSync, statSync, unlinkSync, writeSync } from 'node:fs';
import { hostname } from 'node:os';

export interface LockHolder {
  pid: number;
  host: string;
  /** When it took the lock (epoch ms); a lock cut short while it was written is dated by the file. */
  started: number;
}

const TAKEOVER_STALE_MS = 10_000;
/** The last instant a Date can hold. */
const MAX_TIME = 8.64e15;

const errorCode = (error: unknown) => (error as NodeJS.ErrnoException).code;
const content = (started: number) => `${process.pid}\n${hostname()}\n${started}\n`;

/**
 * Writes `text` into a file just made, or removes it: on a full disk the file is made but its text
 * refused (or cut short), and a lock left so reads as another machine's, holding the folder for a day.
 */
function fill(file: string, fd: number, text: string): void {
  const buf = Buffer.from(text);
  try {
    for (let at = 0; at < buf.length;) at += writeSync(fd, buf, at);
  } catch (error) {
    closeSync(fd);
    unlinkIfThere(file);
    throw error;
  }
  closeSync(fd);
}

/** Creates the lock as this process's; false when it exists. */
export function createLock(file: string, started: number): boolean {
  let fd: number;
  try {
    fd = openSync(file, 'wx');
  } catch (error) {
    if (errorCode(error) === 'EEXIST') return false;
    throw error;
  }
  fill(file, fd, content(started));
  return true;
}

/** Who holds the lock; null when there is none. */
export function lockHolder(lock: string): LockHolder | null {
  try {
    const [pid, host = '', started] = readFileSync(lock, 'utf8').split('\n');
    const at = Number(started);
    return { pid: Number(pid), host, started: at > 0 && at <= MAX_TIME ? at : statSync(lock).mtimeMs };
  } catch (error) {
    if (errorCode(error) === 'ENOENT') return null;
    throw error;
  }
}

/** Whether a process of this pid runs on this machine. */
export function pidAlive(pid: number): boolean {
  if (!Number.isInteger(pid) || pid < 1) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return errorCode(error) === 'EPERM'; // it runs, under another user
  }
}

/** Milliseconds since the file was changed; 0 when it is gone. */
export function fileAge(file: string): number {
  const st = statSync(file, { throwIfNoEntry: false });
  return st ? Date.now() - st.mtimeMs : 0;
}

/** Removes a file; one already gone was removed by another process (two found the same takeover file stale). */
export function unlinkIfThere(file: string): void {
  try {
    unlinkSync(file);
  } catch (error) {
    if (errorCode(error) !== 'ENOENT') throw error;
  }
}

/** Replaces a stale lock, unless another process is taking it over right now or took it already. */
export function takeOverLock(lock: string, stale: LockHolder, started: number): boolean {
  const guard = `${lock}.takeover`;
  if (!createLock(guard, started)) {
    if (fileAge(guard) > TAKEOVER_STALE_MS) unlinkIfThere(guard);
    return false;
  }
  try {
    const now = lockHolder(lock);
    if (now && (now.pid !== stale.pid || now.host !== stale.host || now.started !== stale.started)) return false;
    const draft = `${lock}.${process.pid}`;
    fill(draft, openSync(draft, 'w'), content(started));
    renameSync(draft, lock);
    return true;
  } finally {
    // Gone when a process that found it stale an instant before it was ours removed it.
    unlinkIfThere(guard);
  }
}

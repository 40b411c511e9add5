/**
 * One `npm run archive` or `archive:expire` per archive folder at a time. Two runs that merge into
 * the same day each read the stored file, and the second rename would replace the first run's union
 * with its own: the first input's events would be gone. An expire beside a run that merges an old
 * day would remove the stored file under it, and the day comes back. A run holds `.archive-lock` in
 * the folder (created exclusively, with its pid, host and start); a second run is refused with who
 * holds it.
 *
 * A lock left by a run that was killed is taken over: at once when its process is gone from this
 * machine, after a day when it names another machine (a folder shared by machines, where a pid says
 * nothing). Taking over goes through `.archive-lock.takeover`, also created exclusively, so two
 * runs that find the same stale lock cannot both take it.
 */
import { closeSync, openSync, readFileSync, renameSync, statSync, unlinkSync, writeFileSync, writeSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';

/** No run takes this long: a lock of another machine older than that was left by a run that was killed. */
export const ABANDONED_MS = 24 * 3600_000;

interface Holder {
  pid: number;
  host: string;
  started: number;
}

/** Locks this process holds: a second run in the same process is refused as another process's would be. */
const held = new Set<string>();

/** The last instant a Date can hold. */
const MAX_TIME = 8.64e15;
const code = (error: unknown) => (error as NodeJS.ErrnoException).code;
const content = (started: number) => `${process.pid}\n${hostname()}\n${started}\n`;

function holder(lock: string): Holder | null {
  try {
    const [pid, host = '', started] = readFileSync(lock, 'utf8').split('\n');
    // A lock cut short while it was written (kill -9 right after creating it) is dated by the file.
    const at = Number(started);
    return { pid: Number(pid), host, started: at > 0 && at <= MAX_TIME ? at : statSync(lock).mtimeMs };
  } catch (error) {
    if (code(error) === 'ENOENT') return null;
    throw error;
  }
}

function create(file: string, started: number): boolean {
  try {
    const fd = openSync(file, 'wx');
    writeSync(fd, content(started));
    closeSync(fd);
    return true;
  } catch (error) {
    if (code(error) === 'EEXIST') return false;
    throw error;
  }
}

/** Whether the run that wrote the lock may still be running. */
function running(lock: string, h: Holder, now: number): boolean {
  if (h.host !== hostname()) return !(now - h.started > ABANDONED_MS);
  // Our own pid in a lock we do not hold is a previous life of this pid (a container restarted).
  if (h.pid === process.pid) return held.has(lock);
  if (!Number.isInteger(h.pid) || h.pid < 1) return false;
  try {
    process.kill(h.pid, 0);
    return true;
  } catch (error) {
    return code(error) === 'EPERM'; // it runs, under another user
  }
}

/** Replaces a stale lock, unless another run is taking it over right now or took it already. */
function takeOver(lock: string, stale: Holder, started: number): boolean {
  const guard = `${lock}.takeover`;
  if (!create(guard, started)) return false;
  try {
    const now = holder(lock);
    if (now && (now.pid !== stale.pid || now.host !== stale.host || now.started !== stale.started)) return false;
    writeFileSync(`${lock}.${process.pid}`, content(started));
    renameSync(`${lock}.${process.pid}`, lock);
    return true;
  } finally {
    unlinkSync(guard);
  }
}

/** Takes the archive folder for this run; throws, naming the holder, when another run has it. Returns the release. */
export function lockArchive(out: string, started: number, refuse: (message: string) => Error): () => void {
  const lock = join(out, '.archive-lock');
  for (let attempt = 0; attempt < 3; attempt++) {
    if (create(lock, started)) return hold(lock, started);
    const h = holder(lock);
    if (!h) continue; // released meanwhile
    if (running(lock, h, started)) {
      const since = new Date(h.started).toISOString();
      throw refuse(
        `${out}: another npm run archive or archive:expire (pid ${h.pid} on ${h.host}, started ${since}) is writing this archive; nothing was changed, run again when it ends ` +
          `(or, if that run is known to be dead, remove ${lock})`,
      );
    }
    if (takeOver(lock, h, started)) return hold(lock, started);
  }
  throw refuse(`${out}: could not take ${lock} (other runs were taking it); nothing was changed`);
}

function hold(lock: string, started: number): () => void {
  held.add(lock);
  return () => release(lock, started);
}

function release(lock: string, started: number): void {
  held.delete(lock);
  const h = holder(lock);
  if (h && h.pid === process.pid && h.host === hostname() && h.started === started) unlinkSync(lock);
}

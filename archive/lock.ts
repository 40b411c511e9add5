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
 * nothing). Taking over goes through `.archive-lock.takeover` (pid-lock.ts, as the meter spool's
 * folders), so two runs that find the same stale lock cannot both take it.
 */
import { hostname } from 'node:os';
import { join } from 'node:path';
import { createLock, lockHolder, pidAlive, takeOverLock, unlinkIfThere, type LockHolder } from '../gateway/src/pid-lock';

/** No run takes this long: a lock of another machine older than that was left by a run that was killed. */
export const ABANDONED_MS = 24 * 3600_000;

/** Locks this process holds: a second run in the same process is refused as another process's would be. */
const held = new Set<string>();

/** Whether the run that wrote the lock may still be running. */
function running(lock: string, h: LockHolder, now: number): boolean {
  if (h.host !== hostname()) return !(now - h.started > ABANDONED_MS);
  // Our own pid in a lock we do not hold is a previous life of this pid (a container restarted).
  if (h.pid === process.pid) return held.has(lock);
  return pidAlive(h.pid);
}

/** Takes the archive folder for this run; throws, naming the holder, when another run has it. Returns the release. */
export function lockArchive(out: string, started: number, refuse: (message: string) => Error): () => void {
  const lock = join(out, '.archive-lock');
  for (let attempt = 0; attempt < 3; attempt++) {
    if (createLock(lock, started)) return hold(lock, started);
    const h = lockHolder(lock);
    if (!h) continue; // released meanwhile
    if (running(lock, h, started)) {
      const since = new Date(h.started).toISOString();
      throw refuse(
        `${out}: another npm run archive or archive:expire (pid ${h.pid} on ${h.host}, started ${since}) is writing this archive; nothing was changed, run again when it ends ` +
          `(or, if that run is known to be dead, remove ${lock})`,
      );
    }
    if (takeOverLock(lock, h, started)) return hold(lock, started);
  }
  throw refuse(`${out}: could not take ${lock} (other runs were taking it); nothing was changed`);
}

function hold(lock: string, started: number): () => void {
  held.add(lock);
  return () => release(lock, started);
}

function release(lock: string, started: number): void {
  held.delete(lock);
  const h = lockHolder(lock);
  // Gone between the read and the unlink: another run cleared it (two runs can both believe they took
  // a stale lock, a race of microseconds documented in docs/archive.md); this run's work is done.
  if (h && h.pid === process.pid && h.host === hostname() && h.started === started) unlinkIfThere(lock);
}

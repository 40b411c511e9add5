/**
 * The script lock: one per script, shared by every web-app request and trigger. It is held only
 * around sheet reads and writes that must not interleave, never while waiting on another service
 * (UrlFetch, Calendar, Drive, Mail): a slow URL must not stall everyone's ingest.
 */
import { MeterRefusal } from '../../schema/meter-reply';
import type { MeterServices } from './services';

/** The specification: "A script lock is tried for up to 5000 ms around the write". */
const LOCK_WAIT_MS = 5000;
/** Export and retention read the whole tab; they may wait longer for the lock than ingest does. */
export const MAINTENANCE_LOCK_MS = 30_000;

/** Runs `work` under the script lock, or refuses with `busy` without running it. */
export function withScriptLock<T>(svc: Pick<MeterServices, 'lock'>, work: () => T, waitMs = LOCK_WAIT_MS): T {
  if (!svc.lock.tryLock(waitMs)) {
    throw new MeterRefusal('busy', `meter busy: the write lock was not free within ${waitMs} ms; nothing was written, retry`);
  }
  try {
    return work();
  } finally {
    svc.lock.releaseLock();
  }
}

/**
 * The script lock: one per script, shared by every web-app request and trigger. It is held only
 * around sheet reads and writes that must not interleave, never while waiting on another service
 * (UrlFetch, Calendar, Drive, Mail): a slow URL must not stall everyone's ingest.
 */
import { MeterRefusal } from '../../schema/meter-reply';
import type { MeterServices } from './services';

/** How long a web-app request waits for the script lock before refusing with `busy` (docs/meter.md). */
export const LOCK_WAIT_MS = 5000;
/** Export and retention read the whole tab; they may wait longer for the lock than ingest does. */
export const MAINTENANCE_LOCK_MS = 30_000;

/** What a refusal says was done when the lock is not free: nothing, for a caller whose first write this is. */
const NOTHING_WRITTEN = 'nothing was written, retry';

/**
 * Runs `work` under the script lock, or refuses with `busy` without running it. `done` says what
 * the caller had done before (a step of a back-office action comes after its calendar event or text).
 *
 * The sheet writes are flushed before the lock is let go: Apps Script applies them only at a flush
 * or at the end of the script, and the next execution to take the lock would read the tab without
 * them (a batch written over the rows just appended, a retry's ids not found). Work that failed
 * half-way is flushed too (what it wrote is what the next run must see); a flush that fails then
 * leaves the work's own error to be reported, and one that fails after the work succeeded is the error.
 */
export function withScriptLock<T>(
  svc: Pick<MeterServices, 'lock' | 'flush'>,
  work: () => T,
  waitMs = LOCK_WAIT_MS,
  done = NOTHING_WRITTEN,
): T {
  if (!svc.lock.tryLock(waitMs)) {
    throw new MeterRefusal('busy', `meter busy: the write lock was not free within ${waitMs} ms; ${done}`);
  }
  let result: T;
  try {
    result = work();
  } catch (error) {
    try {
      svc.flush();
    } catch {
      // The work's own error is the one to report.
    } finally {
      svc.lock.releaseLock();
    }
    throw error;
  }
  try {
    svc.flush(); // failing, the work's writes are not known to be committed: the caller is told so
  } finally {
    svc.lock.releaseLock();
  }
  return result;
}

/**
 * Runs `work` under the script lock when it reads and writes script properties alone (no sheet
 * write to flush): a decision and its record that must not interleave with another run's, such as
 * an alert's "already posted today". Waits as long as the maintenance does: a busy lock must not
 * cost an alert its record.
 */
export function withPropertyLock<T>(svc: Pick<MeterServices, 'lock'>, work: () => T): T {
  if (!svc.lock.tryLock(MAINTENANCE_LOCK_MS)) {
    throw new MeterRefusal('busy', `meter busy: the script lock was not free within ${MAINTENANCE_LOCK_MS} ms`);
  }
  try {
    return work();
  } finally {
    svc.lock.releaseLock();
  }
}

/**
 * Records an outcome under the script lock, or without it when the lock stays busy (the export or
 * retention holding it past the wait): they never touch the properties recorded, and a record lost
 * would post an alert again once its claim ran out.
 */
export function recordWithPropertyLock(svc: Pick<MeterServices, 'lock'>, record: () => void): void {
  try {
    withPropertyLock(svc, record);
  } catch (error) {
    if (!(error instanceof MeterRefusal && error.code === 'busy')) throw error;
    record();
  }
}

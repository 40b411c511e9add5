/**
 * Moving a run's staged files into the archive, all or nothing even when the run is killed half-way
 * (kill -9, power loss). A publish is several renames (one per day file written) and then the
 * removal of the stored files they replace (a day written in the other layout, a file `_N` the day
 * no longer needs). Killed in between, the archive would hold a day twice (its old flat file beside
 * its new partitioned ones) or an event twice (on the day it moved to, and on the day it moved
 * from), and no later run would undo it unless its input touched those days.
 *
 * So before the first rename the run writes the whole publish to `.archive-publish` in the archive
 * folder (a JSON list of renames and removals, paths relative to the folder; written beside, synced,
 * then renamed into place, so it is there whole or not at all), applies it, and removes it last. A
 * journal found there is a publish a killed run left half-done: the next `npm run archive` or
 * `archive:expire`, holding the lock, finishes it before anything else (each step may be done again:
 * a rename whose staged file is gone was done, a removal of a missing file too), and reports read
 * the archive as the journal leaves it (`publishedView`), changing nothing.
 */
import {
  closeSync,
  copyFileSync,
  existsSync,
  fsyncSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { partBeside, removeEmptiedPartitions } from './day-files';

const JOURNAL = '.archive-publish';

interface Journal {
  /** [staged file, its place in the archive], relative to the archive folder. */
  renames: [string, string][];
  /** Stored files the renames did not overwrite, relative to the archive folder. */
  removes: string[];
}

/**
 * Moves a staged file to `dest`, replacing a file there at once (rename). A partition folder linked
 * in from another file system cannot take a rename from the staging folder: the file is copied
 * beside `dest` first, then renamed over it, so a reader still sees the old file or the new.
 */
function place(src: string, dest: string): void {
  try {
    renameSync(src, dest);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EXDEV') throw error;
    const beside = partBeside(dest); // no day file's name: never read as one
    try {
      copyFileSync(src, beside);
      renameSync(beside, dest);
    } finally {
      rmSync(beside, { force: true });
    }
    rmSync(src);
  }
}

function syncPath(path: string): void {
  const fd = openSync(path, 'r');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/** A folder's entries to the disk (a rename in it); not every system opens a folder (Windows), which then does without. */
function syncFolder(dir: string): void {
  try {
    syncPath(dir);
  } catch {
    /* the rename stands; only its durability across a power loss is the system's */
  }
}

/** Moves `renames` ([staged, dest], absolute) into the archive and removes `removes`, as one publish. */
export function publishAll(out: string, renames: [string, string][], removes: string[]): void {
  const journal: Journal = {
    renames: renames.map(([src, dest]) => [relative(out, src), relative(out, dest)]),
    removes: removes.map((f) => relative(out, f)),
  };
  const file = join(out, JOURNAL);
  const beside = `${file}.${process.pid}.tmp`;
  for (const [src] of renames) syncPath(src); // the staged files reach the disk before the journal names them
  writeFileSync(beside, JSON.stringify(journal));
  syncPath(beside);
  renameSync(beside, file);
  syncFolder(out);
  apply(out, journal);
}

function apply(out: string, journal: Journal): void {
  for (const [src, dest] of journal.renames) {
    const from = resolve(out, src);
    if (!existsSync(from)) continue; // moved already, by the run that was killed
    const to = resolve(out, dest);
    mkdirSync(dirname(to), { recursive: true });
    place(from, to);
  }
  for (const f of journal.removes) {
    const path = resolve(out, f);
    rmSync(path, { force: true });
    // Only the partition folders this emptied (none for a flat file); every other folder in the archive stays.
    if (existsSync(dirname(path))) removeEmptiedPartitions(out, path);
  }
  // The renames and removals reach the disk before the journal that would finish them is gone.
  const folders = new Set([...journal.renames.map(([, dest]) => dest), ...journal.removes].map((f) => dirname(resolve(out, f))));
  for (const dir of folders) if (existsSync(dir)) syncFolder(dir);
  rmSync(join(out, JOURNAL));
  syncFolder(out);
}

/** Whether a publish is still to be finished (a run failed or was killed half-way through it). */
export const publishPending = (out: string) => existsSync(join(out, JOURNAL));

function journalIn(out: string): Journal | null {
  const file = join(out, JOURNAL);
  if (!existsSync(file)) return null;
  return JSON.parse(readFileSync(file, 'utf8')) as Journal;
}

/** Finishes the publish a killed run left (call holding the archive's lock). Returns a line to say, or null. */
export function finishPublish(out: string): string | null {
  // A journal a run was killed writing, before it was renamed into place: that run changed nothing.
  for (const name of readdirSync(out)) if (/^\.archive-publish\.\d+\.tmp$/.test(name)) rmSync(join(out, name), { force: true });
  const journal = journalIn(out);
  if (!journal) return null;
  apply(out, journal);
  return `finished the publish of a run that was killed while moving its files in (${journal.renames.length} file(s), ${journal.removes.length} removed)`;
}

/**
 * The archive's day files as they are once the journal left by a killed run is applied: its removed
 * files left out, and a staged file not moved yet read in place of the file it replaces. Nothing changes.
 */
export function publishedView(out: string, files: string[]): string[] {
  const journal = journalIn(out);
  if (!journal) return files;
  const gone = new Set(journal.removes.map((f) => resolve(out, f)));
  const staged: string[] = [];
  for (const [src, dest] of journal.renames) {
    const from = resolve(out, src);
    if (!existsSync(from)) continue;
    staged.push(from);
    gone.add(resolve(out, dest));
  }
  return [...files.filter((f) => !gone.has(f)), ...staged];
}

/**
 * A bench's scratch folder (meter CSVs, spools, key files of the processes it starts), removed when
 * the bench exits: a run left one or more in the temporary directory for good.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const made: string[] = [];
// Registered after start-process.ts's own exit handler when imported after it: its children are told to stop first.
process.on('exit', () => made.forEach((dir) => rmSync(dir, { recursive: true, force: true })));

export function scratchDir(prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  made.push(dir);
  return dir;
}

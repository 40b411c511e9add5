// Vitest's global setup: a temporary folder of this run's own, which the test files' temporary
// folders (mkdtemp under os.tmpdir()) go into, removed when the run ends. Without it every run left
// hundreds of folders in /tmp (gateways' CSVs, spools, routing maps, concierge files).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export default function setup(): () => void {
  const dir = mkdtempSync(join(tmpdir(), 'ai-reliability-tests-'));
  // os.tmpdir() reads TMPDIR; the test workers start after this, with this environment.
  process.env.TMPDIR = dir;
  return () => rmSync(dir, { recursive: true, force: true });
}

/**
 * Child processes the tests start (gateways above all), tracked so that none outlives its test: a
 * failed assertion or a timeout skips the test's own stop, and a gateway left running holds its
 * port, its files and a core. After every test, whatever its outcome, each one still running is
 * killed (SIGKILL) and waited for (vitest.config.ts runs this file before every test file, which
 * registers the hook); any still running when the test process exits is killed then.
 *
 * `spawn` is node's, tracked; `track` takes a child made otherwise (execFile). A child that starts
 * processes of its own is spawned `detached`, so that they are killed with it.
 */
import { spawn as nodeSpawn, type ChildProcess } from 'node:child_process';
import { afterEach } from 'vitest';

const running = new Set<ChildProcess>();

export function track<T extends ChildProcess>(child: T): T {
  running.add(child);
  child.once('exit', () => running.delete(child));
  return child;
}

export const spawn = ((...args: Parameters<typeof nodeSpawn>) => track(nodeSpawn(...args))) as typeof nodeSpawn;

/**
 * Kills a child unless it has exited, and waits for its exit. A child spawned `detached` leads its
 * own process group, which goes with it (`npm run` and `tsx` start node beneath them).
 */
function kill(child: ChildProcess): Promise<void> {
  running.delete(child);
  if (child.exitCode !== null || child.signalCode !== null || child.pid === undefined) return Promise.resolve();
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  signal(child, 'SIGKILL');
  return exited;
}

function signal(child: ChildProcess, name: NodeJS.Signals): void {
  try {
    process.kill(-child.pid!, name); // its group, when it leads one
  } catch {
    child.kill(name);
  }
}

export async function killChildren(): Promise<void> {
  await Promise.all([...running].map(kill));
}

afterEach(killChildren);
process.once('exit', () => {
  for (const child of running) signal(child, 'SIGKILL');
});

/**
 * Child processes the tests start (gateways above all), tracked so that none outlives its test: a
 * failed assertion or a timeout skips the test's own stop, and a gateway left running holds its
 * port, its files and a core. After every test, whatever its outcome, each one still running is
 * killed (SIGKILL) and waited for (vitest.config.ts runs this file before every test file, which
 * registers the hook); any still running when the test process exits is killed then.
 *
 * `spawn` is node's, tracked; `track` takes a child made otherwise (execFile).
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

/** Kills a child unless it has exited, and waits for its exit. */
function kill(child: ChildProcess): Promise<void> {
  running.delete(child);
  if (child.exitCode !== null || child.signalCode !== null || child.pid === undefined) return Promise.resolve();
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill('SIGKILL');
  return exited;
}

export async function killChildren(): Promise<void> {
  await Promise.all([...running].map(kill));
}

afterEach(killChildren);
process.once('exit', () => {
  for (const child of running) child.kill('SIGKILL');
});

/**
 * Real gateway processes (`gateway/dist/main.js`, built by `npm run build:gateway`) started from one
 * working directory, as `PORT=… npm start` would be: the tests that need a kill -9 use these.
 */
import type { ChildProcess } from 'node:child_process';
import { spawn } from '../children';
import { join } from 'node:path';

const root = join(import.meta.dirname, '..', '..');

/** Waits for a condition that other processes or timers make true; fails after `ms`. */
export async function until<T>(what: string, probe: () => T | Promise<T>, ms = 10_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const value = await probe();
    if (value) return value;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

export interface Instance {
  url: string;
  pid: number;
  child: ChildProcess;
  output(): string;
  exited: Promise<number | null>;
  /** SIGTERM and wait for the exit (a clean stop: requests finish, the meter is flushed). */
  stop(): Promise<void>;
  /** kill -9: nothing is flushed, nothing is closed. */
  crash(): Promise<void>;
}

/** Spawns one gateway in `cwd` with `env` (plus PATH and PORT=0) and waits until it listens. */
export async function startInstance(cwd: string, env: Record<string, string>): Promise<Instance> {
  const child = spawn(process.execPath, [join(root, 'gateway/dist/main.js')], {
    cwd,
    env: { PATH: process.env.PATH, PORT: '0', WORKER: 'off', LOG_LEVEL: 'info', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout!.on('data', (d) => (out += d));
  child.stderr!.on('data', (d) => (out += d));
  const exited = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
  let gone = false;
  void exited.then(() => (gone = true));
  const port = await until(`a gateway to listen (output: ${out.slice(-400)})`, () => gone || /listening on :(\d+)/.exec(out)?.[1]);
  if (port === true) throw new Error(`the gateway exited: ${out}`);
  return {
    url: `http://127.0.0.1:${port}`,
    pid: child.pid!,
    child,
    output: () => out,
    exited,
    async stop() {
      if (!gone) child.kill('SIGTERM');
      await exited;
    },
    async crash() {
      if (!gone) child.kill('SIGKILL');
      await exited;
    },
  };
}

/** Runs `n` chat requests spread over `urls`, `concurrency` at a time; returns their statuses. */
export async function chats(urls: string[], n: number, concurrency = 16): Promise<number[]> {
  const statuses: number[] = [];
  let next = 0;
  const lane = async () => {
    while (next < n) {
      const i = next++;
      const res = await fetch(`${urls[i % urls.length]}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: `hi ${i}` }] }),
      });
      await res.arrayBuffer();
      statuses.push(res.status);
    }
  };
  await Promise.all(Array.from({ length: concurrency }, lane));
  return statuses;
}

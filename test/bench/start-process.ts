/**
 * A bench's child process: `node args` (under a wrapper such as valgrind when one is given), resolved
 * once its output matches `ready`, with the match's first group (the port it printed). Every one is
 * stopped when the bench ends, however it ends, so none is left behind.
 */
import { spawn, type ChildProcess } from 'node:child_process';

export interface BenchProcess {
  pid: number;
  /** `ready`'s first group; empty when it has none. */
  port: string;
  stop: () => void;
}

const running = new Set<() => void>();
process.on('exit', () => running.forEach((stop) => stop()));

export function startProcess(args: string[], env: Record<string, string>, ready: RegExp, wrapper: string[] = []): Promise<BenchProcess> {
  const [command, ...argv] = [...wrapper, process.execPath, ...args];
  // A wrapper's own output (valgrind's) stays out of the bench's; its tail explains an early exit.
  const stdio = ['ignore', 'pipe', wrapper.length ? 'pipe' : 'inherit'] as const;
  const child: ChildProcess = spawn(command, argv, { env: { PATH: process.env.PATH!, ...env }, stdio: [...stdio] });
  // Under a wrapper a graceful stop takes seconds, and may write into a folder already removed.
  const stop = () => {
    running.delete(stop);
    if (child.exitCode === null) child.kill(wrapper.length ? 'SIGKILL' : 'SIGTERM');
  };
  running.add(stop);
  return new Promise((resolve, reject) => {
    let out = '';
    let err = '';
    child.stderr?.on('data', (d) => (err = (err + d).slice(-2000)));
    child.stdout!.on('data', (d) => {
      out += d;
      const m = ready.exec(out);
      if (m) resolve({ pid: child.pid!, port: m[1] ?? '', stop });
    });
    child.on('error', reject);
    child.on('exit', (code) => reject(new Error(`${command} ${argv.join(' ')} exited ${code}: ${out}${err}`)));
  });
}

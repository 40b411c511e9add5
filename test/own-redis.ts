/**
 * A redis-server of a test's own, on a free loopback port, for what the test run's shared Redis must
 * not go through: stopped and started again, frozen, filled to its memory limit, demoted in a
 * failover. Killed when its test ends, whatever its outcome (children.ts), its folder removed by end().
 * Needs a redis-server binary (hasRedisServer, redis-db.ts).
 */
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { spawn } from './children';

export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  await new Promise((r) => server.close(r));
  return port;
}

export class OwnRedis {
  private child: ChildProcess | null = null;
  readonly dir = mkdtempSync(join(tmpdir(), 'own-redis-'));
  port = 0;

  /** `args`: the server's settings beyond its port, folder and no snapshots (an append-only file, a memory limit, a primary to follow). */
  constructor(private readonly args: string[] = []) {}

  get url() {
    return `redis://127.0.0.1:${this.port}/0`;
  }

  /** Starts it (again, on the same port and folder) and waits until it answers. */
  async start(): Promise<this> {
    this.port ||= await freePort();
    const base = ['--port', String(this.port), '--bind', '127.0.0.1', '--dir', this.dir, '--save', ''];
    this.child = spawn('redis-server', [...base, ...this.args], { stdio: 'ignore' });
    const probe = new Redis(this.url, { lazyConnect: true, retryStrategy: () => 20, maxRetriesPerRequest: null });
    probe.on('error', () => undefined); // refused until the server listens
    for (const end = Date.now() + 10_000; (await probe.ping().catch(() => '')) !== 'PONG';) {
      if (Date.now() > end) throw new Error(`redis-server on port ${this.port} did not answer within 10 s`);
      await new Promise((r) => setTimeout(r, 20));
    }
    probe.disconnect();
    return this;
  }

  /** Stops it as a restart or an upgrade would (SHUTDOWN: the append-only file is flushed first). */
  async stop(): Promise<void> {
    const child = this.child!;
    const exited = new Promise((r) => child.once('exit', r));
    const c = new Redis(this.url, { maxRetriesPerRequest: 1, retryStrategy: () => null });
    c.on('error', () => undefined);
    await c.call('SHUTDOWN').catch(() => undefined); // the connection closes as the server exits
    c.disconnect();
    await exited;
    this.child = null;
  }

  /** A stall past any bound of the code under test: the process stops (SIGSTOP), connected but answering nothing, until thaw(). */
  freeze(): void {
    this.child!.kill('SIGSTOP');
  }

  thaw(): void {
    this.child!.kill('SIGCONT');
  }

  async end(): Promise<void> {
    this.child?.kill('SIGKILL');
    rmSync(this.dir, { recursive: true, force: true });
  }
}

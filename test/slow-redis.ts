/**
 * A slow Redis: a loopback proxy in front of the test run's Redis that holds what Redis sends back
 * `delayMs` before passing it on, in order, so each command's round trip takes that much longer.
 * Connected and answering, only late: not a stall.
 */
import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';

export class SlowRedis {
  private server!: Server;
  private readonly links = new Set<() => void>();
  port = 0;

  constructor(public delayMs = 0) {}

  url(db: number): string {
    return `redis://127.0.0.1:${this.port}/${db}`;
  }

  async start(): Promise<this> {
    this.server = createServer((client) => this.pipe(client));
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    this.port = (this.server.address() as AddressInfo).port;
    return this;
  }

  private pipe(client: Socket): void {
    const redis = connect(6379, '127.0.0.1');
    const end = () => (client.destroy(), redis.destroy(), this.links.delete(end));
    this.links.add(end);
    client.on('data', (d) => redis.write(d));
    this.late(redis, client);
    for (const s of [client, redis]) s.on('error', end).on('close', end);
  }

  /** Each chunk passed on `delayMs` after it came, never before the one ahead of it. */
  private late(from: Socket, to: Socket): void {
    let last = 0;
    from.on('data', (chunk) => {
      const due = Math.max(Date.now() + this.delayMs, last);
      last = due;
      setTimeout(() => to.writable && to.write(chunk), due - Date.now());
    });
  }

  async stop(): Promise<void> {
    for (const end of [...this.links]) end();
    await new Promise((r) => this.server.close(r));
  }
}

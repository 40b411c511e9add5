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

  /** Each chunk passed on `delayMs` after it came, in order: one queue, one timer at a time. */
  private late(from: Socket, to: Socket): void {
    const held: Array<{ due: number; chunk: Buffer }> = [];
    let timer: NodeJS.Timeout | null = null;
    const pass = () => {
      timer = null;
      while (held.length && held[0].due <= Date.now()) {
        const { chunk } = held.shift()!;
        if (to.writable) to.write(chunk);
      }
      if (held.length) timer = setTimeout(pass, held[0].due - Date.now());
    };
    from.on('data', (chunk: Buffer) => {
      held.push({ due: Date.now() + this.delayMs, chunk });
      timer ??= setTimeout(pass, this.delayMs);
    });
  }

  async stop(): Promise<void> {
    for (const end of [...this.links]) end();
    await new Promise((r) => this.server.close(r));
  }
}

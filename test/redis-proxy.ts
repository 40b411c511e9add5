/**
 * A loopback proxy in front of the test run's Redis that plays the network: `delayMs` holds what
 * Redis sends back that long before passing it on, in order (a slow Redis: connected and answering,
 * only late, not a stall); `cut` makes the connections open now carry nothing more while they stay
 * open (a link that died without a word), and a new connection reaches Redis as before;
 * `loseNextReply` closes the connection that Redis next answers on instead of passing the answer on
 * (a link lost after Redis ran a command and before its answer came back: ioredis sends the command
 * again on its new connection; with `meanwhile`, that new connection waits for it); `loseReplyTo` does so on the connection that next sends a command
 * holding the text given, once Redis answers it (its commands sent before answered already);
 * `cutOn` cuts them when one sends a command holding the text given (a link that dies mid-command);
 * `holdUntil` holds a command until something else has been done.
 */
import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';

interface Link {
  carries: boolean;
  /** The next answer Redis sends on it is lost with it (loseReplyTo). */
  losing?: boolean;
  end: () => void;
}

export class RedisProxy {
  private server!: Server;
  private readonly links = new Set<Link>();
  private losing = false;
  private losingTo: string | null = null;
  private cutAt: string | null = null;
  private holding: { holds: (chunk: string) => boolean; meanwhile: () => Promise<unknown> } | null = null;
  /** New connections wait for it (loseNextReply's `meanwhile`). */
  private gate: Promise<unknown> | null = null;
  private meanwhile: (() => Promise<unknown>) | null = null;
  port = 0;

  /** What Redis sends back passes at most this fast (0: as fast as it comes): a slow link, every byte carried. */
  bytesPerS = 0;

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
    if (this.gate) {
      client.pause();
      void this.gate.finally(() => client.resume());
    }
    const redis = connect(6379, '127.0.0.1');
    const link: Link = { carries: true, end: () => (client.destroy(), redis.destroy(), this.links.delete(link)) };
    this.links.add(link);
    client.on('data', (d: Buffer) => {
      if (this.cutAt !== null && d.includes(this.cutAt)) {
        this.cutAt = null;
        this.cut();
      }
      if (this.losingTo !== null && d.includes(this.losingTo)) {
        this.losingTo = null;
        link.losing = true;
      }
      const holding = this.holding;
      if (holding?.holds(d.toString('latin1'))) {
        this.holding = null;
        client.pause();
        void holding.meanwhile().finally(() => (client.resume(), link.carries && redis.write(d)));
        return;
      }
      if (link.carries) redis.write(d);
    });
    this.late(redis, client, link);
    for (const s of [client, redis]) s.on('error', link.end).on('close', link.end);
  }

  /** Each chunk passed on `delayMs` after it came, in order: one queue, one timer at a time. */
  private late(from: Socket, to: Socket, link: Link): void {
    const held: Array<{ due: number; chunk: Buffer }> = [];
    let timer: NodeJS.Timeout | null = null;
    const pass = () => {
      timer = null;
      while (held.length && held[0].due <= Date.now()) {
        const { chunk } = held.shift()!;
        if (to.writable && link.carries) to.write(chunk);
      }
      if (held.length) timer = setTimeout(pass, held[0].due - Date.now());
    };
    from.on('data', (chunk: Buffer) => {
      if (this.losing || link.losing) {
        this.losing = false;
        if (this.meanwhile) [this.gate, this.meanwhile] = [this.meanwhile().catch(() => undefined), null];
        return link.end();
      }
      if (!this.delayMs && !this.bytesPerS) return void (link.carries && to.write(chunk));
      // A narrow link: each chunk arrives once the ones before it and itself have gone through.
      const after = this.bytesPerS ? Math.max(Date.now(), held.at(-1)?.due ?? 0) + (chunk.length * 1000) / this.bytesPerS : Date.now();
      held.push({ due: after + this.delayMs, chunk });
      timer ??= setTimeout(pass, held[0].due - Date.now());
    });
  }

  /**
   * The next answer Redis sends is lost with its connection, closed in its place; with `meanwhile`,
   * the connections opened after it carry nothing until it has settled (another client's commands
   * landing between the lost answer and the command sent again).
   */
  loseNextReply(meanwhile?: () => Promise<unknown>): void {
    this.losing = true;
    this.meanwhile = meanwhile ?? null;
  }

  /** The answer to the next command holding `text` is lost with its connection, closed in its place. */
  loseReplyTo(text: string): void {
    this.losingTo = text;
  }

  /** What a connection next sends that `holds` is passed on once `meanwhile` has settled (another client's commands landing first). */
  holdUntil(holds: (chunk: string) => boolean, meanwhile: () => Promise<unknown>): void {
    this.holding = { holds, meanwhile };
  }

  /** `cut` when a connection next sends a command holding `text`, that command not passed on. */
  cutOn(text: string): void {
    this.cutAt = text;
  }

  /** The connections open now carry nothing more, and stay open (no reset reaches the client). */
  cut(): void {
    for (const link of this.links) link.carries = false;
  }

  async stop(): Promise<void> {
    for (const link of [...this.links]) link.end();
    await new Promise((r) => this.server.close(r));
  }
}

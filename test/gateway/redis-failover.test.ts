// A failover of the gateway's Redis behind one address (a managed Redis's primary endpoint): the
// primary is demoted to a replica, its replica promoted, and the address now leads to the new
// primary, while the connections open before still reach the old one, which refuses every write
// (READONLY). Two redis-servers of the test's own, and a proxy in front of them playing the address.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterEach, beforeEach, describe, expect, it, onTestFinished } from 'vitest';
import { OwnRedis } from '../own-redis';
import { hasRedisServer } from '../redis-db';
import { FakeProvider } from './fake-provider';
import { chat } from './harness';
import { startInstance, until } from './instances';

/** A redis-server of the test's own (stopped when the test ends), with `args`, and a client of it. */
async function ownRedis(...args: string[]): Promise<{ port: number; client: Redis }> {
  const server = await new OwnRedis(['--appendonly', 'no', ...args]).start();
  onTestFinished(() => server.end());
  const client = new Redis(server.url);
  client.on('error', () => undefined); // once the server is gone at the end
  onTestFinished(() => client.disconnect());
  return { port: server.port, client };
}

/** The address: new connections go to `target`; those open stay where they were. */
class Address {
  private server!: Server;
  private readonly open = new Set<Socket>();
  port = 0;
  constructor(public target: number) {}

  async start(): Promise<this> {
    this.server = createServer((client) => {
      const redis = connect(this.target, '127.0.0.1');
      client.pipe(redis).pipe(client);
      for (const s of [client, redis]) {
        this.open.add(s);
        s.on('error', () => (client.destroy(), redis.destroy())).on('close', () => this.open.delete(s));
      }
    });
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    this.port = (this.server.address() as AddressInfo).port;
    return this;
  }

  async stop(): Promise<void> {
    for (const s of this.open) s.destroy();
    await new Promise((r) => this.server.close(r));
  }
}

const BODY = { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hello' }] };
let hot: FakeProvider;
let address: Address;

beforeEach(async () => {
  hot = await new FakeProvider().start();
});
afterEach(async () => {
  await hot.stop();
  await address?.stop();
});

describe.skipIf(!hasRedisServer)('a failover of Redis behind one address', () => {
  it(
    'the connections left on the demoted primary are made again: the Cold queue takes work and the meter stream appends',
    { timeout: 60_000 },
    async () => {
      const primary = await ownRedis();
      const replica = await ownRedis('--replicaof', '127.0.0.1', String(primary.port));
      await until('the replica in sync', async () => /master_link_status:up/.test(await replica.client.info('replication')));
      address = await new Address(primary.port).start();
      const dir = mkdtempSync(join(tmpdir(), 'failover-'));
      const routes = {
        hot: [{ provider: 'openai', model: 'gpt-4o-mini', baseUrl: hot.url }],
        warm: [],
        cold: { mode: 'graceful_degrade', queue: 'ai-tasks', notify: [] },
      };
      writeFileSync(join(dir, 'routes.json'), JSON.stringify(routes));
      const gw = await startInstance(dir, {
        ROUTES_FILE: join(dir, 'routes.json'),
        QUEUE_STORE_URL: `redis://127.0.0.1:${address.port}/0`,
        METER_URL: 'http://127.0.0.1:9/meter',
        METER_TOKEN: 'unused',
        METER_SPOOL_DIR: join(dir, 'spool'),
        SCOPES_FILE: join(dir, 'none.yaml'),
      });
      try {
        expect((await chat(gw.url, BODY)).status).toBe(200);
        const stream = await until('the answer metered', async () => (await primary.client.keys('*meter:events'))[0]);
        await until('the event on the replica', async () => (await replica.client.xlen(stream)) > 0);
        const before = await replica.client.xlen(stream);
        // The failover: the replica promoted, the primary demoted, the address moved to the new primary.
        await replica.client.replicaof('NO', 'ONE');
        await primary.client.replicaof('127.0.0.1', String(replica.port));
        address.target = replica.port;
        hot.always({ kind: 'status', status: 500 });
        // Before: every write on the connections opened before was refused READONLY for as long as the
        // process ran (the link itself healthy): each request no route answered got 503, never queued.
        await until(
          'a request queued on the new primary',
          async () => (await chat(gw.url, BODY, { 'x-time-to-answer-ms': '2000' })).status === 202,
          20_000,
        );
        const waiting = await replica.client.keys('*ai-tasks*');
        expect(waiting.length).toBeGreaterThan(0);
        // The calls that failed over there are metered too: their events appended on the new primary.
        await until('the calls metered through the new primary', async () => (await replica.client.xlen(stream)) > before);
      } finally {
        await gw.stop();
      }
    },
  );
});

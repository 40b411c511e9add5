// Breakers across instances: several whole gateways (createStack) on one real Redis, a dead route
// on a loopback provider. One instance's opening stops the others; the fleet probes once.
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer, connect, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import { FakeProvider } from './fake-provider';
import { ADMIN, chat, listenStack, mapOf, startGateway } from './harness';
import { until } from './keys-harness';
import { TEST_REDIS_DB, TEST_REDIS_URL } from '../redis-db';

const REDIS_URL = TEST_REDIS_URL;
const prefix = `test-fleet-breakers-${process.pid}`;
const redis = new Redis(REDIS_URL);
type Instance = Awaited<ReturnType<typeof listenStack>>;
let hot: FakeProvider, warm: FakeProvider;
let fleet: Instance[] = [];
let dir: string;

beforeEach(async () => {
  [hot, warm] = await Promise.all([new FakeProvider().start(), new FakeProvider().start()]);
  dir = mkdtempSync(join(tmpdir(), 'fleet-breakers-'));
  writeFileSync(
    join(dir, 'routes.json'),
    JSON.stringify({
      hot: [{ id: 'primary', provider: 'openai', model: 'gpt-4o-mini', baseUrl: hot.url }],
      warm: [{ id: 'backup', provider: 'anthropic', model: 'claude-3-5-haiku-latest', baseUrl: warm.url }],
      cold: { mode: 'graceful_degrade', queue: 'ai-tasks', notify: [] },
    }),
  );
});
afterEach(async () => {
  await Promise.all(fleet.map((i) => i.stop()));
  fleet = [];
  await Promise.all([hot.stop(), warm.stop()]);
  const keys = await redis.keys(`${prefix}*`);
  if (keys.length) await redis.del(...keys);
});
afterAll(() => redis.disconnect());

async function instance(n: number, openMs?: number, redisUrl = REDIS_URL): Promise<Instance> {
  const env = {
    ROUTES_FILE: join(dir, 'routes.json'),
    QUEUE_STORE_URL: redisUrl,
    REDIS_PREFIX: prefix,
    ADMIN_TOKEN: ADMIN,
    METER_CSV_FILE: join(dir, `events-${n}.csv`),
    SCOPES_FILE: join(dir, 'none.yaml'),
  };
  const started = await listenStack(env, { http: true, worker: false, breaker: openMs ? { openMs } : undefined });
  fleet.push(started);
  return started;
}

const primary = (i: Instance) => i.stack.path.routes.find((r) => r.label === 'primary')!.breaker;
const health = async (i: Instance) =>
  (await (await fetch(`${i.url}/health`, { headers: { authorization: `Bearer ${ADMIN}` } })).json()) as {
    routes: Array<{ id: string; breaker: string }>;
    routes_map: { version: string };
  };

describe('breakers across instances', () => {
  it('one instance opens the breaker; the others stop calling the route, and one started later knows', async () => {
    hot.always({ kind: 'status', status: 500 });
    const [a, b, c] = await Promise.all([instance(1), instance(2), instance(3)]);
    while (primary(a).state() !== 'open') expect((await chat(a.url)).headers.get('x-route-tier')).toBe('warm');
    expect(hot.received).toHaveLength(5);
    await until(async () => primary(b).state() === 'open' && primary(c).state() === 'open', 5000);
    expect((await health(b)).routes.find((r) => r.id === 'primary')?.breaker).toBe('open');
    for (const i of [b, c]) expect((await chat(i.url)).headers.get('x-route-tier')).toBe('warm');
    const late = await instance(4);
    expect(primary(late).state()).toBe('open');
    expect((await chat(late.url)).headers.get('x-route-tier')).toBe('warm');
    expect(hot.received).toHaveLength(5); // no instance called the dead route again
  });

  it('one started while the fleet has the route half-open shows no time open: it was never open there', async () => {
    hot.always({ kind: 'status', status: 500 });
    const a = await instance(1, 300);
    while (primary(a).state() !== 'open') await chat(a.url);
    await until(async () => (await redis.keys(`${prefix}*:primary:*:open`)).length === 0, 5000); // half-open in the fleet
    const late = await instance(2, 300);
    expect(primary(late).state()).toBe('half-open');
    const metrics = await (await fetch(`${late.url}/metrics`, { headers: { authorization: `Bearer ${ADMIN}` } })).text();
    // before: 0.3, the whole open period the other instance had before this one started
    expect(metrics).toContain('gateway_breaker_open_seconds_total{route="primary"} 0\n');
  });

  it('three instances under load: a dead route gets at most 5 failing calls plus one in flight per other instance', async () => {
    hot.always({ kind: 'status', status: 503 });
    const three = await Promise.all([instance(1), instance(2), instance(3)]);
    const allOpen = () => three.every((i) => primary(i).state() === 'open');
    // Each instance serves one request at a time, as a client behind a load balancer would see it.
    await Promise.all(
      three.map(async (i) => {
        for (let n = 0; n < 10 && !allOpen(); n++) expect((await chat(i.url)).status).toBe(200);
      }),
    );
    await until(async () => allOpen(), 5000);
    expect(hot.received.length).toBeGreaterThanOrEqual(5);
    expect(hot.received.length).toBeLessThanOrEqual(5 + 2);
  });

  it('in half-open one instance probes for the whole fleet; its probes close every breaker', async () => {
    const openMs = 3000;
    hot.always({ kind: 'status', status: 500 });
    const three = await Promise.all([instance(1, openMs), instance(2, openMs), instance(3, openMs)]);
    const [a] = three;
    while (primary(a).state() !== 'open') await chat(a.url);
    await until(async () => three.every((i) => primary(i).state() === 'open'), 5000);
    hot.always({ kind: 'ok' });
    const before = hot.received.length;
    await until(async () => three.every((i) => primary(i).state() === 'half-open'), 10_000);
    // Within one probe period, every instance has requests for the route: one probe in all.
    for (let round = 0; round < 4; round++) await Promise.all(three.map((i) => chat(i.url)));
    expect(hot.received.length - before).toBe(1);
    // The next period's probe (the second success) closes the breaker on every instance.
    await until(async () => {
      await Promise.all(three.map((i) => chat(i.url)));
      return three.every((i) => primary(i).state() === 'closed');
    }, 15_000);
    expect((await chat(three[2].url)).headers.get('x-route-tier')).toBe('hot');
  });

  it('a success adds no Redis call; a failed call adds one round trip', async () => {
    const a = await instance(1);
    const commands: string[] = [];
    const redisOf = a.stack.redis!;
    const send = redisOf.sendCommand.bind(redisOf);
    redisOf.sendCommand = ((command: { name: string; args: unknown[] }) => {
      if (command.args.some((x) => String(x).includes(':breaker')) || ['multi', 'exec'].includes(command.name)) commands.push(command.name);
      return send(command as never);
    }) as typeof redisOf.sendCommand;
    for (let n = 0; n < 20; n++) expect((await chat(a.url)).headers.get('x-route-tier')).toBe('hot');
    expect(commands).toEqual([]);
    hot.next({ kind: 'status', status: 500 });
    expect((await chat(a.url)).headers.get('x-route-tier')).toBe('hot'); // failed once, then answered
    await until(async () => commands.length >= 9);
    // The failure: one MULTI (the count, its expiry, the announcement); the success after it: one MULTI
    // that resets the count and tells the other instances the route answered.
    expect(commands).toEqual(['multi', 'incr', 'pexpire', 'publish', 'exec', 'multi', 'del', 'publish', 'exec']);
  });

  it('a reload on one instance: /health tells the versions apart, and the unchanged route keeps its shared breaker', async () => {
    hot.always({ kind: 'status', status: 500 });
    const [a, b] = await Promise.all([instance(1), instance(2)]);
    const v1 = (await health(b)).routes_map.version;
    while (primary(a).state() !== 'open') await chat(a.url);
    await until(async () => primary(b).state() === 'open', 5000);
    const file = join(dir, 'routes.json');
    const map = JSON.parse(readFileSync(file, 'utf8'));
    map.warm.push({ id: 'backup-2', provider: 'anthropic', model: 'claude-3-5-haiku-latest', baseUrl: warm.url });
    writeFileSync(file, JSON.stringify(map));
    const res = await fetch(`${a.url}/admin/routes/reload`, { method: 'POST', headers: { authorization: `Bearer ${ADMIN}` } });
    expect(await res.json()).toMatchObject({ added: ['backup-2'], removed: [], changed: [] });
    const [ha, hb] = await Promise.all([health(a), health(b)]);
    expect(ha.routes_map.version).not.toBe(v1);
    expect(hb.routes_map.version).toBe(v1);
    expect(ha.routes.find((r) => r.id === 'primary')?.breaker).toBe('open');
    expect((await chat(a.url)).headers.get('x-route-tier')).toBe('warm');
    expect(hot.received).toHaveLength(5);
  });

  /**
   * Two instances whose breakers for the primary opened (3 s open periods) and are half-open again
   * with the provider back; a has probed once (the first success of two): it holds the fleet's probe lease.
   */
  async function probingOnA() {
    const openMs = 3000;
    hot.always({ kind: 'status', status: 500 });
    const [a, b] = await Promise.all([instance(1, openMs), instance(2, openMs)]);
    while (primary(a).state() !== 'open') await chat(a.url);
    await until(async () => primary(b).state() === 'open', 5000);
    hot.always({ kind: 'ok' });
    await until(async () => primary(a).state() === 'half-open' && primary(b).state() === 'half-open', 10_000);
    await until(async () => (await chat(a.url)).headers.get('x-route-tier') === 'hot', 5000);
    return [a, b] as const;
  }

  it('a reload that replaces a route on the instance probing it gives the probe back: another instance probes at once', async () => {
    const [a, b] = await probingOnA();
    const leases = () => redis.keys(`${prefix}:breaker:primary:*:probe`);
    expect(await leases()).toHaveLength(1);

    const file = join(dir, 'routes.json');
    const map = JSON.parse(readFileSync(file, 'utf8'));
    map.hot[0].model = 'gpt-4o'; // same id, another endpoint: a's old primary is no longer in force there
    writeFileSync(file, JSON.stringify(map));
    const res = await fetch(`${a.url}/admin/routes/reload`, { method: 'POST', headers: { authorization: `Bearer ${ADMIN}` } });
    expect(await res.json()).toMatchObject({ changed: ['primary'] });
    // b, still on the old map, may take the probe now, not once a's lease has lapsed.
    expect(await leases()).toEqual([]);
    await until(async () => (await chat(b.url)).headers.get('x-route-tier') === 'hot', 5000);
  });

  it('an instance that stops while it holds the probe lease: another instance that was refused the lease probes at once, not once it has lapsed', async () => {
    const [a, b] = await probingOnA();
    // b has traffic too: its request finds the lease a's, and goes on to the next route.
    expect((await chat(b.url)).headers.get('x-route-tier')).toBe('warm');
    await a.stop();
    fleet.splice(fleet.indexOf(a), 1);
    const given = performance.now();
    await until(async () => (await chat(b.url)).headers.get('x-route-tier') === 'hot', 10_000);
    expect(performance.now() - given).toBeLessThan(1000); // the lease would have lapsed 6 s after a's probe
  });

  it("an instance that stops after its probe lease lapsed and another took it: the other's lease is left alone", async () => {
    const [a, b] = await probingOnA();
    expect((await chat(b.url)).headers.get('x-route-tier')).toBe('warm');
    // a's lease lapsed (a probe streaming longer than two open periods) and a third instance took it.
    const [lease] = await redis.keys(`${prefix}*:primary:*:probe`);
    await redis.set(lease, 'another-instance', 'PX', 60_000);
    await a.stop();
    fleet.splice(fleet.indexOf(a), 1);
    expect(await redis.get(lease)).toBe('another-instance');
    expect((await chat(b.url)).headers.get('x-route-tier')).toBe('warm');
  });

  it('while Redis does not answer, a breaker still probes and closes on its own', async () => {
    const link = await new RedisLink().open();
    try {
      hot.always({ kind: 'status', status: 500 });
      const a = await instance(1, 500, link.url);
      while (primary(a).state() !== 'open') await chat(a.url);
      link.cut();
      hot.always({ kind: 'ok' });
      await until(async () => {
        await chat(a.url);
        return primary(a).state() === 'closed';
      }, 10_000);
      expect((await chat(a.url)).headers.get('x-route-tier')).toBe('hot');
      await link.open(); // the store answers again, so the stack can stop cleanly
    } finally {
      link.cut();
    }
  });
});

describe('after a reconnection to Redis', () => {
  it('a breaker half-open here and in the fleet stays half-open: no false opening', async () => {
    const link = await new RedisLink().open();
    try {
      hot.always({ kind: 'status', status: 500 });
      const a = await instance(1, 300, link.url);
      while (primary(a).state() !== 'open') await chat(a.url);
      await until(async () => (await redis.keys(`${prefix}*:primary:*:open`)).length === 0 && primary(a).state() === 'half-open', 5000);
      const changes: string[] = [];
      primary(a).onChange((state) => changes.push(state));
      link.cut();
      await link.open();
      // The read after the reconnection asks for the probe lease of a route half-open: it was made.
      await until(async () => (await redis.keys(`${prefix}*:primary:*:probe`)).length === 1, 10_000);
      // before: open, then half-open again: a "breaker open" log line though nothing failed
      expect(changes).toEqual([]);
    } finally {
      link.cut();
    }
  });

  it('a closing the instance did not hear (its link to Redis down then) is read after the reconnection: the route closes there too', async () => {
    const link = await new RedisLink().open();
    try {
      hot.always({ kind: 'status', status: 500 });
      const a = await instance(1, 300);
      const b = await instance(2, 60_000, link.url);
      while (primary(a).state() !== 'open') await chat(a.url);
      await until(async () => primary(b).state() === 'open');
      link.cut();
      hot.always({ kind: 'ok' });
      // a's probes close the route for the fleet; b hears nothing of it.
      await until(async () => {
        await chat(a.url);
        return primary(a).state() === 'closed';
      }, 10_000);
      expect(primary(b).state()).toBe('open');
      await link.open();
      // before: b kept the route open for the rest of its 60 s, its traffic sent to the Warm route
      await until(async () => primary(b).state() === 'closed', 5000);
      expect((await chat(b.url)).headers.get('x-route-tier')).toBe('hot');
    } finally {
      link.cut();
    }
  });

  it('the instance that holds the probe lease keeps it: its next probe goes when due', async () => {
    const link = await new RedisLink().open();
    try {
      hot.always({ kind: 'status', status: 500 });
      const a = await instance(1, 3000, link.url);
      while (primary(a).state() !== 'open') await chat(a.url);
      await until(async () => primary(a).state() === 'half-open', 10_000);
      hot.always({ kind: 'ok' });
      // The first probe, once a has asked for the lease and got it.
      await until(async () => (await chat(a.url)).headers.get('x-route-tier') === 'hot');
      const [lease] = await redis.keys(`${prefix}*:primary:*:probe`);
      // Held until a gives it back, so that only a's knowing its own lease lets it probe.
      await redis.persist(lease);
      link.cut();
      await link.open();
      // The second probe is due 3 s after the first; the lease would have lapsed at 6 s.
      // before: the read after the reconnection asked for the lease again, was refused (a's own), and no instance probed
      await until(async () => (await chat(a.url)).headers.get('x-route-tier') === 'hot', 5000);
      expect(primary(a).state()).toBe('closed');
    } finally {
      link.cut();
    }
  });
});

describe('route identity', () => {
  it('two routes of one provider and model have their own metric series and log lines', async () => {
    hot.always({ kind: 'status', status: 500 });
    const gw = await startGateway(mapOf([hot.url, warm.url])); // both openai gpt-4o-mini
    try {
      while (gw.gateway.path.routes[0].breaker.state() !== 'open') expect((await chat(gw.url)).status).toBe(200);
      const metrics = await (await fetch(`${gw.url}/metrics`, { headers: { authorization: `Bearer ${ADMIN}` } })).text();
      expect(metrics).toContain('gateway_breaker_state{route="hot-1"} 2');
      expect(metrics).toContain('gateway_breaker_state{route="hot-2"} 0');
      expect(metrics).toContain('gateway_route_calls_total{route="hot-1",outcome="http_500"} 5');
      expect(metrics).toMatch(/gateway_route_calls_total\{route="hot-2",outcome="ok"\} [1-9]/);
      const opened = gw.logs.map((l) => JSON.parse(l)).filter((l) => l.msg === 'breaker open');
      expect(opened.map((l) => l.route)).toEqual(['hot-1']);
    } finally {
      await gw.close();
    }
  });
});

/** A TCP link to the test Redis that the test can cut (every connection dropped, new ones refused). */
class RedisLink {
  private server: Server | null = null;
  private readonly sockets = new Set<Socket>();
  private port = 0;
  get url() {
    return `redis://127.0.0.1:${this.port}/${TEST_REDIS_DB}`;
  }
  async open(): Promise<this> {
    this.server = createServer((client) => {
      const upstream = connect(6379, '127.0.0.1');
      for (const s of [client, upstream]) {
        this.sockets.add(s);
        s.on('close', () => this.sockets.delete(s));
        s.on('error', () => {});
      }
      client.pipe(upstream).pipe(client);
    });
    await new Promise<void>((resolve) => this.server!.listen(this.port, '127.0.0.1', resolve));
    this.port = (this.server.address() as { port: number }).port;
    return this;
  }
  cut(): void {
    this.server?.close();
    this.server = null;
    for (const s of this.sockets) s.destroy();
  }
}

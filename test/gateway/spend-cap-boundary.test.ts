// Spend exactly at a cap is within it (schema/spend-cap.ts), on the gateway as on the meter: sums of
// costs carry float noise (0.1 + 0.1 + 0.1 = 0.30000000000000004), which must not tip the gateway
// over a cap the meter says is not exceeded.
import { mkdtempSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { capExceeded, SpendWatch } from '../../gateway/src/spend-cap-routing';
import { MemorySpendDays } from '../../gateway/src/spend-days';
import { FakeProvider } from './fake-provider';
import { chat, listenStack, writeOneRouteMap } from './harness';

/** What the provider reports each call cost. */
const CALL_USD = 0.1;
let hot: FakeProvider;
let dir = '';
const running: Array<{ stop: () => Promise<void> }> = [];
const servers: Server[] = [];

beforeEach(async () => {
  hot = await new FakeProvider().start();
  hot.always({ kind: 'ok', usage: { prompt_tokens: 12, completion_tokens: 5, cost: CALL_USD } as never });
  dir = mkdtempSync(join(tmpdir(), 'spend-cap-boundary-'));
});
afterEach(async () => {
  for (const r of running.splice(0)) await r.stop();
  for (const s of servers.splice(0)) s.close();
  await hot.stop();
});

/** One gateway in process (no Redis): its spend per day counted by itself. */
async function gateway(env: Record<string, string>) {
  const routes = join(dir, 'routes.json');
  writeOneRouteMap(routes, hot.url);
  const app = await listenStack({
    ROUTES_FILE: routes,
    METER_CSV_FILE: join(dir, 'events.csv'),
    METER_SPOOL_DIR: join(dir, 'spool'),
    SCOPES_FILE: join(dir, 'none.yaml'),
    ...env,
  });
  running.push(app);
  return app;
}

/** A meter on loopback answering its spend read with these figures. */
async function meterWith(figures: { today_cost_usd: unknown; last_7d_cost_usd: unknown; daily_cap_usd: number }): Promise<string> {
  const server = createServer((req, res) => {
    req.resume();
    const spend = new URL(req.url!, 'http://x').searchParams.get('action') === 'spend';
    const body = spend ? { ok: true, ...figures, burn_7d_cap_usd: 200, cap_exceeded: false } : { ok: true, appended: 0, duplicates: 0 };
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(body));
  });
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}/exec`;
}

/** A request that may wait: routed (200) within the caps, queued (202) over them. */
const patient = async (url: string) => (await chat(url, undefined, { 'x-must-have-answer': 'false' })).status;

describe('spend exactly at a cap', () => {
  it('without a meter: three calls of $0.10 under a $0.30 cap leave the fourth request routed; a fifth is queued', async () => {
    const gw = await gateway({ DAILY_CAP_USD: '0.3' });
    for (let i = 0; i < 3; i++) expect(await patient(gw.url)).toBe(200);
    expect(await patient(gw.url)).toBe(200); // $0.30 spent: equal to the cap, still within it
    expect(await patient(gw.url)).toBe(202); // $0.40: over
  });

  it('with a meter at $0.20 of a $0.30 cap: one call of $0.10 since its read leaves the next request routed', async () => {
    const meter = await meterWith({ today_cost_usd: 0.2, last_7d_cost_usd: 0.2, daily_cap_usd: 0.3 });
    const gw = await gateway({ METER_URL: meter, METER_TOKEN: 't' });
    expect(await patient(gw.url)).toBe(200);
    expect(await patient(gw.url)).toBe(200); // $0.20 + $0.10 = the cap: within it
    expect(await patient(gw.url)).toBe(202);
  });
});

describe("the meter's 7-day figure after the UTC day turns", () => {
  const DAY_MS = 86_400_000;
  const D = Date.UTC(2026, 10, 20); // midnight of day D

  /** Spend-cap routing's figures at the instant `at` says, the meter read once near the end of day D. */
  async function watchAt(meterUrl: string, at: { ms: number }) {
    const days = new MemorySpendDays(() => at.ms);
    const watch = new SpendWatch({ meterUrl, meterToken: 't', dailyCap: 50, burnCap: 200, warn: () => {}, now: () => at.ms, days });
    return { days, watch };
  }

  it("the day that left the window since the meter's read no longer counts: $28 a day under a $200 cap stays under it past midnight", async () => {
    // Days D-6 .. D at $28 each: $196 of a $200 7-day cap, as the meter says at 23:59:30 on D.
    const meter = await meterWith({ today_cost_usd: 28, last_7d_cost_usd: 196, daily_cap_usd: 50 });
    const at = { ms: D - 6 * DAY_MS + 3600_000 };
    const { watch } = await watchAt(meter, at);
    for (let d = 6; d >= 0; d--) {
      at.ms = D - d * DAY_MS + 3600_000;
      for (let i = 0; i < 28; i++) watch.record(1);
    }
    at.ms = D + DAY_MS - 30_000;
    const before = await watch.view(); // the meter read, 30 s before midnight
    expect(capExceeded(before)).toBe(false);
    at.ms = D + DAY_MS + 10_000; // 00:00:10 on D+1: $5 spent since midnight
    for (let i = 0; i < 5; i++) watch.record(1);
    const after = await watch.view();
    expect(after.last7d).toBeCloseTo(196 - 28 + 5, 6); // D-6 left the window
    expect(capExceeded(after)).toBe(false);
  });
});

describe("a meter read that crosses midnight: the meter's figures are of its own UTC day", () => {
  const DAY_MS = 86_400_000;
  const D = Date.UTC(2026, 10, 20);
  const dayText = (ms: number) => new Date(ms).toISOString().slice(0, 10);
  /** The meter's answer on D (its 7 days D-6 .. D) and, past its midnight, on D+1 (nothing yet; D-5 .. D+1). */
  const ON_D = { day: dayText(D), today_cost_usd: 28, last_7d_cost_usd: 196 };
  const ON_NEXT = { day: dayText(D + DAY_MS), today_cost_usd: 0, last_7d_cost_usd: 168 };

  /**
   * $28 a day counted on D-6 .. D; the meter is asked at `askedAt` and answers `figures` (its web
   * app takes a second, or its clock is a few seconds off the gateway's), the gateway's clock then
   * at `answeredAt`.
   */
  async function readAcrossMidnight(askedAt: number, answeredAt: number, figures: typeof ON_D) {
    const at = { ms: D - 6 * DAY_MS + 3600_000 };
    const server = createServer((req, res) => {
      req.resume();
      at.ms = answeredAt;
      const body = { ok: true, ...figures, daily_cap_usd: 50, burn_7d_cap_usd: 200, cap_exceeded: false };
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(body));
    });
    servers.push(server);
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const meterUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}/exec`;
    const days = new MemorySpendDays(() => at.ms);
    const watch = new SpendWatch({ meterUrl, meterToken: 't', dailyCap: 50, burnCap: 200, warn: () => {}, now: () => at.ms, days });
    for (let d = 6; d >= 0; d--) {
      at.ms = D - d * DAY_MS + 3600_000;
      for (let i = 0; i < 28; i++) watch.record(1);
    }
    at.ms = askedAt;
    await watch.view();
    return { at, watch };
  }

  it('asked at 23:59:59.5 on D, answered for D+1 once past midnight: D-6 is not taken off 7 days that never held it', async () => {
    const { at, watch } = await readAcrossMidnight(D + DAY_MS - 500, D + DAY_MS + 500, ON_NEXT);
    at.ms = D + DAY_MS + 10_000;
    for (let i = 0; i < 5; i++) watch.record(1);
    const after = await watch.view();
    expect(after.today).toBeCloseTo(5, 6);
    expect(after.last7d).toBeCloseTo(168 + 5, 6);
  });

  it("answered for D+1 by a meter whose clock is ahead, the gateway still on D: D's spend and D-6 still count", async () => {
    const { watch } = await readAcrossMidnight(D + DAY_MS - 500, D + DAY_MS - 400, ON_NEXT);
    const before = await watch.view();
    expect(before.today).toBeCloseTo(28, 6);
    expect(before.last7d).toBeCloseTo(196, 6);
  });

  it("asked at 00:00:00.5 on D+1, answered for D by a meter whose clock is behind: D's spend is not today's, $5 since stays under the caps", async () => {
    const { at, watch } = await readAcrossMidnight(D + DAY_MS + 500, D + DAY_MS + 600, ON_D);
    at.ms = D + DAY_MS + 10_000;
    for (let i = 0; i < 5; i++) watch.record(1);
    const after = await watch.view();
    expect(after.today).toBeCloseTo(5, 6);
    expect(after.last7d).toBeCloseTo(196 - 28 + 5, 6);
    expect(capExceeded(after)).toBe(false);
  });
});

describe('a meter answer the gateway cannot trust', () => {
  it('a meter answering figures that are not amounts (negative, text) is not believed: the spend the gateway counted decides', async () => {
    for (const today of [-1000, '0.5', null]) {
      const meter = await meterWith({ today_cost_usd: today, last_7d_cost_usd: 0, daily_cap_usd: 0.3 });
      const gw = await gateway({ METER_URL: meter, METER_TOKEN: 't', DAILY_CAP_USD: '0.3' });
      for (let i = 0; i < 4; i++) expect(await patient(gw.url)).toBe(200); // $0.30 counted: within the cap
      expect(await patient(gw.url), `meter's today_cost_usd ${JSON.stringify(today)}`).toBe(202);
      await running.pop()!.stop();
    }
  });
});

/**
 * `npm run lisbon` — the gateway's acceptance drill (the Lisbon Test) against local fault-injecting providers:
 *   1. Hot providers blocked: Warm takes over within 1 to 2 (Warm) attempts.
 *   2. Every provider answering 500: the breakers open and Cold enqueues (202).
 *   3. The outage lasts 45 s (shortened, below): the job queued in it is not dead-lettered, and
 *      completes once the providers return.
 *   4. Budget webhook at 85 %: new work waits, running jobs finish, the first pause notice arrives
 *      in under 2 s.
 *   5. No request ran longer than its time-to-answer; the pause took effect in under 5 s.
 * Uses Redis when QUEUE_STORE_URL is set (with its own key prefix, removed afterwards, and a pause
 * flag of its own under it: the fleet's `pause_ai_tasks` on a shared Redis is never set or
 * cleared), else the embedded store. Prints what it measured and exits 0 only if every step passes.
 *
 * Shortened tenfold for a drill that ends in seconds (shown in its header): breakers stay open 3 s
 * instead of 30 s (5 failures still open them), the outage lasts 4.5 s instead of 45 s, and a job's
 * retry backoff starts at 100 ms instead of 1 s (its 5 attempts span 1.5 s instead of 15 s: the
 * outage still outlasts them threefold). Notifications keep their 60 s window: the first notice of
 * a burst goes out at once. After step 3 live traffic closes the breakers again (two good probes
 * each), then the gateway is restarted, as an operator would after the outage.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import pino from 'pino';
import { noArguments } from '../../gateway/src/no-arguments';
import type { Stack } from '../../gateway/src/stack';
import { FakeProvider } from '../gateway/fake-provider';
import { listenStack } from '../gateway/harness';

const ADMIN = 'lisbon-admin';
/** Shortened tenfold (see above). */
const BREAKER_OPEN_MS = 3000;
const OUTAGE_MS = 4500;
const JOB_BACKOFF_MS = 100;
const started = Date.now();
const requests: Array<{ ms: number; tta: number; status: number }> = [];
const results: Array<{ step: string; measured: string; target: string; pass: boolean }> = [];
const notices: Array<{ text: string; at: number }> = [];

async function chat(url: string, tta: number, headers: Record<string, string> = {}) {
  const t = performance.now();
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-time-to-answer-ms': String(tta), 'x-customer-id': 'lisbon-tenant', ...headers },
    body: JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: `drill ${Math.random()}` }] }),
  });
  const body = await res.text();
  const ms = performance.now() - t;
  requests.push({ ms, tta, status: res.status });
  return { status: res.status, headers: res.headers, body, ms };
}

async function until(check: () => Promise<boolean> | boolean, ms: number): Promise<boolean> {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await check()) return true;
    await new Promise((r) => setTimeout(r, 20));
  }
  return false;
}

async function main(): Promise<number> {
  const providers = await Promise.all([0, 1, 2, 3].map(() => new FakeProvider().start()));
  const [hot1, hot2, warmA, warmB] = providers;
  const hook = createServer(async (req, res) => {
    let body = '';
    for await (const c of req) body += c;
    notices.push({ text: (JSON.parse(body) as { text: string }).text, at: performance.now() });
    res.writeHead(200).end();
  });
  await new Promise<void>((r) => hook.listen(0, '127.0.0.1', r));
  const dir = mkdtempSync(join(tmpdir(), 'lisbon-'));
  const routes = join(dir, 'routes.json');
  writeFileSync(
    routes,
    JSON.stringify({
      hot: [hot1, hot2].map((p) => ({ provider: 'openai', model: 'gpt-4o-mini', baseUrl: p.url })),
      warm: [
        { provider: 'anthropic', model: 'claude-3-5-haiku-latest', baseUrl: warmA.url },
        { provider: 'mistral', model: 'mistral-small-latest', baseUrl: warmB.url },
      ],
      cold: {
        mode: 'graceful_degrade',
        queue: 'ai-tasks',
        notify: [`http://127.0.0.1:${(hook.address() as AddressInfo).port}/slack`, 'oncall@example.com'],
      },
    }),
  );
  const prefix = `lisbon-${process.pid}`;
  const env: NodeJS.ProcessEnv = {
    ROUTES_FILE: routes,
    ADMIN_TOKEN: ADMIN,
    METER_CSV_FILE: join(dir, 'events.csv'),
    SCOPES_FILE: join(dir, 'none.yaml'),
    ...(process.env.QUEUE_STORE_URL ? { QUEUE_STORE_URL: process.env.QUEUE_STORE_URL, REDIS_PREFIX: prefix } : {}),
  };
  const store = process.env.QUEUE_STORE_URL ? `Redis (prefix ${prefix})` : 'embedded (in-process)';
  const log = pino({ level: 'silent' });
  const open: Array<{ stack: Stack; stop: () => Promise<void> }> = [];
  const up = async () => {
    const handle = await listenStack(
      env,
      {
        http: true,
        worker: true,
        breaker: { openMs: BREAKER_OPEN_MS },
        cold: { backoffMs: JOB_BACKOFF_MS },
        pauseKey: `${prefix}:pause_ai_tasks`,
      },
      log,
    );
    open.push(handle);
    return handle;
  };

  try {
    // Step 1: Hot blocked.
    let gw = await up();
    hot1.always({ kind: 'drop' });
    hot2.always({ kind: 'drop' });
    const step1: Array<{ warmAttempts: number; tier: string; ms: number }> = [];
    for (let i = 0; i < 4; i++) {
      const before = hot1.received.length + hot2.received.length;
      const res = await chat(gw.url, 10_000);
      const total = Number(res.headers.get('x-route-attempts'));
      step1.push({
        warmAttempts: total - (hot1.received.length + hot2.received.length - before),
        tier: res.headers.get('x-route-tier') ?? '?',
        ms: res.ms,
      });
    }
    const hotOpen = gw.stack.path.failover.routes.filter((r) => r.tier === 'hot' && r.breaker.state() === 'open').length;
    results.push({
      step: '1. Hot blocked → Warm takes over',
      measured: `Warm answered ${step1.filter((s) => s.tier === 'warm').length}/4 requests with ${step1.map((s) => s.warmAttempts).join(', ')} Warm attempt(s); first in ${step1[0].ms.toFixed(0)} ms, after the Hot breakers opened (${hotOpen}/2) in ${step1.at(-1)!.ms.toFixed(0)} ms`,
      target: 'every request answered by Warm in 1-2 Warm attempts',
      pass: step1.every((s) => s.tier === 'warm' && s.warmAttempts >= 1 && s.warmAttempts <= 2),
    });

    // Step 2: everything answers 500.
    const outageStart = performance.now();
    for (const p of providers) p.always({ kind: 'status', status: 500 });
    let queued: { status: number; body: string } | null = null;
    for (let i = 0; i < 6; i++) {
      const res = await chat(gw.url, 8000, { 'idempotency-key': `lisbon-step2-${i}` });
      if (res.status === 202) queued = res;
    }
    const openRoutes = gw.stack.path.failover.routes.filter((r) => r.breaker.state() === 'open');
    const counts = await gw.stack.queue.counts();
    const depth = counts.waiting + counts.delayed + counts.active + counts.failed;
    const openFor = Math.max(...gw.stack.path.failover.routes.map((r) => r.breaker.secondsOpen()));
    results.push({
      step: '2. HTTP 500 everywhere → breakers open, Cold enqueues',
      measured: `${openRoutes.length}/4 breakers open (longest ${openFor.toFixed(1)} s so far, re-probe after ${BREAKER_OPEN_MS / 1000} s); last answer ${queued?.status ?? 'none'} ${queued ? queued.body : ''}; queue depth ${depth}`,
      target: 'all breakers open; 202 {status:"queued", jobId}; depth ≥ 1',
      pass: openRoutes.length === 4 && queued !== null && /"status":"queued"/.test(queued.body) && depth >= 1,
    });

    // Step 3: the outage goes on past every attempt a job has; then the providers return.
    results.push(await outageOutlived(gw, queued ? (JSON.parse(queued.body) as { jobId: string }).jobId : '', outageStart, providers));
    // The providers are back: live traffic closes every breaker (two good probes each, one per open
    // period) before the restart, so step 4's jobs meet closed routes, as after a real outage. (With
    // Redis the restarted gateway reads the fleet's breakers: half-open ones would hold its jobs.)
    await until(async () => {
      if (gw.stack.path.failover.routes.every((r) => r.breaker.state() === 'closed')) return true;
      await chat(gw.url, 8000);
      return false;
    }, 4 * BREAKER_OPEN_MS);
    await gw.stop();
    open.pop();

    // Step 4: budget webhook at 85 %, with jobs running.
    for (const p of providers) p.always({ kind: 'ok', delayMs: 1500 });
    gw = await up();
    const payload = (key: string) => ({
      body: { model: 'gpt-4o-mini', messages: [{ role: 'user' as const, content: key }] },
      idempotencyKey: key,
      userId: '',
      jobId: key,
      customerId: 'lisbon-tenant',
      jobType: '',
      reason: 'drill',
      reviewRequired: false,
      enqueuedAt: new Date().toISOString(),
    });
    const running = await Promise.all([1, 2, 3].map((i) => gw.stack.queue.enqueue(payload(`lisbon-running-${i}-${prefix}`))));
    await until(async () => (await gw.stack.queue.counts()).active >= 3, 5000);
    const t0 = performance.now();
    const hookRes = await fetch(`${gw.url}/budget/webhook`, {
      method: 'POST',
      headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ provider: 'openai', percentUsed: 85 }),
    });
    await until(() => gw.stack.pause.paused(), 5000);
    const pauseVisibleMs = performance.now() - t0;
    const fresh = await gw.stack.queue.enqueue(payload(`lisbon-new-${prefix}`));
    const held = await until(async () => {
      const j = await gw.stack.queue.get(fresh.jobId);
      return j?.deferred?.reason === 'paused by budget guardrail' && j.attempts === 0;
    }, 5000);
    const pauseHonouredMs = performance.now() - t0;
    const finished = await until(
      async () => (await Promise.all(running.map((r) => gw.stack.queue.get(r.jobId)))).every((j) => j?.state === 'completed'),
      10_000,
    );
    // No flush: the first notice of a burst goes out at once.
    await until(() => notices.some((n) => /paused by the budget guardrail/.test(n.text)), 2000);
    const firstPause = notices.find((n) => /paused by the budget guardrail/.test(n.text));
    const noticeMs = firstPause ? firstPause.at - t0 : Infinity;
    const pauseNotices = notices.filter((n) => /paused by the budget guardrail/.test(n.text)).length;
    const queueNotices = notices.filter((n) => /queued \(Cold tier\)/.test(n.text)).length;
    results.push({
      step: '4. Budget webhook 85 % → pause',
      measured: `webhook ${hookRes.status}; flag visible in ${pauseVisibleMs.toFixed(0)} ms; new job held ("paused by budget guardrail", 0 attempts spent) after ${pauseHonouredMs.toFixed(0)} ms; running jobs finished: ${finished ? '3/3' : 'no'}; first pause notice after ${noticeMs.toFixed(0)} ms; notifications: ${pauseNotices} pause, ${queueNotices} queue (Slack webhook; e-mail logged)`,
      target: 'pause honoured < 5 s (goal 100 ms); running jobs finish; first pause notice < 2 s',
      pass:
        hookRes.status === 204 && held && pauseHonouredMs < 5000 && finished && noticeMs < 2000 && pauseNotices === 1 && queueNotices >= 1,
    });
    await fetch(`${gw.url}/budget/resume`, { method: 'POST', headers: { authorization: `Bearer ${ADMIN}` } });

    // Step 5: time-to-answer.
    const worst = requests.reduce((w, r) => (r.ms - r.tta > w.ms - w.tta ? r : w), requests[0]);
    results.push({
      step: '5. Time-to-answer and handoff',
      measured: `${requests.length} requests; longest ${worst.ms.toFixed(0)} ms of its ${worst.tta} ms; over budget: ${requests.filter((r) => r.ms > r.tta).length}`,
      target: 'no request longer than its time-to-answer',
      pass: requests.every((r) => r.ms <= r.tta),
    });
  } finally {
    for (const h of open.splice(0)) await h.stop();
    for (const p of providers) await p.stop();
    hook.close();
    if (process.env.QUEUE_STORE_URL) {
      const redis = new Redis(process.env.QUEUE_STORE_URL);
      const keys = await redis.keys(`${prefix}:*`);
      if (keys.length) await redis.del(...keys);
      redis.disconnect();
    }
  }

  console.log(
    `Lisbon drill (store: ${store}; shortened tenfold: breakers open ${BREAKER_OPEN_MS / 1000} s instead of 30 s, outage ${OUTAGE_MS / 1000} s instead of 45 s, ` +
      `job backoff from ${JOB_BACKOFF_MS} ms instead of 1 s; notifications: the first at once, the rest over 60 s; gateway restarted between steps 3 and 4)\n`,
  );
  for (const r of results) {
    console.log(`${r.pass ? 'PASS' : 'FAIL'}  ${r.step}`);
    console.log(`      measured: ${r.measured}`);
    console.log(`      target:   ${r.target}`);
  }
  const passed = results.filter((r) => r.pass).length;
  console.log(`\n${passed} passed, ${results.length - passed} failed (${((Date.now() - started) / 1000).toFixed(1)} s)`);
  return passed === results.length ? 0 : 1;
}

/** Step 3: the job queued in step 2 waits out the outage without dying, and completes once the providers return. */
async function outageOutlived(
  gw: { stack: Stack },
  jobId: string,
  outageStart: number,
  providers: FakeProvider[],
): Promise<{ step: string; measured: string; target: string; pass: boolean }> {
  const states = new Set<string>();
  const watch = async () => {
    const j = await gw.stack.queue.get(jobId);
    if (j) states.add(j.state);
    return performance.now() - outageStart >= OUTAGE_MS;
  };
  await until(watch, OUTAGE_MS + 1000);
  const during = await gw.stack.queue.get(jobId);
  for (const p of providers) p.always({ kind: 'ok' });
  const back = performance.now();
  await until(async () => (await gw.stack.queue.get(jobId))?.state === 'completed', 15_000);
  const done = await gw.stack.queue.get(jobId);
  const afterMs = performance.now() - back;
  return {
    step: '3. The outage outlasts a job’s attempts → the job waits, then completes',
    measured: `job ${jobId.slice(0, 12)}…: during the ${(OUTAGE_MS / 1000).toFixed(1)} s outage ${[...states].join(' → ')}, ${during?.attempts ?? '?'} attempt(s) spent (${during?.deferred ? `"${during.deferred.reason.replace(/; next probe at .*/, '')}"` : 'not deferred'}); completed ${(afterMs / 1000).toFixed(1)} s after the providers returned, ${done?.attempts ?? '?'} attempt(s) in all`,
    // A route closes after 2 good probes, one per open period: a job may wait for the second.
    target: `not dead-lettered during an outage 3× the span of its 5 attempts; completed once a provider is back (within two ${BREAKER_OPEN_MS / 1000} s probe intervals)`,
    pass: done?.state === 'completed' && !states.has('dead-lettered') && afterMs < 2 * BREAKER_OPEN_MS + 2000,
  };
}

if (noArguments('npm run lisbon', process.argv.slice(2)))
  main().then(
    (code) => process.exit(code),
    (error) => {
      console.error(error);
      process.exit(1);
    },
  );

// Notifications: the first notice of a burst at once, the rest coalesced into one follow-up; caller
// text escaped for Slack; a failing target is retried and logged, never thrown.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { createServer as createTcpServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it, vi } from 'vitest';
import { spawn } from '../children';
import { Redis } from 'ioredis';
import { MemoryNoticeWindows, RedisNoticeWindows } from '../../gateway/src/notice-windows';
import { Notifier } from '../../gateway/src/notify';
import { TEST_REDIS_URL } from '../redis-db';

/**
 * A Slack incoming webhook on loopback: it keeps every JSON body posted to it. As Slack does, it
 * refuses a message with a section block over 3,000 characters (HTTP 400 `invalid_blocks`).
 */
async function slackHook(): Promise<{ server: Server; url: string; posts: any[] }> {
  const posts: any[] = [];
  const server = createServer(async (req, res) => {
    let body = '';
    for await (const c of req) body += c;
    const post = JSON.parse(body);
    const blocks: Array<{ type: string; text: { text: string } }> = post.blocks ?? [];
    if (blocks.some((b) => b.type === 'section' && b.text.text.length > 3000)) return res.writeHead(400).end('invalid_blocks');
    posts.push(post);
    res.writeHead(200).end('ok');
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/services/T/B/x`, posts };
}

/** An SMTP server on loopback that takes every message and keeps the commands it was sent. */
async function smtpServer(): Promise<{ url: string; commands: string[]; close(): void }> {
  const commands: string[] = [];
  const server = createTcpServer((socket) => {
    socket.on('error', () => undefined); // the gateway stopped mid-session
    socket.write('220 test ESMTP\r\n');
    let buffered = '';
    let inData = false;
    socket.on('data', (d) => {
      buffered += d;
      for (let end = buffered.indexOf('\r\n'); end >= 0; end = buffered.indexOf('\r\n')) {
        const line = buffered.slice(0, end);
        buffered = buffered.slice(end + 2);
        if (inData) {
          if (line === '.') [inData] = [false, socket.write('250 queued\r\n')];
          continue;
        }
        commands.push(line);
        const verb = line.slice(0, 4).toUpperCase();
        if (verb === 'DATA') [inData] = [true, socket.write('354 go on\r\n')];
        else if (verb === 'QUIT') socket.end('221 bye\r\n');
        else socket.write('250 ok\r\n');
      }
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { url: `smtp://127.0.0.1:${(server.address() as AddressInfo).port}`, commands, close: () => server.close() };
}

async function until(check: () => boolean, ms: number): Promise<void> {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 5));
  }
}

describe('notifier', () => {
  // The notice sent the on-call person to `npm run ops -- status` to find the jobs, which shows counts only.
  // It named GET /v1/jobs/<id>, which answers only the job's tenant: with client keys, no operator could read them.
  it('a human-review notice says where its jobs are found: the ids it lists, each read with npm run ops -- job <id>', async () => {
    const n = new Notifier(['ops@example.com'], { log: { warn: () => {}, info: () => {} } });
    n.notify({ kind: 'human_review', jobIds: ['llm-1'], tenant: 'acme' });
    await n.flush();
    const next = n.sent[0].text.split('\n').find((line) => line.startsWith('Next: '));
    expect(next).toContain('`npm run ops -- job <id>` shows each');
    expect(next).not.toMatch(/find them with `npm run ops -- status`/i);
  });

  it('a thousand enqueues make two messages per target: the first at once, one follow-up with counts and ids', async () => {
    const logs: string[] = [];
    const n = new Notifier(['ops@example.com'], { windowMs: 60_000, log: { warn: (m) => logs.push(m), info: (m) => logs.push(m) } });
    for (let i = 0; i < 1000; i++) n.notify({ kind: 'enqueued', jobIds: [`job-${i}`], tenant: `t${i % 3}` });
    await n.flush();
    expect(n.sent).toHaveLength(2);
    expect(n.sent[0].subject).toBe('AI requests queued (Cold tier)');
    expect(n.sent[0].text).toContain('Jobs (1): job-0');
    expect(n.sent[1].subject).toBe('AI requests queued (Cold tier) (999 more since the first notice)');
    expect(n.sent[1].text).toContain('Jobs (999): job-1, job-2');
    expect(n.sent[1].text).toContain('and 979 more');
    expect(n.sent[1].text).toContain('Tenants: t1, t2, t0');
    expect(logs.join('\n')).toMatch(/e-mail to ops@example.com \(not sent: SMTP_URL is not set\)/);
  });

  // The notifier read SMTP_FROM from the process's environment, not as the gateway's checked
  // environment has it: `SMTP_FROM=` (empty, which counts as unset) sent every notice from <>.
  it("a gateway's e-mail notices come from SMTP_FROM as its environment reads it: empty is the default sender", async () => {
    const smtp = await smtpServer();
    const dir = mkdtempSync(join(tmpdir(), 'smtp-'));
    const routes = join(dir, 'routes.json');
    const hot = { provider: 'openai', model: 'gpt-4o-mini', baseUrl: 'http://127.0.0.1:9/v1' };
    writeFileSync(
      routes,
      JSON.stringify({ hot: [hot], warm: [], cold: { mode: 'graceful_degrade', queue: 'ai-tasks', notify: ['ops@acme.test'] } }),
    );
    const env = { PATH: process.env.PATH, PORT: '0', ROUTES_FILE: routes, SMTP_URL: smtp.url, SMTP_FROM: '', ADMIN_TOKEN: 'admin' };
    const files = { METER_CSV_FILE: join(dir, 'e.csv'), SCOPES_FILE: join(dir, 'none.yaml'), CLIENT_KEYS_FILE: join(dir, 'keys.json') };
    const child = spawn(process.execPath, [join(import.meta.dirname, '..', '..', 'gateway/dist/main.js')], { env: { ...env, ...files } });
    let out = '';
    child.stdout!.on('data', (d) => (out += d));
    try {
      await until(() => /gateway listening on :\d+/.test(out), 10_000);
      const port = /gateway listening on :(\d+)/.exec(out)![1];
      const hook = await fetch(`http://127.0.0.1:${port}/budget/webhook`, {
        method: 'POST',
        headers: { authorization: 'Bearer admin', 'content-type': 'application/json' },
        body: JSON.stringify({ provider: 'openai', percentUsed: 95 }),
      });
      expect(hook.status).toBe(204);
      await until(() => smtp.commands.some((c) => c.startsWith('RCPT')), 10_000);
      expect(smtp.commands.find((c) => c.startsWith('MAIL FROM'))).toBe('MAIL FROM:<ai-gateway@localhost>');
    } finally {
      smtp.close();
    }
  });

  it('retries a failing webhook, then logs without the URL secret', async () => {
    let calls = 0;
    const server = createServer((req, res) => {
      calls++;
      req.resume();
      res.writeHead(calls < 3 ? 500 : 200).end();
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/services/SECRET`;
    const warnings: string[] = [];
    const n = new Notifier([url], {
      windowMs: 10,
      retry: { attempts: 3, firstMs: 10, factor: 1 },
      log: { warn: (m) => warnings.push(m), info: () => {} },
    });
    n.notify({ kind: 'paused', detail: 'x' });
    await n.flush();
    expect(calls).toBe(3);
    expect(n.sent).toHaveLength(1);
    calls = -10; // fails every time now
    n.notify({ kind: 'paused' });
    await n.flush();
    expect(warnings.join('\n')).toMatch(/notification to 127\.0\.0\.1:\d+ failed: HTTP 500/);
    expect(warnings.join('\n')).not.toContain('SECRET');
    server.close();
  });

  it('an SMTP server that greets and then stalls fails the try within the delivery timeout (nodemailer alone waits 10 minutes)', async () => {
    const server = createTcpServer((socket) => {
      socket.on('error', () => undefined);
      socket.write('220 stalling ESMTP\r\n');
      socket.once('data', () => socket.write('250 ok\r\n')); // EHLO answered, then silence
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const warnings: string[] = [];
    const n = new Notifier(['ops@acme.test'], {
      windowMs: 10,
      smtpUrl: `smtp://127.0.0.1:${(server.address() as AddressInfo).port}`,
      timeoutMs: 300,
      retry: { attempts: 2, firstMs: 10, factor: 1 },
      log: { warn: (m) => warnings.push(m), info: () => {} },
    });
    n.notify({ kind: 'paused', detail: 'x' });
    await n.flush();
    expect(n.sent).toHaveLength(0);
    expect(warnings.join('\n')).toMatch(/notification to ops@acme\.test failed: .*timeout/i);
    server.close();
  });

  // A webhook that takes the request and never answers held a stop for its three tries (36 s):
  // an idle gateway was SIGKILLed by Kubernetes before its meter's last flush.
  it('a stop does not wait out a hanging target: the delivery under way is logged as not sent', async () => {
    let posted!: () => void;
    const reached = new Promise<void>((r) => (posted = r));
    const server = createServer((req) => {
      req.resume();
      posted();
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const warnings: string[] = [];
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/services/SECRET`;
    const n = new Notifier([url], { log: { warn: (m) => warnings.push(m), info: () => {} } });
    n.notify({ kind: 'dead_lettered', jobIds: ['llm-1'] });
    await reached;
    await n.close();
    expect(warnings).toEqual([
      expect.stringMatching(/^notification "Queued AI jobs dead-lettered" to 127\.0\.0\.1:\d+ not delivered before the stop/),
    ]);
    server.closeAllConnections();
    server.close();
  });
  it('the first notice of a burst arrives at once; the rest of the window waits for one follow-up', async () => {
    const hook = await slackHook();
    const n = new Notifier([hook.url], { windowMs: 60_000, log: { warn: () => {}, info: () => {} } });
    n.notify({ kind: 'paused', detail: 'openai budget at 85%' });
    await until(() => hook.posts.length === 1, 2000); // not at the window's end, a minute away
    expect(hook.posts[0].text).toContain('AI work paused by the budget guardrail');
    n.notify({ kind: 'enqueued', jobIds: ['llm-1'] }); // another kind: its own first notice, at once
    await until(() => hook.posts.length === 2, 2000);
    for (let i = 2; i <= 4; i++) n.notify({ kind: 'enqueued', jobIds: [`llm-${i}`], tenant: 'acme' });
    n.notify({ kind: 'human_review', jobIds: ['llm-5'] }); // placed after them: once it is posted, so would they be
    await until(() => hook.posts.length >= 3, 2000);
    expect(hook.posts[2].text).toMatch(/^AI requests routed to human review/); // and no follow-up yet
    await n.flush(); // the window's end
    expect(hook.posts).toHaveLength(4);
    expect(hook.posts[3].text).toMatch(
      /AI requests queued \(Cold tier\) \(3 more since the first notice\)\nJobs \(3\): llm-2, llm-3, llm-4\nTenants: acme/,
    );
    hook.server.close();
  });

  it('a window that ends quiet closes: the next notice goes out at once again', async () => {
    const hook = await slackHook();
    const windows = new MemoryNoticeWindows();
    const close = windows.close.bind(windows);
    const closed = new Promise<void>((resolve) => (windows.close = async (kind) => (await close(kind), resolve())));
    const n = new Notifier([hook.url], { windowMs: 50, windows, log: { warn: () => {}, info: () => {} } });
    n.notify({ kind: 'dead_lettered', jobIds: ['llm-a'] });
    await until(() => hook.posts.length === 1, 2000);
    await closed; // the window's end, with nothing in it
    n.notify({ kind: 'dead_lettered', jobIds: ['llm-b'] });
    await until(() => hook.posts.length === 2, 2000);
    expect(hook.posts[1].text).toMatch(/^Queued AI jobs dead-lettered\nJobs \(1\): llm-b/);
    hook.server.close();
  });

  // The windows' ends were on the wall clock: an NTP step forward mid-window ended the window for
  // the notices after it, each then sent on its own instead of held for the follow-up.
  it('the wall clock stepped forward during a window: the notices after it are still held for the follow-up', async () => {
    const hook = await slackHook();
    const n = new Notifier([hook.url], { windowMs: 60_000, windows: new MemoryNoticeWindows(), log: { warn: () => {}, info: () => {} } });
    n.notify({ kind: 'dead_lettered', jobIds: ['llm-a'] });
    await until(() => hook.posts.length === 1, 2000);
    const wall = Date.now.bind(Date);
    vi.spyOn(Date, 'now').mockImplementation(() => wall() + 3_600_000);
    try {
      n.notify({ kind: 'dead_lettered', jobIds: ['llm-b'] });
      await n.flush(); // the window's end
      expect(hook.posts).toHaveLength(2);
      expect(hook.posts[1].text).toMatch(/\(1 more since the first notice\)\nJobs \(1\): llm-b/);
    } finally {
      vi.restoreAllMocks();
      hook.server.close();
    }
  });

  // Slack refuses a section over 3,000 characters: a follow-up of dead letters from many tenants,
  // with long provider errors, was refused three times and never reached anyone.
  it('a follow-up longer than one Slack section goes out in several, split between lines, none over the limit', async () => {
    const hook = await slackHook();
    const warnings: string[] = [];
    const n = new Notifier([hook.url], { windowMs: 60_000, log: { warn: (m) => warnings.push(m), info: () => {} } });
    for (let i = 0; i < 25; i++) {
      const detail = `last error: provider refused the request: HTTP 400 {"error":"<${i}> ${'x'.repeat(200)}"}`;
      n.notify({ kind: 'dead_lettered', jobIds: [`llm-${i}`], tenant: `tenant-${i}-${'&'.repeat(60)}`, detail });
    }
    await n.flush();
    expect(warnings).toEqual([]);
    expect(hook.posts).toHaveLength(2);
    const sections = hook.posts[1].blocks.slice(1).map((b: { text: { text: string } }) => b.text.text) as string[];
    expect(sections.length).toBeGreaterThan(1);
    const unbroken = (text: string) => text.replace(/\n/g, '');
    expect(unbroken(sections.join(''))).toBe(unbroken(hook.posts[1].text)); // nothing lost in the split
    for (const section of sections) expect(section).not.toMatch(/&[a-z]*$/); // no escape cut in two
    hook.server.close();
  });

  it('caller text cut to its length or split into sections is cut between characters, never inside an emoji', async () => {
    const hook = await slackHook();
    const n = new Notifier([hook.url], { windowMs: 60_000, log: { warn: () => {}, info: () => {} } });
    // Each item is cut at 200 characters, a line over one section at 3,000: both fall inside an emoji's UTF-16 pair.
    const detail = `last error: x${'😀'.repeat(150)}`;
    n.notify({ kind: 'dead_lettered', jobIds: ['llm-0'], detail });
    for (let i = 1; i <= 20; i++) n.notify({ kind: 'dead_lettered', jobIds: [`llm-${i}`], tenant: `t${i}${'😀'.repeat(80)}`, detail });
    await n.flush();
    expect(hook.posts).toHaveLength(2);
    const texts = hook.posts.flatMap((p) => [p.text, ...p.blocks.slice(1).map((b: { text: { text: string } }) => b.text.text)]) as string[];
    expect(texts.join('')).toContain(`last error: x${'😀'.repeat(93)}…`);
    for (const text of texts) expect(text).not.toMatch(/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/);
    hook.server.close();
  });

  it('caller text is escaped for Slack mrkdwn (no mention, no link); e-mail gets it as it was', async () => {
    const hook = await slackHook();
    const logs: string[] = [];
    const n = new Notifier([hook.url, 'ops@example.com'], { windowMs: 60_000, log: { warn: () => {}, info: (m) => logs.push(m) } });
    n.notify({ kind: 'enqueued', jobIds: ['llm-1'], tenant: '<!channel>', detail: 'last error: <https://evil.example|click here> & more' });
    await n.flush();
    const post = hook.posts[0];
    for (const text of [post.text, post.blocks[1].text.text]) {
      expect(text).toContain('Tenants: &lt;!channel&gt;');
      expect(text).toContain('last error: &lt;https://evil.example|click here&gt; &amp; more');
      expect(text).not.toMatch(/<!channel>|<https:/);
    }
    expect(post.blocks[1].text.type).toBe('mrkdwn');
    expect(logs.join('\n')).toContain('Tenants: <!channel>'); // the e-mail (logged: no SMTP_URL) is plain text
    hook.server.close();
  });

  it("caller text that Slack's automatic parsing would make a mention or a link (@here, #general, a bare URL) stays text", async () => {
    const hook = await slackHook();
    const n = new Notifier([hook.url], { windowMs: 60_000, log: { warn: () => {}, info: () => {} } });
    n.notify({
      kind: 'dead_lettered',
      jobIds: ['llm-1'],
      tenant: '@here',
      detail: 'last error: see #general or https://evil.example/login',
    });
    await n.flush();
    // Slack parses a mrkdwn text object's plain text unless it is verbatim: `@here` pings the channel,
    // `#general` and the URL become links. Verbatim, only the manual markup (escaped above) would be read.
    const sections = hook.posts[0].blocks.filter((b: { type: string }) => b.type === 'section');
    expect(sections.map((b: { text: { text: string } }) => b.text.text).join('\n')).toContain('Tenants: @here');
    for (const section of sections) expect(section.text).toMatchObject({ type: 'mrkdwn', verbatim: true });
    hook.server.close();
  });

  it('keeps only the last 100 delivered messages, newest last (a long-running gateway does not grow)', async () => {
    const n = new Notifier(['ops@example.com'], { windowMs: 60_000, log: { warn: () => {}, info: () => {} } });
    for (let i = 0; i < 150; i++) {
      n.notify({ kind: 'paused', detail: `round ${i}` });
      await n.flush();
    }
    expect(n.sent).toHaveLength(100);
    expect(n.sent[0].text).toContain('round 50');
    expect(n.sent[99].text).toContain('round 149');
  });

  it("the fleet's windows in a Redis that does not answer: each notice goes out on its own, with a warning", async () => {
    const hook = await slackHook();
    const away = new Redis('redis://127.0.0.1:1/9', { enableOfflineQueue: false, lazyConnect: true, retryStrategy: () => null });
    away.on('error', () => undefined);
    const warnings: string[] = [];
    const n = new Notifier([hook.url], {
      windowMs: 60_000,
      windows: new RedisNoticeWindows(away, `test-notify-${process.pid}`),
      log: { warn: (m) => warnings.push(m), info: () => {} },
    });
    n.notify({ kind: 'enqueued', jobIds: ['llm-1'] });
    n.notify({ kind: 'enqueued', jobIds: ['llm-2'] });
    await n.flush();
    expect(hook.posts.map((p) => p.text.split('\n')[1]).sort()).toEqual(['Jobs (1): llm-1', 'Jobs (1): llm-2']);
    expect(warnings.join('\n')).toContain('notification windows unavailable');
    hook.server.close();
  });

  it('NOTIFY_WINDOW_MS=0 with Redis: each notice goes out on its own, with no warning that the windows are unavailable', async () => {
    const hook = await slackHook();
    const redis = new Redis(TEST_REDIS_URL);
    const prefix = `test-notify-no-window-${process.pid}`;
    const warnings: string[] = [];
    try {
      const n = new Notifier([hook.url], {
        windowMs: 0,
        windows: new RedisNoticeWindows(redis, prefix),
        log: { warn: (m) => warnings.push(m), info: () => {} },
      });
      for (const id of ['llm-1', 'llm-2', 'llm-3']) n.notify({ kind: 'enqueued', jobIds: [id] });
      await n.flush();
      expect(hook.posts.map((p) => p.text.split('\n')[1]).sort()).toEqual(['Jobs (1): llm-1', 'Jobs (1): llm-2', 'Jobs (1): llm-3']);
      // Before: Redis refused a window of 0 ms (SET PX 0), and each notice logged "notification windows unavailable".
      expect(warnings).toEqual([]);
      await n.close();
    } finally {
      const keys = await redis.keys(`${prefix}:*`);
      if (keys.length) await redis.del(...keys);
      redis.disconnect();
      hook.server.close();
    }
  });

  it('a follow-up held by an instance that stopped (crashed) before its window ended is sent by another, once', async () => {
    const hook = await slackHook();
    const redis = new Redis(TEST_REDIS_URL);
    const prefix = `test-notify-lapsed-${process.pid}`;
    try {
      // What a gateway killed mid-window leaves: its window and a notice held for the follow-up, and no timer.
      const gone = new RedisNoticeWindows(redis, prefix);
      await gone.open('dead_lettered', 100);
      await gone.hold('dead_lettered', { kind: 'dead_lettered', jobIds: ['llm-9'] }, 100);
      const n = new Notifier([hook.url], {
        windowMs: 100,
        sweepMs: 50,
        windows: new RedisNoticeWindows(redis, prefix),
        log: { warn: () => {}, info: () => {} },
      });
      await until(() => hook.posts.length === 1, 3000); // before: never sent (the held notice expired unread)
      expect(hook.posts[0].text).toMatch(/^Queued AI jobs dead-lettered \(1 more since the first notice\)\nJobs \(1\): llm-9/);
      await n.close();
      expect(hook.posts).toHaveLength(1);
    } finally {
      const keys = await redis.keys(`${prefix}:*`);
      if (keys.length) await redis.del(...keys);
      redis.disconnect();
      hook.server.close();
    }
  });
});

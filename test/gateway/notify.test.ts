// Notifications: bursts coalesce; a failing target is retried and logged, never thrown.
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, expect, it } from 'vitest';
import { Notifier } from '../../gateway/src/notify';

describe('notifier', () => {
  it('a thousand enqueues make one message per target, with counts and ids', async () => {
    const logs: string[] = [];
    const n = new Notifier(['ops@example.com'], { windowMs: 60_000, log: { warn: (m) => logs.push(m), info: (m) => logs.push(m) } });
    for (let i = 0; i < 1000; i++) n.notify({ kind: 'enqueued', jobIds: [`job-${i}`], tenant: `t${i % 3}` });
    await n.flush();
    expect(n.sent).toHaveLength(1);
    expect(n.sent[0].subject).toBe('AI requests queued (Cold tier) (1000)');
    expect(n.sent[0].text).toContain('Jobs (1000): job-0, job-1');
    expect(n.sent[0].text).toContain('and 980 more');
    expect(n.sent[0].text).toContain('Tenants: t0, t1, t2');
    expect(logs.join('\n')).toMatch(/e-mail to ops@example.com \(not sent: SMTP_URL is not set\)/);
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
});

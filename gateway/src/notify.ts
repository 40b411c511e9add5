/**
 * Human notifications: on enqueue to Cold, on a budget pause, on a dead-lettered job
 * and on work routed to human review. Targets are the routing map's `cold.notify`: an https URL
 * gets a Slack-compatible JSON post; an e-mail address goes through SMTP_URL (nodemailer), or is
 * logged when SMTP_URL is unset. Bursts are coalesced: notices of one kind within a window (60 s
 * by default) make one message with counts, tenants and ids. A failed delivery is retried and
 * logged; it never delays a request (nothing here is awaited on the request path).
 */
import nodemailer, { type Transporter } from 'nodemailer';
import { retrying, type RetryPolicy } from './backoff';

export type NoticeKind = 'enqueued' | 'paused' | 'dead_lettered' | 'human_review';

export interface Notice {
  kind: NoticeKind;
  jobIds?: string[];
  tenant?: string;
  detail?: string;
}

export interface Sent {
  target: string;
  subject: string;
  text: string;
}

type Log = { warn: (m: string) => void; info: (m: string) => void };

/** A failed delivery is tried twice more, 1 s and then 5 s later. */
const DELIVERY_RETRY: RetryPolicy = { attempts: 3, firstMs: 1000, factor: 5 };
/** Delivered messages kept for inspection (tests, a debugger); older ones are dropped. */
const KEEP_SENT = 100;

const NEXT_ACTION: Record<NoticeKind, string> = {
  enqueued:
    'Retried automatically by the worker: 5 attempts, backoff 1, 2, 4, 8 s. Clients poll GET /v1/jobs/<id>. If jobs dead-letter, move them back with `npm run ops -- dlq move <id>`.',
  paused:
    'Queued work is paused until an operator resumes it: POST /budget/resume or `npm run ops -- resume`. Live requests avoid the capped provider.',
  dead_lettered:
    'These jobs used all 5 attempts. Inspect with `npm run ops -- dlq list`, move back with `npm run ops -- dlq move <id>`, and tell the client if needed (degraded > 15 min).',
  human_review:
    'A person must answer these: spend caps are exceeded and the caller needs an answer. Find them with `npm run ops -- status`.',
};

const TITLE: Record<NoticeKind, string> = {
  enqueued: 'AI requests queued (Cold tier)',
  paused: 'AI work paused by the budget guardrail',
  dead_lettered: 'Queued AI jobs dead-lettered',
  human_review: 'AI requests routed to human review',
};

export class Notifier {
  private readonly pending = new Map<NoticeKind, Notice[]>();
  private timer: NodeJS.Timeout | null = null;
  private readonly mailer: Transporter | null;
  private readonly recent: Sent[] = [];
  private inflight: Promise<unknown>[] = [];

  constructor(
    private readonly targets: string[],
    private readonly opts: { windowMs?: number; smtpUrl?: string; onCall?: string; log: Log; retry?: RetryPolicy },
  ) {
    this.mailer = opts.smtpUrl ? nodemailer.createTransport(opts.smtpUrl) : null;
  }

  /** The last 100 messages delivered, oldest first. */
  get sent(): readonly Sent[] {
    return this.recent;
  }

  notify(notice: Notice): void {
    const list = this.pending.get(notice.kind) ?? [];
    list.push(notice);
    this.pending.set(notice.kind, list);
    this.timer ??= setTimeout(() => void this.flush(), this.opts.windowMs ?? 60_000);
    this.timer.unref?.();
  }

  /** One message per kind for everything pending. */
  async flush(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    const batches = [...this.pending];
    this.pending.clear();
    for (const [kind, notices] of batches) {
      const ids = notices.flatMap((n) => n.jobIds ?? []);
      const tenants = [...new Set(notices.map((n) => n.tenant).filter(Boolean))];
      const details = [...new Set(notices.map((n) => n.detail).filter(Boolean))];
      const subject = `${TITLE[kind]}${notices.length > 1 ? ` (${notices.length})` : ''}`;
      const text = [
        `${subject}`,
        ids.length ? `Jobs (${ids.length}): ${ids.slice(0, 20).join(', ')}${ids.length > 20 ? `, and ${ids.length - 20} more` : ''}` : '',
        tenants.length ? `Tenants: ${tenants.slice(0, 20).join(', ')}` : '',
        ...details.slice(0, 5),
        `Next: ${NEXT_ACTION[kind]}`,
        this.opts.onCall ? `On call: ${this.opts.onCall}` : '',
      ]
        .filter(Boolean)
        .join('\n');
      for (const target of this.targets) this.inflight.push(this.deliver(target, subject, text));
    }
    const all = this.inflight;
    this.inflight = [];
    await Promise.all(all);
  }

  private async deliver(target: string, subject: string, text: string): Promise<void> {
    try {
      await retrying(() => this.send(target, subject, text), this.opts.retry ?? DELIVERY_RETRY);
    } catch (error) {
      this.opts.log.warn(`notification to ${redactTarget(target)} failed: ${(error as Error).message}`);
      return;
    }
    this.recent.push({ target, subject, text });
    if (this.recent.length > KEEP_SENT) this.recent.splice(0, this.recent.length - KEEP_SENT);
  }

  private async send(target: string, subject: string, text: string): Promise<void> {
    if (/^https:\/\//.test(target) || /^http:\/\/(127\.0\.0\.1|localhost)[:/]/.test(target)) {
      const res = await fetch(target, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          text,
          blocks: [
            { type: 'header', text: { type: 'plain_text', text: subject } },
            { type: 'section', text: { type: 'mrkdwn', text } },
          ],
        }),
        signal: AbortSignal.timeout(10_000),
      });
      if (!res.ok) throw new Error(`HTTP ${res.status}`);
      return;
    }
    if (/^[^\s@]+@[^\s@]+$/.test(target)) {
      if (!this.mailer) {
        this.opts.log.info(`e-mail to ${target} (not sent: SMTP_URL is not set): ${subject}\n${text}`);
        return;
      }
      await this.mailer.sendMail({ to: target, from: process.env.SMTP_FROM ?? 'ai-gateway@localhost', subject, text });
      return;
    }
    throw new Error('not an https URL or an e-mail address');
  }
}

/** Webhook URLs carry their secret in the path: logs show only the host. */
function redactTarget(target: string): string {
  try {
    return new URL(target).host;
  } catch {
    return target;
  }
}

/**
 * Human notifications: on enqueue to Cold, on a budget pause, on a dead-lettered job
 * and on work routed to human review. Targets are the routing map's `cold.notify`: an https URL
 * gets a Slack-compatible JSON post; an e-mail address goes through SMTP_URL (nodemailer), or is
 * logged when SMTP_URL is unset. The first notice of a kind goes out at once; the notices that
 * follow it within a window (60 s by default) make one follow-up at the window's end, with counts,
 * tenants and ids. The windows are the fleet's with Redis (notice-windows.ts): one message per
 * window however many instances notify. Caller text is escaped for Slack's mrkdwn. A failed delivery is retried and
 * logged; it never delays a request (nothing here is awaited on the request path).
 */
import nodemailer, { type Transporter } from 'nodemailer';
import SMTPTransport from 'nodemailer/lib/smtp-transport/index.js';
import { retrying, type RetryPolicy } from './backoff';
import { cutText } from '../../schema/cut-text';
import { MemoryNoticeWindows, type NoticeWindows } from './notice-windows';
import { noticeChannel } from './routes-map';
import { within } from './within';

export { noticeWindowsFor } from './notice-windows';

const NOTICE_KINDS = ['enqueued', 'paused', 'dead_lettered', 'human_review', 'meter_backlog', 'queue_full'] as const;
export type NoticeKind = (typeof NOTICE_KINDS)[number];

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
/** A window's store that does not answer within this is treated as away (the notice goes on its own). */
const STORE_WAIT_MS = 2000;
/**
 * How often an instance looks for follow-ups held by an instance that stopped before its window
 * ended: well within the minute held notices outlive their window (notice-windows.ts).
 */
const SWEEP_MS = 15_000;
/** How long one try of a delivery may take, to a webhook or an SMTP server. */
const DELIVERY_TIMEOUT_MS = 10_000;

/**
 * The SMTP transport, each wait bounded by the delivery's timeout: nodemailer's own let a server that
 * greeted and then went silent hold one try for 10 minutes, the notice (and its retries) with it.
 */
const mailer = (url: string, timeoutMs: number) =>
  // The transport made here, not by createTransport: given a url, createTransport keeps only what the url says.
  nodemailer.createTransport(
    new SMTPTransport({ url, connectionTimeout: timeoutMs, greetingTimeout: timeoutMs, socketTimeout: timeoutMs }),
  );

/** How long a stop waits for notices still being delivered (notify.close). */
const CLOSE_DELIVERY_MS = 2000;

const NEXT_ACTION: Record<NoticeKind, string> = {
  enqueued:
    'Retried automatically by the worker: 5 real tries (backoff 1, 2, 4, 8 s); while every route is open or the budget pause is on, jobs wait without spending tries, for up to 24 h. Clients poll GET /v1/jobs/<id>. If jobs dead-letter, move them back with `npm run ops -- dlq move <id>`.',
  paused:
    'Queued work waits, no tries spent, until an operator resumes it: POST /budget/resume or `npm run ops -- resume`. A job still waiting 24 h after it began to wait is dead-lettered (move it back with `npm run ops -- dlq move --all` once resumed). Live requests avoid the capped provider.',
  dead_lettered:
    'These jobs used all 5 tries, waited 24 h for a route or the budget pause, or were refused as malformed (the last error says which). Inspect with `npm run ops -- dlq list`, move back with `npm run ops -- dlq move <id>` (kept 30 days), and tell the client if needed (degraded > 15 min).',
  human_review:
    'A person must answer these: spend caps are exceeded and the caller needs an answer. Their ids are listed above; `npm run ops -- job <id>` shows each (its tenant, when it was queued); the worker tries the routing for each again 24 h after it was queued. `npm run ops -- status` only counts them, among the delayed jobs.',
  queue_full:
    "The Cold queue's Redis is at 90 % of its maxmemory, so requests that would be queued (no route answered, or a spend cap holds them) get 503 cold_queue_full instead. Jobs already queued run once a provider answers, and the queue drains; free or grow Redis (maxmemory) to queue more. `npm run ops -- status` shows the queue's counts.",
  meter_backlog:
    "Meter events are piling up on this gateway's disk (nothing is dropped). Check METER_URL, METER_TOKEN and the web app's deployment, and the free space of METER_SPOOL_DIR; GET /health shows the backlog.",
};

const TITLE: Record<NoticeKind, string> = {
  enqueued: 'AI requests queued (Cold tier)',
  paused: 'AI work paused by the budget guardrail',
  dead_lettered: 'Queued AI jobs dead-lettered',
  human_review: 'AI requests routed to human review',
  meter_backlog: 'Meter events not delivered: spool over its limit',
  queue_full: 'AI requests refused: the Cold queue is full',
};

/** Caller text (tenants, provider errors) shown in a notice is cut to this many characters. */
const MAX_ITEM_CHARS = 200;
const cut = (text: string) => (text.length > MAX_ITEM_CHARS ? `${cutText(text, MAX_ITEM_CHARS)}…` : text);

/** Slack's mrkdwn reads `<…>` as links and mentions (`<!channel>`); caller text is escaped as Slack documents. */
function slackEscape(text: string): string {
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}

/** Slack refuses a message (HTTP 400 `invalid_blocks`) whose section text is longer than this. */
const SECTION_CHARS = 3000;

/**
 * The message's text as Slack sections of at most SECTION_CHARS, split between lines where it can:
 * a follow-up's tenants and errors, once escaped, can be many times that, and one section over the
 * limit had the whole notice refused.
 */
function sections(text: string): string[] {
  const parts: string[] = [];
  let part = '';
  for (const piece of text.split('\n').flatMap(pieces)) {
    if (part && part.length + 1 + piece.length > SECTION_CHARS) {
      parts.push(part);
      part = '';
    }
    part = part ? `${part}\n${piece}` : piece;
  }
  return part ? [...parts, part] : parts;
}

/** A line in pieces of at most SECTION_CHARS, none ending inside an escape (`&amp;`: every `&` starts one) or a character. */
function pieces(line: string): string[] {
  const out: string[] = [];
  while (line.length > SECTION_CHARS) {
    const amp = line.lastIndexOf('&', SECTION_CHARS - 1);
    const head = cutText(line, amp >= 0 && line.indexOf(';', amp) >= SECTION_CHARS ? amp : SECTION_CHARS);
    out.push(head);
    line = line.slice(head.length);
  }
  return [...out, line];
}

export class Notifier {
  /** The window ends this process waits for, one timer per kind, to send the follow-up. */
  private readonly timers = new Map<NoticeKind, NodeJS.Timeout>();
  private readonly windows: NoticeWindows;
  private readonly mailer: Transporter | null;
  private readonly recent: Sent[] = [];
  /** Notices being placed in their window, and deliveries under way (what and to whom); each leaves when settled. */
  private readonly placing = new Set<Promise<void>>();
  private readonly inflight = new Map<Promise<void>, string>();
  private readonly sweeper: NodeJS.Timeout;
  /** The last sweep's read, until Redis answers it: sweeps meanwhile send none (they would pile up). */
  private looking: Promise<unknown> | null = null;

  constructor(
    private readonly targets: string[],
    private readonly opts: {
      windowMs?: number;
      smtpUrl?: string;
      /** The sender of e-mail notices, as the checked environment has SMTP_FROM (default ai-gateway@localhost). */
      smtpFrom?: string;
      onCall?: string;
      log: Log;
      retry?: RetryPolicy;
      /** How long one try of a delivery may take, webhook or SMTP (DELIVERY_TIMEOUT_MS; shortened by tests). */
      timeoutMs?: number;
      /** The windows (in process unless given; notice-windows.ts). */
      windows?: NoticeWindows;
      /** How often to look for lapsed follow-ups (SWEEP_MS; shortened by tests). */
      sweepMs?: number;
    },
  ) {
    this.mailer = opts.smtpUrl ? mailer(opts.smtpUrl, opts.timeoutMs ?? DELIVERY_TIMEOUT_MS) : null;
    this.windows = opts.windows ?? new MemoryNoticeWindows();
    this.sweeper = setInterval(() => this.track(this.sweep()), opts.sweepMs ?? SWEEP_MS);
    this.sweeper.unref?.();
    this.track(this.sweep()); // at start: what this instance held before a crash, among others
  }

  /** The last 100 messages delivered, oldest first. */
  get sent(): readonly Sent[] {
    return this.recent;
  }

  private get windowMs(): number {
    return this.opts.windowMs ?? 60_000;
  }

  /**
   * The first notice of a kind goes out at once and opens a window; notices within the window
   * make one follow-up at its end (counts, tenants, ids). A window that ends with nothing held
   * closes: the next notice goes out at once again.
   */
  notify(notice: Notice): void {
    this.track(this.place(notice));
  }

  private async place(notice: Notice): Promise<void> {
    // NOTIFY_WINDOW_MS=0: no window, each notice on its own (Redis refuses a window of 0 ms, which read as Redis away).
    if (this.windowMs <= 0) return this.send(notice.kind, [notice], false);
    try {
      if (await within(this.windows.open(notice.kind, this.windowMs), STORE_WAIT_MS, 'Redis')) {
        this.send(notice.kind, [notice], false);
        this.endAt(notice.kind, this.windowMs);
        return;
      }
      this.endAt(notice.kind, await within(this.windows.hold(notice.kind, notice, this.windowMs), STORE_WAIT_MS, 'Redis'));
    } catch (error) {
      // The windows' store did not answer: a message of its own rather than none.
      this.opts.log.warn(`notification windows unavailable (${(error as Error).message}); this notice is sent on its own`);
      this.send(notice.kind, [notice], false);
    }
  }

  /** This process sends the follow-up at the window's end, unless it already waits for one. */
  private endAt(kind: NoticeKind, ms: number): void {
    if (this.timers.has(kind)) return;
    const timer = setTimeout(() => this.track(this.endWindow(kind)), ms);
    timer.unref?.();
    this.timers.set(kind, timer);
  }

  /** Tracks background work so that flush() waits for it. */
  private track(work: Promise<void>): void {
    const tracked: Promise<void> = work
      .catch((error) => this.opts.log.warn(`notification window failed: ${(error as Error).message}`))
      .finally(() => this.placing.delete(tracked));
    this.placing.add(tracked);
  }

  /** The window's end: the follow-up for what it held (if another instance has not sent it), and a new window after it. */
  private async endWindow(kind: NoticeKind): Promise<void> {
    this.timers.delete(kind);
    const held = await this.windows.take(kind);
    if (held.notices.length) this.send(kind, held.notices, true, held.total);
    await this.windows.sent(kind, held); // only now: a take alone removes nothing
    if (!held.notices.length) {
      await this.windows.close(kind);
      return;
    }
    await this.windows.open(kind, this.windowMs, true);
    this.endAt(kind, this.windowMs);
  }

  /** Follow-ups held by instances that stopped before their window's end: sent as this instance's own would be. */
  private async sweep(): Promise<void> {
    // The store away: its notices go out on their own (place), and the next sweep looks again.
    if (this.looking) return;
    const look = (this.looking = this.windows.lapsed(NOTICE_KINDS));
    void look.catch(() => undefined).finally(() => (this.looking = null));
    const lapsed = await within(look, STORE_WAIT_MS, 'Redis').catch(() => []);
    for (const kind of lapsed) if (!this.timers.has(kind)) await this.endWindow(kind);
  }

  /**
   * Stops looking for lapsed follow-ups, then flushes (shutdown), waiting at most CLOSE_DELIVERY_MS
   * for the deliveries under way: a target down or hanging holds each for up to 36 s of tries, which
   * held an idle gateway's stop past Kubernetes' 30 s (then SIGKILLed, the meter's last flush with it).
   */
  async close(): Promise<void> {
    clearInterval(this.sweeper);
    await this.flush(CLOSE_DELIVERY_MS);
  }

  /** Sends this process's pending follow-ups now (shutdown, tests) and waits for every delivery under way (at most `deliveryMs`). */
  async flush(deliveryMs = Infinity): Promise<void> {
    // Bounded: a store that is connected but stalls must not hold a stop. What it holds stays held,
    // and another instance sends its follow-up once its window ends (sweep).
    let away = await within(this.placed(), STORE_WAIT_MS, 'Redis').then(
      () => false,
      () => true,
    );
    for (const [kind, timer] of [...this.timers]) {
      clearTimeout(timer);
      this.timers.delete(kind);
      if (!away) away = !(await this.followUpNow(kind));
    }
    await this.delivered(deliveryMs);
  }

  /**
   * The follow-up of what is held for `kind`, sent now (flush); false if the store did not answer in time.
   * A take given up on may still run once the store answers: it only claims and reads, and what it read
   * stays held until marked sent, for another instance to send once the claim lapses.
   */
  private async followUpNow(kind: NoticeKind): Promise<boolean> {
    const held = await within(this.windows.take(kind), STORE_WAIT_MS, 'Redis').catch(() => null);
    if (!held) this.opts.log.warn(`notification windows did not answer: the ${kind} follow-up stays held for another instance to send`);
    await within(this.windows.close(kind), STORE_WAIT_MS, 'Redis').catch(() => undefined);
    if (!held) return false;
    if (held.notices.length) this.send(kind, held.notices, true, held.total);
    return within(this.windows.sent(kind, held), STORE_WAIT_MS, 'Redis').then(
      () => true,
      () => false,
    );
  }

  /** Waits for the deliveries under way, at most `ms`; those still going then are logged as not delivered. */
  private async delivered(ms: number): Promise<void> {
    const all = Promise.all([...this.inflight.keys()]);
    if (!Number.isFinite(ms)) return void (await all);
    const done = await within(all, ms).then(
      () => true,
      () => false,
    );
    if (done) return;
    for (const what of this.inflight.values())
      this.opts.log.warn(`notification ${what} not delivered before the stop (${ms} ms): not sent`);
  }

  /** Resolves once every notice is placed in its window and every window end under way is done. */
  private async placed(): Promise<void> {
    while (this.placing.size) await Promise.all([...this.placing]);
  }

  /** One message for these notices, to every target (delivery not awaited here). */
  private send(kind: NoticeKind, notices: Notice[], followUp: boolean, total = notices.length): void {
    const ids = notices.flatMap((n) => n.jobIds ?? []);
    const tenants = [...new Set(notices.map((n) => n.tenant).filter(Boolean))] as string[];
    const details = [...new Set(notices.map((n) => n.detail).filter(Boolean))] as string[];
    const subject = followUp ? `${TITLE[kind]} (${total} more since the first notice)` : TITLE[kind];
    const text = [
      `${subject}`,
      ids.length ? `Jobs (${ids.length}): ${ids.slice(0, 20).join(', ')}${ids.length > 20 ? `, and ${ids.length - 20} more` : ''}` : '',
      tenants.length
        ? `Tenants: ${tenants.slice(0, 20).map(cut).join(', ')}${tenants.length > 20 ? `, and ${tenants.length - 20} more` : ''}`
        : '',
      ...details.slice(0, 5).map(cut),
      total > notices.length ? `(${total - notices.length} more notices not listed)` : '',
      `Next: ${NEXT_ACTION[kind]}`,
      this.opts.onCall ? `On call: ${this.opts.onCall}` : '',
    ]
      .filter(Boolean)
      .join('\n');
    for (const target of this.targets) {
      const delivery: Promise<void> = this.deliver(target, subject, text).finally(() => this.inflight.delete(delivery));
      this.inflight.set(delivery, `"${subject}" to ${redactTarget(target)}`);
    }
  }

  private async deliver(target: string, subject: string, text: string): Promise<void> {
    try {
      await retrying(() => this.post(target, subject, text), this.opts.retry ?? DELIVERY_RETRY);
    } catch (error) {
      this.opts.log.warn(`notification to ${redactTarget(target)} failed: ${(error as Error).message}`);
      return;
    }
    this.recent.push({ target, subject, text });
    if (this.recent.length > KEEP_SENT) this.recent.splice(0, this.recent.length - KEEP_SENT);
  }

  private async post(target: string, subject: string, text: string): Promise<void> {
    const channel = noticeChannel(target);
    if (channel === 'webhook') {
      const mrkdwn = slackEscape(text);
      const res = await fetch(target, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          text: mrkdwn,
          blocks: [
            // The subject is ours alone (a title and a count): plain text, nothing to escape.
            { type: 'header', text: { type: 'plain_text', text: subject } },
            // verbatim: Slack otherwise turns the text's URLs into links, `#name` into a channel's and
            // `@here` into a mention (its "automatic parsing"), which escaping does not stop.
            ...sections(mrkdwn).map((text) => ({ type: 'section', text: { type: 'mrkdwn', text, verbatim: true } })),
          ],
        }),
        signal: AbortSignal.timeout(this.opts.timeoutMs ?? DELIVERY_TIMEOUT_MS),
      });
      if (!res.ok) throw new Error(`HTTP ${res.status}`);
      return;
    }
    if (channel === 'email') {
      if (!this.mailer) {
        this.opts.log.info(`e-mail to ${target} (not sent: SMTP_URL is not set): ${subject}\n${text}`);
        return;
      }
      await this.mailer.sendMail({ to: target, from: this.opts.smtpFrom ?? 'ai-gateway@localhost', subject, text });
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

/**
 * The meter web app as Apps Script serves it, on loopback: a POST is answered 302 to a GET that
 * carries the reply, always HTTP 200 with `{ok:true,...}` or `{ok:false,error,code}`. It checks each
 * event with the shared record's rules (schema/event-record.ts) and, as the meter does, refuses a
 * whole batch at its first bad event, naming it; it stores each event_id once. `mode` makes it
 * busy (the script lock was not free: retry) or down (HTTP 500); `downAfter` takes it down once it
 * has answered a number of batches.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { normalizeEvent } from '../../schema/event-record';

/** How far ahead of the meter's clock an event may be stamped (the meter's clock-skew allowance). */
const MAX_FUTURE_MS = 5 * 60_000;

export class FakeMeterWebApp {
  stored: string[] = [];
  /** Every event as stored, by event_id. */
  events = new Map<string, Record<string, unknown>>();
  requests: string[] = [];
  /** Batches posted (event counts), in order. */
  posts: number[] = [];
  mode: 'ok' | 'busy' | 'down' = 'ok';
  /** Batches still answered before the meter goes down (`downAfter`). */
  private answersLeft = Infinity;
  /** While set, POSTs wait for it; a POST whose caller went away meanwhile is not ingested. */
  private held: Promise<void> | null = null;
  private unhold: () => void = () => {};
  server!: Server;
  url = '';
  private answers = new Map<string, string>();
  constructor(private readonly token = 'tok') {}

  async start(): Promise<this> {
    let n = 0;
    this.server = createServer(async (req, res) => {
      let body = '';
      for await (const c of req) body += c;
      this.requests.push(`${req.method} ${req.url!.split('?')[0]}`);
      if (this.mode === 'down') return void res.writeHead(500).end('down');
      if (req.method === 'POST') {
        if (this.answersLeft-- <= 0) return void res.writeHead(500).end('down');
        let gone = false;
        res.on('close', () => (gone = !res.writableFinished));
        await this.held;
        if (gone) return;
        const key = `k${n++}`;
        this.answers.set(key, JSON.stringify(this.ingest(new URL(req.url!, 'http://x'), body)));
        return void res.writeHead(302, { location: `/echo?user_content_key=${key}` }).end();
      }
      const key = new URL(req.url!, 'http://x').searchParams.get('user_content_key')!;
      res.writeHead(200, { 'content-type': 'application/json' }).end(this.answers.get(key) ?? '{"ok":false,"error":"no such answer"}');
    });
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}/exec`;
    return this;
  }

  private ingest(url: URL, body: string): object {
    if (url.searchParams.get('token') !== this.token) return { ok: false, error: 'unauthorized', code: 'unauthorized' };
    if (this.mode === 'busy') return { ok: false, error: 'busy: the meter is handling another request, try again', code: 'busy' };
    let events: Array<Record<string, unknown>>;
    try {
      events = JSON.parse(body).events;
    } catch {
      return { ok: false, error: 'body: expected JSON, could not parse it', code: 'invalid_body' }; // as the web app answers
    }
    this.posts.push(events.length);
    const now = new Date();
    try {
      events.forEach((e, index) => {
        normalizeEvent(e, { now: () => now, uuid: () => 'x', index });
        const at = Date.parse(String(e.timestamp));
        if (at > now.getTime() + MAX_FUTURE_MS)
          throw new Error(`events[${index}].timestamp: expected a time at most 5 minutes after the meter's clock`);
      });
    } catch (error) {
      const message = (error as Error).message;
      return { ok: false, error: message, code: /timestamp: expected a time/.test(message) ? 'future_timestamp' : 'invalid_event' };
    }
    const fresh = events.filter((e) => !this.events.has(String(e.event_id)));
    for (const e of fresh) {
      this.stored.push(String(e.event_id));
      this.events.set(String(e.event_id), e);
    }
    return { ok: true, appended: fresh.length, duplicates: events.length - fresh.length };
  }

  /** Answers `batches` more batches, then every POST gets HTTP 500 (a meter lost in the middle of a delivery); `downAfter(Infinity)` brings it back. */
  downAfter(batches: number): void {
    this.answersLeft = batches;
  }

  /** Holds every POST until `release` (a slow meter: batches stay pending with the gateways). */
  hold(): void {
    this.held = new Promise((r) => (this.unhold = r));
  }
  release(): void {
    this.held = null;
    this.unhold();
  }

  stop(): Promise<void> {
    this.release();
    this.server.closeAllConnections();
    return new Promise<void>((r) => this.server.close(() => r()));
  }
}

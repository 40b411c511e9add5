// The back office on loopback: the meter's built bundle (apps-script/dist) running in node:vm on
// the fake Google services, behind an HTTP server that passes each POST to its doPost as Apps
// Script would (`?action=…&token=…`, the JSON body), so the workflow's webhooks reach the real
// back-office code: calendar events, contacts, tasks, the voicemail folder. Its clock follows the
// drill's; a recording URL is answered with the bytes the drill's Twilio recorded (no network).
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { callJson } from '../meter/fakes/platform';
import { backOffice, SECRET } from '../meter/backoffice-setup';

export interface Delivery {
  action: string;
  body: unknown;
  reply: { ok: boolean; replayed?: boolean; [k: string]: unknown };
}

export class BackOfficePeer {
  private readonly office = backOffice();
  /** Every request the back office answered, in order. */
  readonly deliveries: Delivery[] = [];
  /** Recordings Twilio holds, by URL (the back office fetches them); as base64 text, since the fake services carry text. */
  readonly recordings = new Map<string, string>();
  private server!: Server;
  url = '';

  constructor(private readonly now: () => number) {
    this.office.platform.urlFetch.respond = (req) => {
      const body = this.recordings.get(req.url) ?? this.recordings.get(req.url.replace(/\.mp3$/, ''));
      return body ? { code: 200, body } : { code: 404 };
    };
  }

  /** The webhook URL of a back-office action, as an operator would configure it. */
  webhook(action: string): string {
    return `${this.url}/exec?action=${action}&token=${SECRET}`;
  }

  async start(): Promise<this> {
    this.server = createServer(async (req, res) => {
      let text = '';
      for await (const c of req) text += c;
      const params = Object.fromEntries(new URL(req.url ?? '/', 'http://x').searchParams);
      this.office.platform.clock.set(new Date(this.now()).toISOString());
      const reply = callJson(this.office.meter, 'doPost', params, text);
      this.deliveries.push({ action: params.action ?? '', body: JSON.parse(text || 'null'), reply });
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(reply));
    });
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this;
  }

  async stop(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((r) => this.server.close(() => r()));
  }

  /** Posts a body to an action again, as a replayed webhook would. */
  async replay(d: Delivery): Promise<Delivery['reply']> {
    const res = await fetch(this.webhook(d.action), {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(d.body),
    });
    return (await res.json()) as Delivery['reply'];
  }

  /** A tab's rows as records (header → value). */
  rows(tab: string): Array<Record<string, unknown>> {
    const data = this.office.platform.spreadsheet.tab(tab)?.data ?? [];
    const [header, ...rows] = data;
    return rows.map((r) => Object.fromEntries((header ?? []).map((h, i) => [String(h), r[i]])));
  }

  /** Calendar events not deleted. */
  bookings(): number {
    return this.office.platform.calendar.live().length;
  }

  /** Files of the voicemail folder: name and content. */
  voicemails(): Array<{ name: string; content: string }> {
    const folder = this.office.platform.drive.live('voicemail').at(0);
    return (folder?.files ?? []).map((f) => ({ name: f.getName(), content: f.content }));
  }
}

/**
 * A graceful stop for a server: stop accepting, let the requests and streams in flight finish (up
 * to a grace period, inside Kubernetes' default 30 s between SIGTERM and SIGKILL), then cut what is
 * left. Keep-alive connections are told to close after their current answer, so a client that keeps
 * its connection open does not hold the process.
 */
import type { Server, ServerResponse } from 'node:http';
import type { Logger } from 'pino';

export interface Drain {
  /**
   * Resolves once no request is in flight, or the grace period is over; true when all finished.
   * `cut`, at the end of the grace: ends what is left in its own way (a stream with its error
   * event), given CUT_MS for that before the connections still open are closed; it says how many.
   */
  close(graceMs: number, cut?: () => number): Promise<boolean>;
}

/** How long the streams cut at the end of the grace have to write their end: they only unwind. */
const CUT_MS = 500;

/**
 * Makes an answer the last on its connection. Else its client sends its next request there once
 * it ends, and that request is cut when the stop closes the connection, rather than refused at connect.
 */
function lastOnConnection(res: ServerResponse): void {
  if (!res.headersSent) return void res.setHeader('connection', 'close');
  const socket = res.socket; // an answer already under way (a stream): its connection ends after it
  res.once('close', () => socket?.end());
}

interface Entry {
  res: ServerResponse;
  prev: Entry | null;
  next: Entry | null;
}

/**
 * The answers under way, as a linked list. Not a Set: hashing each ServerResponse cost the hot path
 * about 10 µs a request (V8 makes an identity hash for it), a tenth of its CPU time.
 */
class AnswersInFlight {
  size = 0;
  private head: Entry | null = null;
  add(res: ServerResponse): Entry {
    const entry: Entry = { res, prev: null, next: this.head };
    if (this.head) this.head.prev = entry;
    this.head = entry;
    this.size++;
    return entry;
  }
  delete(entry: Entry): void {
    if (entry.prev) entry.prev.next = entry.next;
    else this.head = entry.next;
    if (entry.next) entry.next.prev = entry.prev;
    this.size--;
  }
  *[Symbol.iterator](): Generator<ServerResponse> {
    for (let e = this.head; e; e = e.next) yield e.res;
  }
}

export function trackRequests(server: Server): Drain {
  const inFlight = new AnswersInFlight();
  let closing = false;
  let idle: (() => void) | null = null;
  server.on('request', (req, res: ServerResponse) => {
    const entry = inFlight.add(res);
    if (closing) lastOnConnection(res);
    res.once('close', () => {
      inFlight.delete(entry);
      if (closing && inFlight.size === 0) idle?.();
    });
  });
  /** Resolves true once nothing is in flight, false after `ms`. */
  const settled = (ms: number) =>
    inFlight.size === 0
      ? Promise.resolve(true)
      : new Promise<boolean>((resolve) => {
          const timer = setTimeout(() => resolve(false), ms);
          idle = () => {
            clearTimeout(timer);
            resolve(true);
          };
        });
  return {
    async close(graceMs, cut) {
      closing = true;
      for (const res of inFlight) lastOnConnection(res);
      server.close(); // no new connections; idle keep-alive connections are closed
      server.closeIdleConnections();
      const finished = await settled(graceMs);
      if (!finished && cut && cut() > 0) await settled(CUT_MS);
      server.closeAllConnections();
      return finished;
    },
  };
}

/** A SIGHUP came while the process was starting (holdHangups). */
let hungUp = false;
const heldHangup = () => (hungUp = true);

/**
 * SIGHUP before onSignals: Node's default for it ends the process, so a map pushed to every
 * instance (`kill -HUP`) ended one that was starting. Held instead; onSignals reloads once up.
 */
export function holdHangups(): void {
  if (!process.listeners('SIGHUP').includes(heldHangup)) process.on('SIGHUP', heldHangup);
}

/**
 * `stop` on the first SIGTERM or SIGINT, and `reload` on SIGHUP until then (and at once for one held while starting). Later stop signals are
 * logged and ignored: with `once`, a second one (Ctrl-C reaches `npm start`'s process twice, from
 * the terminal and from npm) killed the process mid-grace, its calls unmetered. A SIGHUP during the
 * stop reloads nothing (the stores it needs are being closed).
 */
export function onSignals(log: Logger, stop: () => Promise<void>, reload: () => Promise<unknown>): void {
  let stopping = false;
  const once = (signal: string) => {
    if (stopping) return log.info(`${signal} ignored: already shutting down`);
    stopping = true;
    void stop();
  };
  process.on('SIGTERM', () => once('SIGTERM'));
  process.on('SIGINT', () => once('SIGINT'));
  const hangup = () => {
    if (stopping) return log.info('SIGHUP ignored: shutting down, the routing map is not reloaded');
    void reload().catch(() => {}); // a refused map is logged with its file and JSON path; the old one stays
  };
  process.off('SIGHUP', heldHangup);
  process.on('SIGHUP', hangup);
  if (hungUp) hangup(); // the map may have changed after the start read it
}

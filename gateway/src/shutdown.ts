/**
 * A graceful stop for a server: stop accepting, let the requests and streams in flight finish (up
 * to a grace period, inside Kubernetes' default 30 s between SIGTERM and SIGKILL), then cut what is
 * left. Keep-alive connections are told to close after their current answer, so a client that keeps
 * its connection open does not hold the process.
 */
import type { Server } from 'node:http';

export interface Drain {
  /** Resolves once no request is in flight, or the grace period is over; true when all finished. */
  close(graceMs: number): Promise<boolean>;
}

export function trackRequests(server: Server): Drain {
  let inFlight = 0;
  let closing = false;
  let idle: (() => void) | null = null;
  server.on('request', (req, res) => {
    inFlight++;
    if (closing) res.setHeader('connection', 'close');
    res.once('close', () => {
      inFlight--;
      if (closing && inFlight === 0) idle?.();
    });
  });
  return {
    async close(graceMs) {
      closing = true;
      server.close(); // no new connections; idle keep-alive connections are closed
      server.closeIdleConnections();
      if (inFlight === 0) return true;
      const finished = await new Promise<boolean>((resolve) => {
        const timer = setTimeout(() => resolve(false), graceMs);
        idle = () => {
          clearTimeout(timer);
          resolve(true);
        };
      });
      server.closeAllConnections();
      return finished;
    },
  };
}

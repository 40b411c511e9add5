/**
 * A request that offers to upgrade and that nothing here takes, served as the HTTP/1.1 request it
 * also is (a server may ignore the offer, RFC 9110 7.8). node hands every request with an `Upgrade`
 * to the 'upgrade' listener with its socket, and one closed there got no answer at all: curl's
 * `--http2` and Java's HttpClient offer h2c on every `http://` request, and met an empty reply on
 * every path. The request is given back to the server as it came, less the offer, its body after it.
 */
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { refuseManyHeaders } from './malformed-request';

/** The headers of an offer to upgrade: `Upgrade`, and h2c's `HTTP2-Settings` (RFC 7540 3.2). */
const OFFER = new Set(['upgrade', 'http2-settings']);

/** Counts a request node:http answered before its endpoint saw it (app.ts). */
type Refused = (req: IncomingMessage, status: number) => void;

export function serveOffer(server: Server, req: IncomingMessage, socket: Duplex, head: Buffer, refused: Refused): void {
  const answering = (socket as Duplex & { _httpMessage?: ServerResponse | null })._httpMessage;
  if (answering) {
    // Pipelined behind a request still being answered: the server's new reader of the connection
    // would queue its answer behind that one, where node's reader before it never takes it off (it
    // was never answered). It waits for the answers before it, as it would without the offer.
    answering.once('finish', () => {
      if (!socket.writable) return void socket.destroy(); // the last answer closed the connection
      (socket as Socket).setTimeout(server.timeout || 0); // the idle timeout the last answer set
      serveOffer(server, req, socket, head, refused);
    });
    return;
  }
  // node keeps a request's first 1,000 headers (maxHeadersCount) and drops the rest, while its
  // parser framed the body by all of them: written back without those, a Content-Length or
  // Transfer-Encoding among them is lost and the body read as a request of its own.
  const kept = server.maxHeadersCount ?? 1000;
  if (kept > 0 && req.rawHeaders.length >= kept * 2) {
    refuseManyHeaders(socket, kept);
    return refused(req, 431);
  }
  // Header bytes are read as Latin-1: written back so, they are the bytes that came.
  socket.unshift(Buffer.concat([Buffer.from(withoutOffer(req), 'latin1'), head]));
  server.emit('connection', socket);
}

/** The request's head as it came, less the offer's headers and the offer's tokens in `Connection`. */
function withoutOffer(req: IncomingMessage): string {
  const raw = req.rawHeaders;
  const lines = [`${req.method} ${req.url} HTTP/${req.httpVersion}`];
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i].toLowerCase();
    if (OFFER.has(name)) continue;
    let value = raw[i + 1];
    if (name === 'connection') {
      value = value
        .split(',')
        .map((token) => token.trim())
        .filter((token) => token && !OFFER.has(token.toLowerCase()))
        .join(', ');
      if (!value) continue;
    }
    lines.push(`${raw[i]}: ${value}`);
  }
  return `${lines.join('\r\n')}\r\n\r\n`;
}

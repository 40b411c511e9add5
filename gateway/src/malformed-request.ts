/**
 * Requests node:http answers itself, before any handler sees them: one it cannot read (not
 * well-formed HTTP, headers and URL over 16 KiB, not received in time), one that expects what
 * the gateway does not do (`Expect` other than 100-continue) and a CONNECT. Node's own answers have no body, which
 * the openai SDKs show as "431 status code (no body)"; these are in OpenAI's shape, as every other error.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import { openAiError } from './errors';
import { sendJson } from './http-io';

const ANSWERS: Record<string, [number, string, string]> = {
  HPE_HEADER_OVERFLOW: [431, 'Request Header Fields Too Large', 'request headers: over 16 KiB in all, the URL included'],
  HPE_CHUNK_EXTENSIONS_OVERFLOW: [413, 'Payload Too Large', 'body: chunk extensions over 16 KiB'],
  ERR_HTTP_REQUEST_TIMEOUT: [408, 'Request Timeout', 'the request was not received in time: send it again'],
};

/** An answer written on the socket itself, in OpenAI's shape, and the connection closed once it is sent. */
function answerOnSocket(socket: Duplex, status: number, reason: string, error: ReturnType<typeof openAiError>): void {
  const body = JSON.stringify(error);
  const head = `HTTP/1.1 ${status} ${reason}\r\ncontent-type: application/json; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n`;
  socket.write(head + body);
}

/** For node's `clientError`: answered as node would (only where no answer has begun), then closed. */
export function answerUnreadable(error: NodeJS.ErrnoException, socket: Duplex): void {
  const current = (socket as Duplex & { _httpMessage?: ServerResponse | null })._httpMessage;
  if (socket.writable && !current?.headersSent) {
    const [status, reason, message] = ANSWERS[error.code ?? ''] ?? [400, 'Bad Request', 'the request is not well-formed HTTP'];
    answerOnSocket(socket, status, reason, openAiError(message));
  }
  socket.destroy();
}

/**
 * For node's `connect`: a CONNECT (a client that took the gateway for its proxy) is a 405, where
 * node closed the connection unanswered as it does when no one listens for the method.
 */
export function refuseConnect(_req: IncomingMessage, socket: Duplex): void {
  const message = 'CONNECT is not allowed: the gateway is no proxy; send the request itself (POST /v1/chat/completions, …)';
  if (socket.writable)
    answerOnSocket(socket, 405, 'Method Not Allowed', openAiError(message, 'invalid_request_error', null, 'method_not_allowed'));
  // Closed once the answer is sent: node's connections are half-open, and ended only, this one stayed
  // open as long as its client kept its side so, with no timeout (node's reader has let it go).
  socket.end();
  if (socket.writableFinished) socket.destroy();
  else socket.once('finish', () => socket.destroy());
}

/**
 * For a request offering to upgrade with more header lines than node keeps (`kept`): served as it
 * came, it would lose the ones node dropped, so it is a 431, and the connection closed.
 */
export function refuseManyHeaders(socket: Duplex, kept: number): void {
  const message = `request headers: over ${kept.toLocaleString('en-US')} lines with an Upgrade header`;
  if (socket.writable) answerOnSocket(socket, 431, 'Request Header Fields Too Large', openAiError(message));
  socket.destroy();
}

/** For node's `checkExpectation`: an `Expect` the gateway cannot meet is a 417 naming it. */
export function refuseExpectation(req: IncomingMessage, res: ServerResponse): void {
  const expect = String(req.headers.expect).slice(0, 100);
  sendJson(res, 417, openAiError(`Expect: only 100-continue is supported, got "${expect}"`), { connection: 'close' });
}

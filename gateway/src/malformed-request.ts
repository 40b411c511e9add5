/**
 * Requests node:http answers itself, before any handler sees them: one it cannot read (not
 * well-formed HTTP, headers and URL over 16 KiB, not received in time) and one that expects what
 * the gateway does not do (`Expect` other than 100-continue). Node's own answers have no body, which
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

/** For node's `clientError`: answered as node would (only where no answer has begun), then closed. */
export function answerUnreadable(error: NodeJS.ErrnoException, socket: Duplex): void {
  const current = (socket as Duplex & { _httpMessage?: ServerResponse | null })._httpMessage;
  if (socket.writable && !current?.headersSent) {
    const [status, reason, message] = ANSWERS[error.code ?? ''] ?? [400, 'Bad Request', 'the request is not well-formed HTTP'];
    const body = JSON.stringify(openAiError(message));
    const head = `HTTP/1.1 ${status} ${reason}\r\ncontent-type: application/json; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n`;
    socket.write(head + body);
  }
  socket.destroy();
}

/** For node's `checkExpectation`: an `Expect` the gateway cannot meet is a 417 naming it. */
export function refuseExpectation(req: IncomingMessage, res: ServerResponse): void {
  const expect = String(req.headers.expect).slice(0, 100);
  sendJson(res, 417, openAiError(`Expect: only 100-continue is supported, got "${expect}"`), { connection: 'close' });
}

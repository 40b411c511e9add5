/**
 * Request bodies and JSON answers on plain node:http, for the chat endpoint's hot path (which
 * does not go through Express). What Express's json parser did for that path is done here: a
 * 20 MB limit (413), gzip/deflate/br bodies inflated (another coding → 415), and a body that is
 * not JSON, by its Content-Type or its text → 400 (the issue: a body that is not a valid request is
 * a 400). Every answer is written with one writeHead (headers and length at once).
 */
import type { IncomingMessage, OutgoingHttpHeaders, ServerResponse } from 'node:http';
import { createBrotliDecompress, createGunzip, createInflate } from 'node:zlib';

const MAX_BODY_BYTES = 20 * 1024 * 1024;

export type BodyResult = { ok: true; value: unknown } | { ok: false; status: 400 | 413 | 415; message: string };

const JSON_TYPE = /^application\/(?:[\w.+-]*\+)?json\s*(?:;|$)/i;
const DECODERS: Record<string, () => NodeJS.ReadWriteStream> = {
  gzip: createGunzip,
  'x-gzip': createGunzip,
  deflate: createInflate,
  br: createBrotliDecompress,
};

/** Refused before reading: the body is drained (so the connection can be reused) and not kept. */
function refuse(req: IncomingMessage, status: 400 | 413 | 415, message: string): Promise<BodyResult> {
  req.resume();
  return Promise.resolve({ ok: false, status, message });
}

/** Reads and parses a JSON request body. Never rejects: a bad body is a result with its status. */
export function readJsonBody(req: IncomingMessage, limit = MAX_BODY_BYTES): Promise<BodyResult> {
  const type = req.headers['content-type'];
  // No Content-Type at all is read as JSON (some clients omit it); any other type is refused.
  if (type !== undefined && !JSON_TYPE.test(type)) {
    return refuse(req, 400, `Content-Type: expected application/json, got "${type.slice(0, 100)}"`);
  }
  const encoding = (req.headers['content-encoding'] ?? 'identity').trim().toLowerCase();
  const decoder = encoding === 'identity' ? null : DECODERS[encoding];
  if (decoder === undefined) {
    return refuse(req, 415, `Content-Encoding: expected identity, gzip, deflate or br, got "${encoding.slice(0, 50)}"`);
  }
  const declared = Number(req.headers['content-length']);
  if (declared > limit) return refuse(req, 413, `body: larger than ${limit} bytes`);
  const source: NodeJS.ReadableStream = decoder ? req.pipe(decoder()) : req;
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let done = false;
    const finish = (result: BodyResult) => {
      if (done) return;
      done = true;
      resolve(result);
    };
    source.on('data', (chunk: Buffer) => {
      if (done) return;
      size += chunk.length;
      if (size > limit) {
        finish({ ok: false, status: 413, message: `body: larger than ${limit} bytes` });
        req.unpipe();
        req.resume();
        return;
      }
      chunks.push(chunk);
    });
    source.on('end', () => {
      if (done) return;
      const text = (chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, size)).toString('utf8');
      try {
        finish({ ok: true, value: JSON.parse(text) });
      } catch {
        finish({ ok: false, status: 400, message: 'body: expected a JSON object' });
      }
    });
    source.on('error', () =>
      finish({ ok: false, status: 400, message: decoder ? `body: not valid ${encoding} data` : 'body: the request was cut off' }),
    );
    req.on('aborted', () => finish({ ok: false, status: 400, message: 'body: the request was cut off' }));
  });
}

/** One JSON answer: status, headers and body written at once. */
export function sendJson(res: ServerResponse, status: number, value: unknown, headers?: OutgoingHttpHeaders): void {
  sendBody(res, status, JSON.stringify(value), 'application/json; charset=utf-8', headers);
}

/** `headers` (a fresh object from the caller) is completed in place with the type and length. */
export function sendBody(
  res: ServerResponse,
  status: number,
  body: string | Buffer,
  contentType: string,
  headers: OutgoingHttpHeaders = {},
): void {
  if (res.headersSent || res.destroyed) return;
  headers['content-type'] = contentType;
  headers['content-length'] = typeof body === 'string' ? Buffer.byteLength(body) : body.length;
  res.writeHead(status, headers);
  res.end(body);
}
